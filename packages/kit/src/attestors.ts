import {
  type AttestationVerifier,
  createAttestationVerifier,
  type FetchFunction,
  isLoopbackHttpUrl,
  type KeyLookup,
  KeySetUnavailableError,
  protoError,
  RemoteKeySet,
  staticKeySet,
  type VerifiedAttestation,
} from "@proto/protocol";
import { decodeJwt, type JSONWebKeySet } from "jose";
import { KitConfigError } from "./config-error.js";
import { attestorUnavailable } from "./errors.js";

/**
 * One accepted attestor. It is named (the key of `KitOptions.attestors`) by its attestation issuer,
 * the `iss` of its attestations (`proto-trust`), which is also listed in `billing.accepted_attestors`;
 * `url` is its `{trust_url}`, the `iss` of its id_tokens. Both forms canonicalise to the name.
 */
export interface AttestorConfig {
  /** `{trust_url}`: the id_token issuer and OpenID provider. Needed for sign-in. */
  url?: string;
  /**
   * What people call it on the kit's pages ("Sign in with Example Trust"); at most 60 characters.
   * Default: the host of `url` (else the name).
   */
  displayName?: string;
  /**
   * Where its verification keys are: a key set URL, a `RemoteKeySet`, or a static JWK set.
   * Default `{url}/.well-known/jwks.json`.
   */
  keySet?: string | URL | RemoteKeySet | JSONWebKeySet;
  /** Sign-in with this attestor (needs `url`; default on when `url` is set). */
  signIn?: boolean | { clientId?: string };
  /**
   * Development and tests only: allow a plain-http `url` on another machine. Plain http on this
   * machine (localhost, 127.0.0.0/8, [::1], the attestor of `npm run dev`) needs no flag, as for the
   * agent.
   */
  allowHttp?: boolean;
  /** A lower bound on attestation `iat` (Unix seconds, or a function), to bound the effect of revocation. */
  minIssuedAt?: number | (() => number);
}

export interface ResolvedAttestor {
  /** The canonical issuer: the attestation `iss`. */
  name: string;
  url: string | undefined;
  /** The attestor in words, for people. */
  displayName: string;
  keys: KeyLookup;
  verifier: AttestationVerifier;
  signIn: { clientId: string } | undefined;
  allowHttp: boolean;
}

export interface KitAttestation extends VerifiedAttestation {
  /** The canonical issuer (the attestor's configured name). */
  canonicalIssuer: string;
}

function withoutTrailingSlash(url: string): string {
  return url.endsWith("/") ? url.slice(0, -1) : url;
}

/** How the options name an attestor's member, as one would write it: `attestors["proto-trust"].url`. */
function optionPath(name: string, member: string): string {
  return `attestors[${JSON.stringify(name)}].${member}`;
}

/**
 * An attestor's `{trust_url}`: https, or plain http on this machine (the agent's rule, so the URL
 * `proto trust link` accepts is accepted here too), or anywhere with `allowHttp`.
 */
function attestorUrl(name: string, entry: AttestorConfig): { url: string | undefined; plainHttp: boolean } {
  if (entry.url === undefined) return { url: undefined, plainHttp: false };
  const option = optionPath(name, "url");
  if (!URL.canParse(entry.url)) {
    throw new KitConfigError(
      option,
      `${option} ${JSON.stringify(entry.url)} is not an absolute URL (https://trust.example)`,
    );
  }
  const parsed = new URL(entry.url);
  const url = withoutTrailingSlash(parsed.href);
  if (parsed.protocol === "https:") return { url, plainHttp: false };
  if (parsed.protocol === "http:" && (isLoopbackHttpUrl(parsed) || entry.allowHttp === true)) {
    return { url, plainHttp: true };
  }
  if (parsed.protocol !== "http:") throw new KitConfigError(option, `${option} ${url} must be an https URL`);
  throw new KitConfigError(
    option,
    `${option} ${url} must be https: plain http is accepted without a flag only on this machine (localhost, 127.0.0.0/8, [::1]). Use the attestor's https URL or, for development and tests only, allow http: attestors: { ${JSON.stringify(name)}: { url: ${JSON.stringify(url)}, allowHttp: true } }`,
  );
}

