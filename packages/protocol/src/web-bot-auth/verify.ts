/**
 * Receiving Web Bot Auth (draft-ietf-webbotauth-httpsig-protocol): a request signed by a key that
 * a `Signature-Agent` names, identified by its JWK thumbprint. The outcome is a signed-agent
 * identity (signer's directory and key); whether that signature also binds the request as tightly as
 * the proto profile does (method, target, body, nonce, 300 s) decides if it may act for an account.
 *
 * `Signature-Agent` is read in each form agents send: the working group's dictionary (-00: typed
 * members, `directory` an origin, `jwks_uri` the JWK Set itself; -01: untyped members naming the JWK
 * Set) with the signature covering its own member (`"signature-agent";key="<label>"`) or the whole
 * field, and the older bare string that deployed verifiers still send.
 */
import type { KeyObject } from "node:crypto";
import { isInnerList, parseDictionary, parseItem, Token } from "structured-headers";
import { encodeDidKey } from "../did-key.js";
import { ED25519_SIGNATURE_LENGTH, rawPublicKey } from "../ed25519.js";
import { ProtoError, protoError } from "../errors.js";
import type { ComponentIdentifier } from "../http-signatures/components.js";
import { contentDigestMatches } from "../http-signatures/content-digest.js";
import { fromRaw, type RawRequest, type SignedMessage } from "../http-signatures/message.js";
import type { BareItem } from "../http-signatures/sf-types.js";
import {
  type CandidateSignature,
  checkEd25519,
  checkTimeWindow,
  DEFAULT_SKEW_SECONDS,
  invalid,
  MAX_SIGNATURE_HEADER_LENGTH,
  MAX_SIGNATURE_VALIDITY_SECONDS,
  parseSignatureInput,
  readSignatures,
} from "../http-signatures/signature-input.js";
import { TargetUriError } from "../http-signatures/target-uri.js";
import type { NonceStore } from "../nonce-store.js";
import { KEY_DIRECTORY_PATH } from "./key-directory.js";
import { KeyDirectoryError } from "./key-directory-error.js";

export const WEB_BOT_AUTH_TAG = "web-bot-auth";
export const SIGNATURE_AGENT_HEADER = "signature-agent";
/** The draft recommends at most a day; longer is refused. */
export const DEFAULT_WEB_BOT_AUTH_MAX_VALIDITY_SECONDS = 24 * 3600;
const MAX_NONCE_LENGTH = 256;
/** A base64url SHA-256 JWK thumbprint (RFC 7638), the only keyid the draft allows. */
const THUMBPRINT = /^[A-Za-z0-9_-]{43}$/;
/** The member types of -00; -01 drops them (an untyped member names the JWK Set). */
const MEMBER_TYPES = new Set(["directory", "jwks_uri"]);

/** Who asks: the client a key directory fetch is charged to (see the kit's per-client budgets). */
export interface KeyLookupContext {
  /** The client's address as the server identifies it (after its trusted proxies); unset when unknown. */
  client?: string | undefined;
}

/** Finds the public key a thumbprint names in the key directory a `Signature-Agent` URL points to. */
export interface SignatureAgentKeys {
  /** `directoryUrl`: the JWK Set a `Signature-Agent` names (an origin already turned into its well-known directory). */
  lookup(directoryUrl: string, thumbprint: string, context?: KeyLookupContext): Promise<KeyObject | undefined>;
}

export interface WebBotAuthVerifierOptions {
  keys: SignatureAgentKeys;
  /** Nonces, when a signature carries one, are remembered per key like the proto profile's. */
  nonceStore: NonceStore;
  now?: () => number;
  skewSeconds?: number;
  /** Longest `expires - created` accepted (default 24 h, the draft's recommendation). */
  maxValiditySeconds?: number;
  /** Revocation by the did:key of the signing key, as for proto signatures. */
  isRevoked?: (did: string) => boolean | Promise<boolean>;
}

