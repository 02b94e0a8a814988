/**
 * An attestor's signing key for the bounded-authority suites: attestations and agents' access
 * tokens signed exactly as the attestor signs them, with or without the grant claims of
 * docs/authority.md (`grantClaims` of @proto/protocol), so a suite chooses what a person granted.
 * The kit verifies them against the key set it is configured with, offline.
 */
import { createHash, generateKeyPairSync, type KeyObject, randomUUID } from "node:crypto";
import { type AuthorityGrant, grantClaims } from "@proto/protocol";
import { exportJWK, type JSONWebKeySet, SignJWT } from "jose";
import type { AttestorConfig } from "../../src/index.js";
import type { Agent, TestClock } from "./env.js";

export const ATTESTOR_NAME = "proto-trust";
/** The attestor's `{trust_url}`: named in refusals, never reached (its keys are configured). */
export const ATTESTOR_URL = "https://trust.example";
const KID = "grant-test-key";

export class GrantAttestor {
  private constructor(
    private readonly privateKey: KeyObject,
    readonly keySet: JSONWebKeySet,
    private readonly clock: TestClock,
  ) {}

  static async create(clock: TestClock): Promise<GrantAttestor> {
    const { privateKey, publicKey } = generateKeyPairSync("ed25519");
    const jwk = { ...(await exportJWK(publicKey)), kid: KID, alg: "EdDSA", use: "sig" };
    return new GrantAttestor(privateKey, { keys: [jwk] }, clock);
  }

  /** The kit's `attestors` entry for this attestor: its url and key set, no sign-in. */
  config(): Record<string, AttestorConfig> {
    return { [ATTESTOR_NAME]: { url: ATTESTOR_URL, keySet: this.keySet, signIn: false } };
  }

  /** The person behind every agent of these suites, pseudonymous per service. */
  subject(aud: string): string {
    return createHash("sha256").update(`person\n${aud}`).digest("base64url");
  }

  /** An attestation of `agent` for `aud`, carrying `grant` when given (else no grant claims). */
  async attest(agent: Agent, aud: string, grant?: AuthorityGrant): Promise<string> {
    const now = this.clock.nowSeconds();
    return new SignJWT({ sub_h: this.subject(aud), verification: "email", ...(grant ? grantClaims(grant) : {}) })
      .setProtectedHeader({ alg: "EdDSA", typ: "JWT", kid: KID })
      .setIssuer(ATTESTOR_NAME)
      .setAudience(aud)
      .setSubject(agent.did)
      .setIssuedAt(now)
      .setExpirationTime(now + 900)
      .sign(this.privateKey);
  }

  /**
   * An RFC 9068 access token of `agent` for `resource` (the JWT-bearer grant's shape: `act.sub`),
   * with `scope`, and the grant's claims when given (the token's `scope` is then the grant's).
   */
  async accessToken(agent: Agent, resource: string, options: { scope?: string; grant?: AuthorityGrant }) {
    const grant = options.grant === undefined ? {} : grantClaims(options.grant);
    return this.signAccessToken(agent, resource, { scope: options.scope ?? "", ...grant });
  }

  /** An access token of `agent` for `resource` with these claims besides the standard ones, as they are. */
  async signAccessToken(agent: Agent, resource: string, claims: Record<string, unknown>): Promise<string> {
    const now = this.clock.nowSeconds();
    return new SignJWT({ client_id: agent.did, jti: randomUUID(), act: { sub: agent.did }, ...claims })
      .setProtectedHeader({ alg: "EdDSA", typ: "at+jwt", kid: KID })
      .setIssuer(ATTESTOR_URL)
      .setSubject(this.subject(`did:web:${new URL(resource).host}`))
      .setAudience(resource)
      .setIssuedAt(now)
      .setExpirationTime(now + 600)
      .sign(this.privateKey);
  }
}
