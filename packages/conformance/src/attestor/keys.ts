/** Agent keys: one made for the run (never linked), and the operator's linked one (`--agent-key`). */
import { createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject, sign } from "node:crypto";
import { encodeDidKey, rawPublicKey } from "@proto/protocol";

export interface AgentKey {
  did: string;
  privateKey: KeyObject;
  /** Base64url, no padding: `agent_pubkey_b64`. */
  publicKeyB64: string;
}

function fromPrivate(privateKey: KeyObject): AgentKey {
  const raw = rawPublicKey(createPublicKey(privateKey));
  return { did: encodeDidKey(raw), privateKey, publicKeyB64: Buffer.from(raw).toString("base64url") };
}

export const newAgentKey = (): AgentKey => fromPrivate(generateKeyPairSync("ed25519").privateKey);

/** The operator's key; an error message (not a throw) when the PEM is not an Ed25519 private key. */
export function agentKeyFromPem(pem: string): AgentKey | string {
  try {
    const key = createPrivateKey(pem);
    if (key.asymmetricKeyType !== "ed25519")
      return `the agent key is ${key.asymmetricKeyType ?? "not asymmetric"}, not Ed25519`;
    return fromPrivate(key);
  } catch (error) {
    return `the agent key is not a readable private key PEM (${error instanceof Error ? error.message : String(error)})`;
  }
}

/** `sig_b64` of a link poll: Ed25519 over the UTF-8 bytes of `req_id`. */
export const signReqId = (agent: AgentKey, reqId: string): string =>
  sign(null, Buffer.from(reqId, "utf8"), agent.privateKey).toString("base64url");