export interface VerifiedSignedAgent {
  label: string;
  /** The RFC 7638 thumbprint the signature named. */
  keyid: string;
  /** The `Signature-Agent` URL the key was found through, as the request named it. */
  signatureAgent: string;
  /** How the request spelled `Signature-Agent`: the working group's dictionary or the older string. */
  signatureAgentForm: "dictionary" | "string";
  /** Its origin: who vouches for the agent (an operator or an attestor). */
  signerOrigin: string;
  /** The did:key of the same Ed25519 key: the proto account it may act for, with an attestation. */
  did: string;
  created: number;
  expires: number;
  nonce: string | undefined;
  components: string[];
  /**
   * Whether the signature binds the request as the proto profile does: covers `@method`,
   * `@target-uri` and (with a body) `content-digest`, carries a nonce, and lasts at most 300 s.
   * Only such a signature may act for an account.
   */
  bindsRequest: boolean;
  /** The body bytes received (bound by the signature only when `content-digest` was covered). */
  body: Uint8Array | undefined;
}

/**
 * Which kinds of signature a request carries, read from `Signature-Input` alone (nothing verified).
 * A signature of neither kind on a request that names a `Signature-Agent` counts as Web Bot Auth: a
 * Web Bot Auth attempt with a wrong or missing tag, which the Web Bot Auth verifier refuses saying
 * so, rather than the proto profile's verifier with a complaint about components it never allows.
 */
export function signatureProfiles(header: (name: string) => string | undefined): {
  proto: boolean;
  webBotAuth: boolean;
} {
  const found = { proto: false, webBotAuth: false };
  const input = header("signature-input");
  if (input === undefined || input.length > MAX_SIGNATURE_HEADER_LENGTH) return found;
  let other = false;
  try {
    for (const member of parseSignatureInput(input).members.values()) {
      if (!isInnerList(member)) continue;
      const keyid = member[1].get("keyid");
      if (member[1].get("tag") === WEB_BOT_AUTH_TAG) found.webBotAuth = true;
      else if (typeof keyid === "string" && keyid.startsWith("did:key:")) found.proto = true;
      else other = true;
    }
  } catch {
    // Unparsable: neither; the verifier that runs next says why.
  }
  if (other && !found.proto && header(SIGNATURE_AGENT_HEADER) !== undefined) found.webBotAuth = true;
  return found;
}

function componentName(identifier: ComponentIdentifier): string {
  return typeof identifier[0] === "string" ? identifier[0] : "";
}

function httpsUrl(value: BareItem | undefined, where: string): string {
  if (typeof value !== "string") throw invalid(`${where} must be a string URL`);
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw invalid(`${where} is not a URL`);
  }
  if (url.protocol !== "https:" || url.username !== "" || url.password !== "") {
    throw invalid(`${where} must be an https URL without credentials`);
  }
  return value;
}

interface CoveredAgent {
  /** The member's URL as sent (the signer's identifier). */
  url: string;
  /** Where its keys are fetched: the URL itself, or an origin's well-known directory. */
  directory: string;
  form: "dictionary" | "string";
}

/**
 * Where a `Signature-Agent` value's keys are: an origin means its well-known directory (-00's
 * `directory` type, and the older string form as agents send it); any other URL is the JWK Set
 * itself (-00's `jwks_uri`, and every untyped member of -01).
 */
function keysLocation(url: string, type: string | undefined): string {
  const parsed = new URL(url);
  const origin = parsed.pathname === "/" && parsed.search === "";
  if (type === "directory" && !origin) throw invalid("a Signature-Agent member of type directory must name an origin");
  if (type === "jwks_uri" && origin) throw invalid("a Signature-Agent member of type jwks_uri must name the JWK Set");
  return origin ? `${parsed.origin}${KEY_DIRECTORY_PATH}` : url;
}

