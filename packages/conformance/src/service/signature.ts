/**
 * Probing a service as an agent: requests signed by an Ed25519 key made for the run (a did:key),
 * correctly, and broken in exactly one way each. trust.md §Reserved codes of services that accept
 * attestations names the codes; the profile's rules (components, `expires - created` <= 300 s, 60 s
 * skew, nonces) are upstream core §5, which upstream.md makes the rule where ours is silent (the
 * attestor's own mint follows the same profile: decisions.md §Trust attestor 1).
 */
import {
  type ComponentIdentifier,
  contentDigest,
  fetchTargetUri,
  randomNonce,
  signatureHeaderPair,
  signMessage,
} from "@proto/protocol";
import { type AgentKey, newAgentKey } from "../attestor/keys.js";
import { isObject } from "../checks.js";
import type { HttpResponse } from "../http.js";
import { check, type Probe, type ProbeContext, ProbeSkip, pass } from "../probe.js";
import { type ServiceShape, serviceShape } from "./discovery.js";

const RESERVED = "trust.md §Reserved codes of services that accept attestations";
/** The header the extra-component probe covers and never sends. */
export const ABSENT_HEADER = "proto-conformance";
const ABSENT_HEADER_VALUE = "1";
/** trust.md names the codes; the signature profile of a service is upstream's (upstream.md: where ours is silent). */
const PROFILE = `${RESERVED}; upstream core §5.2, §5.5`;

/** Methods whose requests carry a body (`{}` unless the call gives one). */
const BODY_METHODS = new Set(["POST", "PUT", "PATCH"]);

export interface SignedCall {
  method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE";
  url: string;
  /** The body sent (POST, PUT, PATCH); `{}` by default. */
  body?: string;
  /** Covered components; default the profile's (`content-digest` with a body). */
  components?: string[];
  /** The body the digest is computed over, when it is not the body sent. */
  digestOf?: string;
  /** The URL signed as `@target-uri`, when it is not the URL requested. */
  signedUrl?: string;
  created?: number;
  expires?: number;
  nonce?: string;
  headers?: Record<string, string>;
}

/** Headers of a request signed under the proto profile, or broken as the call says. */
export function signedHeaders(context: ProbeContext, agent: AgentKey, call: SignedCall): Record<string, string> {
  const body = BODY_METHODS.has(call.method) ? (call.body ?? "{}") : undefined;
  const digestSource = call.digestOf ?? body;
  const digest = digestSource === undefined ? undefined : contentDigest(Buffer.from(digestSource, "utf8"));
  const names =
    call.components ?? (body === undefined ? ["@method", "@target-uri"] : ["@method", "@target-uri", "content-digest"]);
  const created = call.created ?? context.nowSeconds();
  const sent: Record<string, string> = {
    ...(body === undefined ? {} : { "content-type": "application/json" }),
    ...(digest === undefined ? {} : { "content-digest": digest }),
    ...call.headers,
  };
  const signature = signMessage(
    {
      method: call.method,
      targetUri: fetchTargetUri(call.signedUrl ?? call.url),
      // A covered header the request does not carry (the extra-component probe) is signed as if it did.
      header: (name) => sent[name] ?? (name.startsWith("@") ? undefined : ABSENT_HEADER_VALUE),
    },
    names.map((name): ComponentIdentifier => [name, new Map()]),
    [
      ["created", created],
      ["expires", call.expires ?? created + 60],
      ["nonce", call.nonce ?? randomNonce()],
      ["keyid", agent.did],
      ["alg", "ed25519"],
    ],
    agent.privateKey,
    "sig1",
  );
  return { ...sent, ...signatureHeaderPair([signature]) };
}

export function sendSigned(context: ProbeContext, agent: AgentKey, call: SignedCall): Promise<HttpResponse> {
  const headers = signedHeaders(context, agent, call);
  return context.http.request(call.method, call.url, {
    headers,
    ...(BODY_METHODS.has(call.method) ? { body: call.body ?? "{}" } : {}),
  });
}

/** `error.code` of an answer, whatever else its body holds (the envelope probe checks the shape). */
export const errorCode = (response: HttpResponse): unknown =>
  isObject(response.json) && isObject(response.json.error) ? response.json.error.code : undefined;