function displayName(name: string, configured: string | undefined, url: string | undefined): string {
  if (configured !== undefined) {
    const trimmed = configured.trim();
    if (trimmed.length === 0 || trimmed.length > 60) {
      throw new KitConfigError(
        optionPath(name, "displayName"),
        `${optionPath(name, "displayName")} must be 1 to 60 characters`,
      );
    }
    return trimmed;
  }
  return url === undefined ? name : new URL(url).host;
}

export class AttestorRegistry {
  readonly #byName = new Map<string, ResolvedAttestor>();
  readonly #serviceDid: string;

  constructor(
    config: Record<string, AttestorConfig>,
    options: { serviceDid: string; accepted: readonly string[]; now: () => number; fetch?: FetchFunction | undefined },
  ) {
    this.#serviceDid = options.serviceDid;
    for (const name of options.accepted) {
      const entry = config[name];
      if (entry === undefined) {
        throw new KitConfigError(
          "discovery.billing.accepted_attestors",
          `discovery.billing.accepted_attestors lists ${JSON.stringify(name)} but attestors has no entry for it: add attestors: { ${JSON.stringify(name)}: { url: "https://..." } }`,
        );
      }
      const { url, plainHttp } = attestorUrl(name, entry);
      const source = entry.keySet ?? (url === undefined ? undefined : `${url}/.well-known/jwks.json`);
      if (source === undefined) {
        throw new KitConfigError(
          `attestors[${JSON.stringify(name)}]`,
          `attestors[${JSON.stringify(name)}]: set url or keySet`,
        );
      }
      const keys: KeyLookup =
        source instanceof RemoteKeySet
          ? source.getKey
          : typeof source === "string" || source instanceof URL
            ? new RemoteKeySet(source, { now: options.now, ...(options.fetch ? { fetch: options.fetch } : {}) }).getKey
            : staticKeySet(source);
      const verifier = createAttestationVerifier({
        keySet: keys,
        issuers: [name],
        now: options.now,
        ...(entry.minIssuedAt === undefined ? {} : { minIssuedAt: entry.minIssuedAt }),
      });
      const signInEnabled = entry.signIn !== false && url !== undefined;
      const clientId = typeof entry.signIn === "object" ? entry.signIn.clientId : undefined;
      this.#byName.set(name, {
        name,
        url,
        displayName: displayName(name, entry.displayName, url),
        keys,
        verifier,
        signIn: signInEnabled ? { clientId: clientId ?? options.serviceDid } : undefined,
        allowHttp: plainHttp,
      });
    }
  }

  get names(): string[] {
    return [...this.#byName.keys()];
  }

  get(name: string): ResolvedAttestor | undefined {
    return this.#byName.get(name);
  }

  /** Attestors a person can sign in with. */
  signInAttestors(): ResolvedAttestor[] {
    return [...this.#byName.values()].filter((a) => a.signIn !== undefined);
  }

  /**
   * The canonical issuer for either form an attestor goes by: its attestation issuer (`proto-trust`)
   * or its `{trust_url}` (with or without a trailing slash). Undefined for anyone else.
   */
  canonicalIssuer(issuer: string): string | undefined {
    if (this.#byName.has(issuer)) return issuer;
    const bare = withoutTrailingSlash(issuer);
    for (const attestor of this.#byName.values())
      if (attestor.url !== undefined && attestor.url === bare) return attestor.name;
    return undefined;
  }

  /**
   * Verifies a `Proto-Attestation` JWT presented by `agentDid`; throws `invalid_attestation`, or
   * `kit_attestor_unavailable` (503) when the issuer's key set cannot be fetched.
   */
  async verify(jwt: string, agentDid: string): Promise<KitAttestation> {
    let issuer: unknown;
    try {
      issuer = decodeJwt(jwt).iss;
    } catch {
      throw protoError("invalid_attestation", { message: "attestation is not a JWT" });
    }
    const attestor = typeof issuer === "string" ? this.#byName.get(issuer) : undefined;
    if (attestor === undefined) {
      throw protoError("invalid_attestation", { message: "attestation issuer is not accepted by this service" });
    }
    let verified: VerifiedAttestation;
    try {
      verified = await attestor.verifier.verify(jwt, { audience: this.#serviceDid, agentDid });
    } catch (error) {
      // The attestor's keys could not be had: the attestation may be good, so 503, not 401.
      if (error instanceof KeySetUnavailableError) throw attestorUnavailable(error);
      throw error;
    }
    return { ...verified, canonicalIssuer: attestor.name };
  }
}