/** The `type` of a -00 member (a token or a string); any other parameter makes it unusable. */
function memberType(params: Map<string, BareItem>): string | undefined {
  if (params.size === 0) return undefined;
  const type = params.get("type");
  if (params.size > 1 || type === undefined) throw invalid("a Signature-Agent member carries an unknown parameter");
  const name = typeof type === "string" ? type : type instanceof Token ? type.toString() : undefined;
  if (name === undefined || !MEMBER_TYPES.has(name)) {
    throw invalid("a Signature-Agent member's type must be directory or jwks_uri");
  }
  return name;
}

/**
 * The `Signature-Agent` this signature covers: the dictionary member its `key` parameter names
 * (or, covering the whole field, the member keyed by its own label, or the only one), or the older
 * bare string.
 */
function coveredSignatureAgent(header: string | undefined, candidate: CandidateSignature): CoveredAgent {
  if (header === undefined) throw invalid("a Web Bot Auth signature needs a Signature-Agent header");
  if (header.length > MAX_SIGNATURE_HEADER_LENGTH) throw invalid("Signature-Agent header is too long");
  const covering = candidate.components.filter((c) => componentName(c) === SIGNATURE_AGENT_HEADER);
  if (covering.length === 0) throw invalid("a Web Bot Auth signature must cover signature-agent");
  const keyed = covering.map((c) => c[1].get("key")).find((key) => key !== undefined);
  if (header.trimStart().startsWith('"')) {
    if (keyed !== undefined) throw invalid("Signature-Agent is a string, but the signature covers a dictionary member");
    try {
      const url = httpsUrl(parseItem(header)[0], "Signature-Agent");
      return { url, directory: keysLocation(url, undefined), form: "string" };
    } catch (error) {
      if (error instanceof ProtoError) throw error;
      throw invalid("Signature-Agent is not a valid structured field");
    }
  }
  let members: ReturnType<typeof parseDictionary>;
  try {
    members = parseDictionary(header);
  } catch {
    throw invalid("Signature-Agent is not a valid structured field");
  }
  let memberKey: string | undefined;
  if (typeof keyed === "string") memberKey = keyed;
  else if (members.has(candidate.label)) memberKey = candidate.label;
  else if (members.size === 1) memberKey = members.keys().next().value;
  const member = memberKey === undefined ? undefined : members.get(memberKey);
  if (member === undefined || isInnerList(member)) throw invalid("Signature-Agent has no member for this signature");
  const url = httpsUrl(member[0], "the Signature-Agent member");
  return { url, directory: keysLocation(url, memberType(member[1])), form: "dictionary" };
}

function chooseWebBotAuth(candidates: CandidateSignature[]): CandidateSignature {
  const tagged = candidates.find((c) => c.params.get("tag") === WEB_BOT_AUTH_TAG);
  if (tagged === undefined) throw invalid(`no signature is tagged "${WEB_BOT_AUTH_TAG}"`);
  return tagged;
}

export interface WebBotAuthVerifier {
  /** `context.client` is who any key directory fetch is charged to. */
  verify(request: RawRequest, context?: KeyLookupContext): Promise<VerifiedSignedAgent>;
}

/**
 * The checks, in order: profile (tag, parameters, components), the covered `Signature-Agent`, the
 * time window, key lookup, revocation, content digest, signature, then the nonce, so that a nonce
 * is remembered only for a request that proved its signer.
 */
