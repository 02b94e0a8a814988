import type { FetchFunction } from "@proto/protocol";
import { jwtVerify } from "jose";
import * as client from "openid-client";
import type { AttestorRegistry, ResolvedAttestor } from "./attestors.js";
import { kitError } from "./errors.js";
import { parseCookies, serializeCookie } from "./http.js";
import type { OwnerSessions } from "./sessions.js";
import type { KitStore, PersonRecord } from "./store/types.js";
import { hashToken, safeEqual } from "./util.js";

/** How long a person may take at the attestor between leaving and coming back. */
export const SIGNIN_REQUEST_TTL_SECONDS = 600;

export interface SignInResult {
  person: PersonRecord;
  /** The id_token's `iat` (ms): the session's authentication time. */
  authenticatedAt: number;
  setCookies: string[];
  returnTo: string;
}

export interface AttestorSignInOptions {
  registry: AttestorRegistry;
  store: KitStore;
  sessions: OwnerSessions;
  serviceDid: string;
  /** `{publicUrl}{ownerPath}/callback`: registered at the attestor as a redirect URI. */
  redirectUri: string;
  /** Path the state cookie is scoped to (the owner path). */
  cookiePath: string;
  secure: boolean;
  now: () => number;
  fetch?: FetchFunction | undefined;
  /** Ask for, and accept only, a phishing-resistant sign-in (`acr` `phishing-resistant`: a passkey). */
  phishingResistant?: boolean;
}

/** The `acr` of a passkey sign-in at the attestor (upstream proposal 0001). */
export const PHISHING_RESISTANT_ACR = "phishing-resistant";

const STATE_COOKIE = "proto_kit_signin";
/** A failed discovery is not cached, so the next sign-in tries again: a few seconds is enough. */
const SIGNIN_RETRY_SECONDS = 5;

/**
 * Sign in with an attestor as an OpenID relying party (openid-client): Authorization Code with
 * PKCE (S256), `state` bound to the browser by a cookie, `nonce`, EdDSA id_tokens. The id_token is
 * checked by openid-client and again against the attestor's key set (the same keys that verify
 * attestations): signature, `iss` = `{trust_url}`, `aud` = the service DID, `exp`, `nonce`.
 */
export class AttestorSignIn {
  readonly #metadata = new Map<string, Promise<client.ServerMetadata>>();

  constructor(private readonly options: AttestorSignInOptions) {}

  get redirectUri(): string {
    return this.options.redirectUri;
  }

