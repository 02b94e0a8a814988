/** The agent's identity: one Ed25519 key pair and the `did:key` derived from it. */
import { generateKeyPairSync, type KeyObject, sign } from "node:crypto";
import {
  encodeBase64url,
  encodeDidKey,
  privateKeyFromSeed,
  rawPublicKey,
  type SignatureAgentForm,
  type SignedRequest,
  type SignOptions,
  seedOfPrivateKey,
  signProtoAndWebBotAuth,
  signRequest,
  signWebBotAuth,
  type WebBotAuthHeaders,
} from "@proto/protocol";

/** Signing options the caller may fix (clock, `created`/`expires`/`nonce` for reproducible signatures). */
export type RequestSignOptions = Omit<SignOptions, "keyid" | "privateKey">;

/**
 * Web Bot Auth beside the proto signature: `both` sends two signatures (`sig1` proto, `sig2` Web Bot
 * Auth), which every proto service and every verifier that checks each signature accepts; `single`
 * sends one Web Bot Auth signature that also covers what the proto profile does, for verifiers
 * that take one signature only (services on our kit accept it with an attestation).
 */
export type WebBotAuthMode = "both" | "single";

export interface WebBotAuthSigning {
  /** The key directory the agent's key is published at (its attestor's, when the person opted in). */
  signatureAgent: string;
  mode: WebBotAuthMode;
  /**
   * How `Signature-Agent` is sent: `dictionary` (default), the working group's form, each signature
   * covering its own member; `string`, the older bare string covered whole, which deployed
   * verifiers still read.
   */
  signatureAgentForm?: SignatureAgentForm;
}

/** What `proto keys export` prints: the DID and the public key in three spellings. */
export interface PublicKeyExport {
  did: string;
  algorithm: "ed25519";
  /** The raw 32-byte public key, base64url without padding (what `POST /v1/link/start` takes). */
  public_key_b64: string;
  /** The `did:key` payload: `z` + base58btc(0xed01 + key). */
  public_key_multibase: string;
  jwk: { kty: "OKP"; crv: "Ed25519"; x: string };
  created_at: string;
}

/** `--private`: the public export plus the secret seed and a PKCS#8 PEM. */
export interface PrivateKeyExport extends PublicKeyExport {
  /** The 32-byte Ed25519 seed, base64url without padding. */
  private_key_b64: string;
  private_key_pem: string;
}

export class AgentIdentity {
  readonly did: string;
  /** The raw 32-byte public key. */
  readonly publicKey: Uint8Array;
  readonly privateKey: KeyObject;
  /** RFC 3339 time the key was generated. */
  readonly createdAt: string;

  constructor(privateKey: KeyObject, createdAt: string) {
    if (privateKey.asymmetricKeyType !== "ed25519" || privateKey.type !== "private") {
      throw new TypeError("an agent identity needs an Ed25519 private key");
    }
    this.privateKey = privateKey;
    this.publicKey = rawPublicKey(privateKey);
    this.did = encodeDidKey(this.publicKey);
    this.createdAt = createdAt;
  }

  /** A fresh random key. */
  static generate(now: Date = new Date()): AgentIdentity {
    return new AgentIdentity(generateKeyPairSync("ed25519").privateKey, now.toISOString());
  }

  /** The identity of a 32-byte Ed25519 seed. */
  static fromSeed(seed: Uint8Array, createdAt: string = new Date().toISOString()): AgentIdentity {
    return new AgentIdentity(privateKeyFromSeed(seed), createdAt);
  }

  get publicKeyB64(): string {
    return encodeBase64url(this.publicKey);
  }

  /**
   * Signs a request under the proto RFC 9421 profile (through `signRequest` of `@proto/protocol`)
   * and returns the headers to add. Send exactly the body bytes that were signed.
   */
  signRequest(
    request: { method: string; url: string; body?: Uint8Array | string | null | undefined },
    options: RequestSignOptions = {},
  ): SignedRequest {
    return signRequest(request, { ...options, keyid: this.did, privateKey: this.privateKey });
  }

  /** Signs with Web Bot Auth as well (see `WebBotAuthMode`); returns the headers to add. */
  signWebBotAuth(
    request: { method: string; url: string; body?: Uint8Array | string | null | undefined },
    signing: WebBotAuthSigning,
    options: RequestSignOptions = {},
  ): WebBotAuthHeaders {
    if (signing.mode === "single") {
      return signWebBotAuth(request, {
        ...options,
        privateKey: this.privateKey,
        signatureAgent: signing.signatureAgent,
        ...(signing.signatureAgentForm === undefined ? {} : { signatureAgentForm: signing.signatureAgentForm }),
      }).headers;
    }
    return signProtoAndWebBotAuth(
      request,
      { ...options, keyid: this.did, privateKey: this.privateKey },
      {
        signatureAgent: signing.signatureAgent,
        ...(signing.signatureAgentForm === undefined ? {} : { signatureAgentForm: signing.signatureAgentForm }),
      },
    );
  }

  /** A raw Ed25519 signature over bytes (the link poll signs the UTF-8 bytes of `req_id`). */
  signBytes(data: Uint8Array | string): Uint8Array {
    const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : data;
    return new Uint8Array(sign(null, bytes, this.privateKey));
  }

  exportPublic(): PublicKeyExport {
    const x = this.publicKeyB64;
    return {
      did: this.did,
      algorithm: "ed25519",
      public_key_b64: x,
      public_key_multibase: this.did.slice("did:key:".length),
      jwk: { kty: "OKP", crv: "Ed25519", x },
      created_at: this.createdAt,
    };
  }

  exportPrivate(): PrivateKeyExport {
    return {
      ...this.exportPublic(),
      private_key_b64: encodeBase64url(seedOfPrivateKey(this.privateKey)),
      private_key_pem: this.privateKey.export({ format: "pem", type: "pkcs8" }).toString(),
    };
  }

  /** Never prints the private key, even by accident. */
  toJSON(): PublicKeyExport {
    return this.exportPublic();
  }
}