export function createWebBotAuthVerifier(options: WebBotAuthVerifierOptions): WebBotAuthVerifier {
  const now = options.now ?? Date.now;
  const skew = options.skewSeconds ?? DEFAULT_SKEW_SECONDS;
  const maxValidity = options.maxValiditySeconds ?? DEFAULT_WEB_BOT_AUTH_MAX_VALIDITY_SECONDS;

  async function verifyMessage(message: SignedMessage, context: KeyLookupContext): Promise<VerifiedSignedAgent> {
    const candidate = chooseWebBotAuth(readSignatures(message.header));
    const { params } = candidate;
    const created = params.get("created");
    const expires = params.get("expires");
    const keyid = params.get("keyid");
    const alg = params.get("alg");
    const nonce = params.get("nonce");
    if (!Number.isInteger(created)) throw invalid("created must be an integer");
    if (expires !== undefined && !Number.isInteger(expires)) throw invalid("expires must be an integer");
    if (typeof keyid !== "string" || !THUMBPRINT.test(keyid)) {
      throw invalid("keyid must be a base64url SHA-256 JWK thumbprint");
    }
    if (alg !== undefined && alg !== "ed25519") throw invalid('alg must be "ed25519"');
    if (nonce !== undefined && (typeof nonce !== "string" || nonce.length === 0 || nonce.length > MAX_NONCE_LENGTH)) {
      throw invalid("nonce must be a non-empty string");
    }
    const names = candidate.components.map(componentName);
    if (!names.includes("@authority") && !names.includes("@target-uri")) {
      throw invalid("a Web Bot Auth signature must cover @authority or @target-uri");
    }
    const agent = coveredSignatureAgent(message.header(SIGNATURE_AGENT_HEADER), candidate);
    const signatureAgent = agent.url;
    const window = { created: created as number, expires: expires as number | undefined };
    const nowSeconds = Math.floor(now() / 1000);
    checkTimeWindow(window, nowSeconds, skew, maxValidity);
    // Everything above is free; the look-up below may be an outbound fetch a stranger chose, so a
    // signature that could never verify is refused before it is charged for one.
    if (candidate.signature.length !== ED25519_SIGNATURE_LENGTH) throw invalid("the signature is not Ed25519");

    let publicKey: KeyObject | undefined;
    try {
      publicKey = await options.keys.lookup(agent.directory, keyid, context);
    } catch (error) {
      // A directory that cannot be used leaves the signature unverified: the caller's to fix.
      if (error instanceof KeyDirectoryError) {
        throw invalid(`the Signature-Agent's key directory could not be used (${error.kind}): ${error.message}`);
      }
      throw error;
    }
    if (publicKey === undefined) throw invalid("the Signature-Agent's key directory has no key with this keyid");
    const did = encodeDidKey(rawPublicKey(publicKey));
    if (options.isRevoked !== undefined && (await options.isRevoked(did))) throw protoError("revoked_key");

    const coversDigest = names.includes("content-digest");
    if (coversDigest) {
      const digest = message.header("content-digest");
      if (digest === undefined || digest.length > MAX_SIGNATURE_HEADER_LENGTH) throw invalid("missing Content-Digest");
      if (!contentDigestMatches(digest, message.body ?? new Uint8Array())) {
        throw invalid("Content-Digest does not match the body");
      }
    }
    checkEd25519(message, candidate, publicKey);
    if (typeof nonce === "string") {
      const ttl = (window.expires as number) + skew - nowSeconds;
      if (!(await options.nonceStore.seen(`wba:${signatureAgent} ${keyid}`, nonce, ttl, window.created))) {
        throw protoError("replayed_nonce");
      }
    }
    const bindsRequest =
      names.includes("@method") &&
      names.includes("@target-uri") &&
      (message.body === undefined || coversDigest) &&
      typeof nonce === "string" &&
      (window.expires as number) - window.created <= MAX_SIGNATURE_VALIDITY_SECONDS;
    return {
      label: candidate.label,
      keyid,
      signatureAgent,
      signatureAgentForm: agent.form,
      signerOrigin: new URL(signatureAgent).origin,
      did,
      created: window.created,
      expires: window.expires as number,
      nonce: typeof nonce === "string" ? nonce : undefined,
      components: names,
      bindsRequest,
      body: message.body,
    };
  }

  return {
    async verify(request, context = {}) {
      let message: SignedMessage;
      try {
        message = fromRaw(request);
      } catch (error) {
        if (error instanceof TargetUriError || error instanceof TypeError) {
          throw invalid(`the request's target URI is unusable (${error.message})`);
        }
        throw error;
      }
      return verifyMessage(message, context);
    },
  };
}