  #attestor(name: string): ResolvedAttestor & { url: string; signIn: { clientId: string } } {
    const attestor = this.options.registry.get(name);
    if (attestor?.url === undefined || attestor.signIn === undefined) throw kitError("kit_unknown_attestor");
    return attestor as ResolvedAttestor & { url: string; signIn: { clientId: string } };
  }

  #customFetch(): client.CustomFetch | undefined {
    const fetchFn = this.options.fetch;
    if (fetchFn === undefined) return undefined;
    return (url, init) => fetchFn(url, init as RequestInit);
  }

  async #configuration(attestor: ResolvedAttestor & { url: string; signIn: { clientId: string } }) {
    let metadata = this.#metadata.get(attestor.name);
    if (metadata === undefined) {
      const customFetch = this.#customFetch();
      metadata = client
        .discovery(
          new URL(attestor.url),
          attestor.signIn.clientId,
          { id_token_signed_response_alg: "EdDSA" },
          client.None(),
          {
            ...(attestor.allowHttp ? { execute: [client.allowInsecureRequests] } : {}),
            ...(customFetch ? { [client.customFetch]: customFetch } : {}),
          },
        )
        .then((config) => config.serverMetadata());
      this.#metadata.set(attestor.name, metadata);
      // A failed discovery is not cached: the next sign-in tries again.
      metadata.catch(() => this.#metadata.delete(attestor.name));
    }
    const server = await metadata;
    // The client's notion of "now" follows the kit's clock.
    const skew = Math.round((this.options.now() - Date.now()) / 1000);
    const config = new client.Configuration(
      server,
      attestor.signIn.clientId,
      { id_token_signed_response_alg: "EdDSA", [client.clockSkew]: skew },
      client.None(),
    );
    if (attestor.allowHttp) client.allowInsecureRequests(config);
    const customFetch = this.#customFetch();
    if (customFetch) config[client.customFetch] = customFetch;
    return config;
  }

  /** Starts a sign-in: the attestor's authorization URL, and the cookie binding it to this browser. */
  async start(attestorName: string, returnTo: string): Promise<{ location: string; setCookie: string }> {
    const attestor = this.#attestor(attestorName);
    let config: client.Configuration;
    try {
      config = await this.#configuration(attestor);
    } catch (error) {
      // The attestor is down or misconfigured, not the person: come back, nothing was started.
      throw kitError("kit_attestor_unavailable", "the attestor cannot be reached to sign you in; try again shortly", {
        retryAfter: SIGNIN_RETRY_SECONDS,
        cause: error,
      });
    }
    const verifier = client.randomPKCECodeVerifier();
    const challenge = await client.calculatePKCECodeChallenge(verifier);
    const state = client.randomState();
    const nonce = client.randomNonce();
    const now = this.options.now();
    await this.options.store.createSignInRequest({
      stateHash: hashToken(state),
      attestor: attestor.name,
      codeVerifier: verifier,
      nonce,
      returnTo,
      createdAt: now,
      expiresAt: now + SIGNIN_REQUEST_TTL_SECONDS * 1000,
    });
    const url = client.buildAuthorizationUrl(config, {
      redirect_uri: this.options.redirectUri,
      scope: "openid",
      code_challenge: challenge,
      code_challenge_method: "S256",
      state,
      nonce,
      ...(this.options.phishingResistant ? { acr_values: PHISHING_RESISTANT_ACR } : {}),
    });
    return {
      location: url.href,
      setCookie: serializeCookie(STATE_COOKIE, state, {
        maxAgeSeconds: SIGNIN_REQUEST_TTL_SECONDS,
        path: this.options.cookiePath,
        secure: this.options.secure,
      }),
    };
  }

  /** Completes a sign-in at the redirect URI: `callbackUrl` is the public URL with its query. */
  async complete(callbackUrl: URL, headers: Headers): Promise<SignInResult> {
    const clearState = serializeCookie(STATE_COOKIE, "", {
      maxAgeSeconds: 0,
      path: this.options.cookiePath,
      secure: this.options.secure,
    });
    const state = callbackUrl.searchParams.get("state") ?? "";
    const bound = parseCookies(headers.get("cookie")).get(STATE_COOKIE) ?? "";
    if (state.length === 0 || !safeEqual(state, bound)) {
      throw kitError("kit_signin_failed", "this sign-in was not started in this browser");
    }
    const request = await this.options.store.takeSignInRequest(hashToken(state), this.options.now());
    if (request === undefined) throw kitError("kit_signin_failed", "the sign-in expired or was already used");
    const attestor = this.#attestor(request.attestor);
    let idToken: string;
    try {
      const config = await this.#configuration(attestor);
      const current = new URL(this.options.redirectUri);
      current.search = callbackUrl.search;
      const tokens = await client.authorizationCodeGrant(config, current, {
        pkceCodeVerifier: request.codeVerifier,
        expectedState: state,
        expectedNonce: request.nonce,
        idTokenExpected: true,
      });
      if (typeof tokens.id_token !== "string") throw new Error("no id_token");
      idToken = tokens.id_token;
    } catch (error) {
      throw kitError("kit_signin_failed", `the attestor did not sign you in: ${messageOf(error)}`);
    }
    let claims: { sub: string; iat: number; acr: unknown };
    try {
      const { payload } = await jwtVerify(idToken, attestor.keys, {
        algorithms: ["EdDSA"],
        issuer: [attestor.url, `${attestor.url}/`],
        audience: this.options.serviceDid,
        currentDate: new Date(this.options.now()),
        requiredClaims: ["iss", "sub", "aud", "exp", "iat"],
      });
      if (payload.nonce !== request.nonce) throw new Error("nonce mismatch");
      if (typeof payload.sub !== "string" || payload.sub.length === 0) throw new Error("no subject");
      if (!Number.isInteger(payload.iat)) throw new Error("iat is not an integer");
      claims = { sub: payload.sub, iat: payload.iat as number, acr: payload.acr };
    } catch (error) {
      throw kitError("kit_signin_failed", `the id_token did not verify: ${messageOf(error)}`);
    }
    // Asking is not enough: an attestor may ignore acr_values, so the token must say it.
    if (this.options.phishingResistant && claims.acr !== PHISHING_RESISTANT_ACR) {
      throw kitError(
        "kit_signin_failed",
        "this service takes only a sign-in with a passkey (phishing-resistant); sign in with your passkey at the attestor and try again",
      );
    }
    // The canonical issuer (the attestation issuer name) plus sub: the same person the agent's
    // attestations (sub_h) name, so the person lands where their agents are.
    const person = await this.options.store.upsertPerson(attestor.name, claims.sub, this.options.now());
    const authenticatedAt = claims.iat * 1000;
    const { setCookie } = await this.options.sessions.create({
      identities: [{ type: "oidc", value: { issuer: attestor.name, sub: claims.sub } }],
      authenticatedAt,
      personId: person.id,
    });
    return { person, authenticatedAt, setCookies: [clearState, setCookie], returnTo: request.returnTo };
  }
}

function messageOf(error: unknown): string {
  if (!(error instanceof Error)) return "unknown error";
  const code = (error as { error?: unknown }).error;
  // openid-client wraps the precise reason (e.g. 'unexpected JWT "aud" (audience) claim value').
  const inner = error.cause instanceof Error && error.cause.message !== error.message ? error.cause.message : undefined;
  const message = inner === undefined ? error.message : `${error.message}: ${inner}`;
  return typeof code === "string" ? `${code}: ${message}` : message;
}