export function expectRefusal(response: HttpResponse, status: number, code: string, what: string): void {
  const got = errorCode(response);
  check(
    response.status === status && got === code,
    response.status === 0
      ? `${what}: no answer (${response.exchange.error ?? "unknown"})`
      : `${what}: expected ${status} ${code}, got ${response.status} ${got === undefined ? "(no error code)" : String(got)}`,
    response.exchange,
  );
}

/** Codes that mean the signature itself was refused. */
const SIGNATURE_CODES = new Set(["invalid_signature", "expired_signature", "replayed_nonce"]);

/**
 * On a service that signs agents up implicitly, an accepted request creates an account: a write.
 * Only `attested_only` refuses an unattested key before any state change (upstream §6.3); under
 * `denied` an unclaimed account may still exist, read-only (upstream §9.1).
 */
export function requireNoImplicitWrite(context: ProbeContext, shape: ServiceShape): void {
  if (shape.mode !== "attested_only" && !context.options.write) {
    throw new ProbeSkip(`unclaimed_mode is ${shape.mode}: an accepted request may create an account, run with --write`);
  }
}

/**
 * How a service answers an unattested key's introspection on an `attested_only` service: 401
 * `attestation_required` (implicit signup refused, upstream §6.3), or 404 `unknown_account` when
 * it requires explicit signup (upstream §6.4). Either way no account exists.
 */
export function expectNoAccount(response: HttpResponse, what: string): void {
  const code = errorCode(response);
  if (response.status === 404 && code === "unknown_account") return;
  expectRefusal(response, 401, "attestation_required", what);
}

/** What an accepted signature is answered with, by the service's signup posture. */
export function expectAccepted(response: HttpResponse, shape: ServiceShape, what: string): void {
  const code = errorCode(response);
  check(
    !(response.status === 401 && typeof code === "string" && SIGNATURE_CODES.has(code)),
    `${what}: the correct signature was refused (${response.status} ${String(code)})`,
    response.exchange,
  );
  if (shape.mode === "attested_only") {
    expectNoAccount(response, `${what} without an attestation (attested_only)`);
  } else {
    check(
      [200, 201].includes(response.status) || (response.status === 404 && code === "unknown_account"),
      `${what}: expected 200, 201 or 404 unknown_account, got ${response.status} ${String(code ?? "")}`.trimEnd(),
      response.exchange,
    );
  }
}

/** One correctly signed GET of `{accounts}/me`, and the very same request again. */
const acceptedPair = (context: ProbeContext) =>
  context.memo("accepted-me", async () => {
    const shape = await serviceShape(context);
    requireNoImplicitWrite(context, shape);
    const agent = newAgentKey();
    const headers = signedHeaders(context, agent, { method: "GET", url: shape.me });
    const first = await context.http.request("GET", shape.me, { headers });
    const again = await context.http.request("GET", shape.me, { headers });
    return { shape, first, again };
  });

export const signatureAccepted: Probe = {
  id: "service.signature.accepted",
  description: "a correctly signed GET {accounts}/me is answered without a signature error",
  section: `${RESERVED}; trust.md §Presentation`,
  async run(context) {
    const { shape, first } = await acceptedPair(context);
    expectAccepted(first, shape, "signed GET {accounts}/me");
    return pass();
  },
};

export const replayedNonce: Probe = {
  id: "service.signature.replayed-nonce",
  description: "the same signed request sent twice (same keyid and nonce) is 401 replayed_nonce",
  section: `${RESERVED}; upstream core §5.6`,
  async run(context) {
    const { again } = await acceptedPair(context);
    expectRefusal(again, 401, "replayed_nonce", "the replayed GET {accounts}/me");
    return pass();
  },
};

/**
 * A probe sending one request broken in one way, refused with a reserved code before anything happens.
 * The time-window probes send a POST (a signup): upstream §5.6 lets a service accept a GET signed
 * outside the freshness window, never a mutating request.
 */
