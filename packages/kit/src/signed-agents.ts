/**
 * Web Bot Auth callers (draft-ietf-webbotauth-httpsig-protocol-01) as the kit sees them: a
 * signed-agent identity, its own tier beside anonymous, protocol-signed and attested callers. A
 * route allows it, challenges it (403 with `Accept-Signature`, RFC 9421 §5) or refuses it.
 */
import { acceptSignature, ProtoError, type VerifiedSignedAgent } from "@proto/protocol";
import { KIT_SPECIFIC_ERRORS, kitError } from "./errors.js";

/** What a route does with a caller identified only by Web Bot Auth. */
export type SignedAgentPolicy = "allow" | "challenge" | "refuse";

/**
 * A verified signed agent that is not (yet) an account: by default answered 403 with the signatures
 * that would be; `requireAgent` catches it on routes that allow or refuse signed agents.
 */
export class SignedAgentChallenge extends ProtoError {
  readonly agent: VerifiedSignedAgent;
  readonly #acceptSignature: string;

  constructor(agent: VerifiedSignedAgent, hasBody: boolean, message?: string) {
    const spec = KIT_SPECIFIC_ERRORS.kit_signature_required;
    super("kit_signature_required", spec.status, message ?? spec.message);
    this.agent = agent;
    this.#acceptSignature = acceptSignature(hasBody);
  }

  override headers(): Record<string, string> {
    return { ...super.headers(), "accept-signature": this.#acceptSignature };
  }
}

export function signedAgentRefused(): ProtoError {
  return kitError("kit_signed_agent_refused");
}

/** What a handler sees of a signed agent: who vouches for it and which key signed. */
export interface SignedAgentIdentity {
  /** The origin of the `Signature-Agent` (the operator or attestor that publishes the key). */
  signerOrigin: string;
  /** The `Signature-Agent` URL the key was found through. */
  signatureAgent: string;
  /** The key's RFC 7638 thumbprint. */
  thumbprint: string;
  /** The did:key of the same key (the proto account it would act for with an attestation). */
  did: string;
}

export function signedAgentIdentity(agent: VerifiedSignedAgent): SignedAgentIdentity {
  return {
    signerOrigin: agent.signerOrigin,
    signatureAgent: agent.signatureAgent,
    thumbprint: agent.keyid,
    did: agent.did,
  };
}