function broken(
  id: string,
  description: string,
  code: string,
  call: (context: ProbeContext, shape: ServiceShape) => SignedCall | SignedCall[],
): Probe {
  return {
    id,
    description,
    section: PROFILE,
    async run(context) {
      const shape = await serviceShape(context);
      const calls = call(context, shape);
      for (const one of Array.isArray(calls) ? calls : [calls]) {
        const response = await sendSigned(context, newAgentKey(), one);
        expectRefusal(response, 401, code, `${one.method} ${new URL(one.url).pathname} (${description})`);
      }
      return pass();
    },
  };
}

export const missingDigest = broken(
  "service.signature.missing-digest",
  "a signed POST whose signature does not cover content-digest is 401 invalid_signature",
  "invalid_signature",
  (_, shape) => ({ method: "POST", url: shape.accounts, components: ["@method", "@target-uri"] }),
);

export const missingTargetUri = broken(
  "service.signature.missing-target-uri",
  "a signature that does not cover @target-uri is 401 invalid_signature",
  "invalid_signature",
  (_, shape) => ({ method: "GET", url: shape.me, components: ["@method"] }),
);

/**
 * A covered component the request does not carry: no verifier can build the signature base
 * (RFC 9421 §3.2). Refused whatever a service makes of extra components.
 */
export const extraComponent = broken(
  "service.signature.extra-component",
  `a signature also covering a header the request does not carry (${ABSENT_HEADER}) is 401 invalid_signature`,
  "invalid_signature",
  (_, shape) => ({
    method: "POST",
    url: shape.accounts,
    components: ["@method", "@target-uri", "content-digest", ABSENT_HEADER],
  }),
);

/**
 * Upstream's conformance document (service rule 2) asks a service to "reject requests with extra
 * or missing components": the covered set is exactly core §5.2's (`@method`, `@target-uri`, and
 * `content-digest` exactly when there is a body), not a minimum, although core §5.5 only lists the
 * check for the required ones. Extra components here are ones the request does carry, so the
 * signature is otherwise good: `content-type` on a POST, the derived `@authority` on a GET (which
 * core §5.2 dropped from the profile).
 */
export const extraCarriedComponent = broken(
  "service.signature.extra-carried-component",
  "a signature also covering a component the request carries (content-type, @authority) is 401 invalid_signature",
  "invalid_signature",
  (_, shape) => [
    { method: "POST", url: shape.accounts, components: ["@method", "@target-uri", "content-digest", "content-type"] },
    { method: "GET", url: shape.me, components: ["@method", "@target-uri", "@authority"] },
  ],
);

export const wrongDigest = broken(
  "service.signature.wrong-digest",
  "a signed Content-Digest that is not the body's is 401 invalid_signature",
  "invalid_signature",
  (_, shape) => ({ method: "POST", url: shape.accounts, body: '{"conformance":1}', digestOf: "{}" }),
);

export const validityTooLong = broken(
  "service.signature.validity-too-long",
  "a signed POST whose expires - created is 301 s (over 300) is 401 invalid_signature",
  "invalid_signature",
  (context, shape) => ({ method: "POST", url: shape.accounts, expires: context.nowSeconds() + 301 }),
);

export const expiredSignature = broken(
  "service.signature.expired",
  "a signed POST whose expires is 10 minutes past (beyond the 60 s skew) is 401 expired_signature",
  "expired_signature",
  (context, shape) => ({
    method: "POST",
    url: shape.accounts,
    created: context.nowSeconds() - 660,
    expires: context.nowSeconds() - 600,
  }),
);

export const futureCreated = broken(
  "service.signature.future-created",
  "a signed POST created 10 minutes in the future (beyond the 60 s skew) is 401 invalid_signature",
  "invalid_signature",
  (context, shape) => ({
    method: "POST",
    url: shape.accounts,
    created: context.nowSeconds() + 600,
    expires: context.nowSeconds() + 660,
  }),
);

export const wrongTargetUri = broken(
  "service.signature.wrong-target-uri",
  "a signature over another host's or another path's @target-uri is 401 invalid_signature",
  "invalid_signature",
  (_, shape) => {
    const other = new URL(shape.me);
    other.host = "conformance.invalid";
    return [
      { method: "GET", url: shape.me, signedUrl: other.href },
      { method: "GET", url: shape.me, signedUrl: `${shape.accounts.replace(/\/+$/, "")}/conformance` },
    ];
  },
);
