/**
 * `proto-conformance agent --listen PORT`: a service stand-in that an agent is pointed at. It
 * answers like a small conforming service (discovery, signup, introspection, the `Proto` challenge
 * and the reserved codes) and checks what the agent sends: each rule is a probe whose result comes
 * from what was observed (pass once seen correct, fail with the request that broke it, skipped when
 * nothing exercised it).
 */
import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import {
  ATTESTATION_HEADER,
  type AttestationVerifier,
  createAttestationVerifier,
  errorEnvelope,
  formatProtoChallenge,
  RemoteKeySet,
} from "@proto/protocol";
import type { HttpExchange } from "../http.js";
import type { ProbeResult } from "../runner.js";
import {
  checkComponents,
  checkDigest,
  checkParams,
  checkVerifies,
  checkWindow,
  type ReceivedRequest,
  readSignature,
} from "./observe.js";

const SIGNING = "trust.md §POST /v1/token (signing rules); upstream core §5.5";
const WINDOW = "trust.md §POST /v1/token; decisions.md §Trust attestor 1; upstream core §5.6";
const PRESENTATION = "trust.md §POST /v1/token (Presentation); upstream.md 4";

export interface AgentProbe {
  id: string;
  description: string;
  section: string;
  /** Why it is skipped when nothing exercised it. */
  unexercised: string;
}

export const agentProbes: readonly AgentProbe[] = [
  {
    id: "agent.signature.components",
    description:
      "requests are signed (Signature-Input, Signature) over exactly @method, @target-uri, and content-digest with a body",
    section: SIGNING,
    unexercised: "no request other than discovery came",
  },
  {
    id: "agent.signature.params",
    description: "the signature has created, expires, nonce, keyid (an Ed25519 did:key) and alg ed25519",
    section: SIGNING,
    unexercised: "no signed request came",
  },
  {
    id: "agent.signature.window",
    description: "expires - created is at most 300 s, created is not in the future, expires has not passed (60 s skew)",
    section: WINDOW,
    unexercised: "no signed request with created and expires came",
  },
  {
    id: "agent.signature.verifies",
    description: "the signature verifies with the keyid's key over the request as received (its @target-uri)",
    section: `${SIGNING}; trust.md §Reserved codes of services that accept attestations`,
    unexercised: "no signed request came",
  },
  {
    id: "agent.nonce.fresh",
    description: "no nonce is used twice in the session",
    section: `${WINDOW}; trust.md §Reserved codes (replayed_nonce)`,
    unexercised: "no signed request with a nonce came",
  },
  {
    id: "agent.digest",
    description: "a request with a body carries Content-Digest, the sha-256 of the body",
    section: SIGNING,
    unexercised: "no request with a body came",
  },
  {
    id: "agent.digest.bodyless",
    description: "a request without a body carries no Content-Digest",
    section: SIGNING,
    unexercised: "no request without a body came",
  },
  {
    id: "agent.attestation.presented",
    description:
      "on an attested_only service the agent sends Proto-Attestation, at the latest after 401 attestation_required",
    section: PRESENTATION,
    unexercised: "no correctly signed request of an agent without an account came",
  },
  {
    id: "agent.attestation.valid",
    description:
      "Proto-Attestation verifies against the attestor's key set (EdDSA), aud the service DID, sub the signing DID",
    section: `${PRESENTATION}; trust.md §Attestation JWT, §Authentication (verifier rules)`,
    unexercised: "no Proto-Attestation came",
  },
];

export interface AgentStandInOptions {
  port: number;
  /** Where to listen (default 127.0.0.1). */
  host?: string;
  /**
   * The origin agents are told to use, and that their `@target-uri` must name (default
   * `http://{host}:{port}`): set it when the stand-in is reached through a TLS front.
   */
  publicUrl?: string;
  /** `attested_only` with this attestor, or `open` (`unclaimed_mode` `free`, no attestation). */
  attestor?: { url: string; issuer: string; verifier?: AttestationVerifier } | undefined;
  /** Stop after this many checked requests (discovery reads are not counted). */
  requests?: number;
  /** Seconds since the epoch; injectable so tests need no clock. */
  nowSeconds?: () => number;
}

export interface AgentStandIn {
  /** The URL to point the agent at (the service origin). */
  url: string;
  /** Resolves when `requests` requests were checked. */
  done: Promise<void>;
  /** Requests checked so far. */
  checked(): number;
  report(): ProbeResult[];
  close(): Promise<void>;
}

interface ProbeState {
  seen: boolean;
  failure?: { message: string; exchange: HttpExchange };
}

interface Account {
  account_id: string;
  agent_did: string;
  state: "UNCLAIMED";
  created_at: string;
  owner: null;
}

const ACCOUNTS_PATH = "/proto/v1/accounts";
const MAX_BODY = 1024 * 1024;

const excerpt = (text: string): string => (text.length > 2048 ? `${text.slice(0, 2048)}...` : text);

/** Request headers worth showing, an attestation reduced to its length (it is a credential). */
function shownHeaders(headers: Record<string, string>): Record<string, string> {
  const shown: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (name === ATTESTATION_HEADER.toLowerCase()) shown[name] = `(a JWT of ${value.length} characters)`;
    else if (/^(signature|signature-input|content-digest|content-type)$/.test(name)) shown[name] = value;
  }
  return shown;
}

function describeRequest(exchange: HttpExchange): string {
  const lines = Object.entries(exchange.requestHeaders).map(([name, value]) => `${name}: ${value}`);
  return lines.length === 0 ? "" : ` [${lines.join("; ")}]`;
}

export async function startAgentStandIn(options: AgentStandInOptions): Promise<AgentStandIn> {
  const host = options.host ?? "127.0.0.1";
  const nowSeconds = options.nowSeconds ?? (() => Math.floor(Date.now() / 1000));
  const states = new Map<string, ProbeState>(agentProbes.map((p) => [p.id, { seen: false }]));
  const nonces = new Map<string, string>();
  const accounts = new Map<string, Account>();
  /** Keys answered 401 attestation_required that have not presented one since. */
  const challenged = new Set<string>();
  const attestor = options.attestor;
  const verifier =
    attestor === undefined
      ? undefined
      : (attestor.verifier ??
        createAttestationVerifier({
          keySet: new RemoteKeySet(`${attestor.url.replace(/\/+$/, "")}/.well-known/jwks.json`),
          issuers: [attestor.issuer],
          now: () => nowSeconds() * 1000,
        }));
  let checked = 0;
  let finish: () => void = () => {};
  const done = new Promise<void>((resolve) => {
    finish = resolve;
  });

  let origin = "";
  let serviceDid = "";
  const discoveryUrl = () => `${origin}/.well-known/proto`;

  const observe = (id: string, finding: string | undefined, exchange: HttpExchange) => {
    const state = states.get(id);
    if (state === undefined) return;
    state.seen = true;
    if (finding !== undefined && state.failure === undefined) {
      state.failure = {
        message: `${exchange.method} ${exchange.url}: ${finding}${describeRequest(exchange)}`,
        exchange,
      };
    }
  };

  const discovery = () => ({
    proto_version: "0.1",
    service_did: serviceDid,
    endpoints: {
      accounts: ACCOUNTS_PATH,
      owner_invitation: `${ACCOUNTS_PATH}/me/owner-invitation`,
      claim_page: `${origin}/claim`,
      claim_completion: "/proto/v1/claim",
    },
    signature_algorithms: ["ed25519"],
    billing:
      attestor === undefined
        ? { unclaimed_mode: "free" }
        : { unclaimed_mode: "attested_only", accepted_attestors: [attestor.issuer] },
  });

  interface Answer {
    status: number;
    body: unknown;
    headers?: Record<string, string>;
  }

  const refuse = (status: number, code: string, message: string): Answer => ({
    status,
    body: errorEnvelope(code, message),
    headers:
      status === 401
        ? {
            "www-authenticate": formatProtoChallenge({
              discovery: discoveryUrl(),
              realm: serviceDid,
              error: code,
              ...(code === "attestation_required" || code === "invalid_attestation"
                ? { attestors: attestor === undefined ? [] : [attestor.issuer] }
                : {}),
            }),
          }
        : {},
  });

  const accountFor = (did: string): { account: Account; created: boolean } => {
    const existing = accounts.get(did);
    if (existing !== undefined) return { account: existing, created: false };
    const account: Account = {
      account_id: `acct_${randomUUID().replace(/-/g, "")}`,
      agent_did: did,
      state: "UNCLAIMED",
      created_at: new Date(nowSeconds() * 1000).toISOString(),
      owner: null,
    };
    accounts.set(did, account);
    return { account, created: true };
  };

  /** Checks one request and answers it like a conforming service would. */
  async function check(request: ReceivedRequest, exchange: HttpExchange): Promise<Answer> {
    const signature = readSignature(request.headers);
    const hasBody = request.body.length > 0;
    const digest = checkDigest(request);
    if (hasBody) observe("agent.digest", digest.withBody, exchange);
    else observe("agent.digest.bodyless", digest.bodyless, exchange);
    if (typeof signature === "string") {
      observe("agent.signature.components", signature, exchange);
      return refuse(401, "invalid_signature", signature);
    }
    const findings = {
      components: checkComponents(signature, hasBody),
      params: checkParams(signature),
      window: checkWindow(signature, nowSeconds()),
      verifies: checkVerifies(signature, request),
    };
    observe("agent.signature.components", findings.components, exchange);
    observe("agent.signature.params", findings.params, exchange);
    if (signature.params.has("created") && signature.params.has("expires"))
      observe("agent.signature.window", findings.window, exchange);
    observe("agent.signature.verifies", findings.verifies, exchange);
    const nonce = signature.params.get("nonce");
    let replayed: string | undefined;
    if (typeof nonce === "string" && nonce !== "") {
      const first = nonces.get(nonce);
      if (first !== undefined) replayed = `nonce ${nonce} was already used by ${first}`;
      else nonces.set(nonce, `${exchange.method} ${exchange.url}`);
      observe("agent.nonce.fresh", replayed, exchange);
    }
    const windowExpired = findings.window?.startsWith("expires passed") === true;
    const broken = [findings.components, findings.params, findings.window, findings.verifies, digest.withBody].find(
      (f) => f !== undefined,
    );
    if (windowExpired) return refuse(401, "expired_signature", findings.window ?? "");
    if (broken !== undefined) return refuse(401, "invalid_signature", broken);
    if (replayed !== undefined) return refuse(401, "replayed_nonce", replayed);
    const did = String(signature.params.get("keyid"));

    if (attestor !== undefined && verifier !== undefined) {
      const jwt = request.headers[ATTESTATION_HEADER.toLowerCase()];
      if (jwt !== undefined) {
        if (challenged.has(did) || !accounts.has(did)) observe("agent.attestation.presented", undefined, exchange);
        challenged.delete(did);
        try {
          await verifier.verify(jwt, { audience: serviceDid, agentDid: did });
          observe("agent.attestation.valid", undefined, exchange);
        } catch (error) {
          const why = error instanceof Error ? error.message : String(error);
          observe("agent.attestation.valid", `the attestation does not verify: ${why}`, exchange);
          return refuse(401, "invalid_attestation", `the attestation does not verify: ${why}`);
        }
        accountFor(did);
      } else if (!accounts.has(did)) {
        if (challenged.has(did)) {
          observe(
            "agent.attestation.presented",
            "came back without Proto-Attestation after 401 attestation_required",
            exchange,
          );
        }
        challenged.add(did);
        return refuse(401, "attestation_required", "this service accepts attested agents only: send Proto-Attestation");
      }
    }

    const path = request.target.split("?")[0] ?? "";
    if (path === ACCOUNTS_PATH && request.method === "POST") {
      const { account, created } = accountFor(did);
      // Upstream §6.4: the signup answer has no `owner` (an agent must not count on one).
      const { owner: _owner, ...signup } = account;
      return { status: created ? 201 : 200, body: signup };
    }
    if (path === `${ACCOUNTS_PATH}/me` && request.method === "GET")
      return { status: 200, body: accountFor(did).account };
    // Anything else an agent sends, signed and accepted (implicit signup on an open service).
    accountFor(did);
    return { status: 200, body: { ok: true } };
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of req) {
      size += (chunk as Buffer).length;
      if (size > MAX_BODY) {
        res.writeHead(413, { "content-type": "application/json" });
        res.end(JSON.stringify(errorEnvelope("malformed_request", "the body is over 1 MiB")));
        return;
      }
      chunks.push(chunk as Buffer);
    }
    const body = Buffer.concat(chunks);
    const target = req.url ?? "/";
    const send = (answer: Answer) => {
      res.writeHead(answer.status, { "content-type": "application/json", ...answer.headers });
      res.end(JSON.stringify(answer.body));
      return answer;
    };
    if (target === "/.well-known/proto" && (req.method === "GET" || req.method === "HEAD")) {
      send({ status: 200, body: discovery(), headers: { "cache-control": "public, max-age=60" } });
      return;
    }
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(req.headers)) {
      if (value !== undefined) headers[name] = Array.isArray(value) ? value.join(", ") : value;
    }
    const request: ReceivedRequest = { method: req.method ?? "GET", target, url: `${origin}${target}`, headers, body };
    const exchange: HttpExchange = {
      method: request.method,
      url: request.url,
      requestHeaders: shownHeaders(headers),
      ...(body.length > 0 ? { requestBody: excerpt(body.toString("utf8")) } : {}),
      status: 0,
      headers: {},
      bodyExcerpt: "",
    };
    let answer: Answer;
    try {
      answer = await check(request, exchange);
    } catch (error) {
      answer = {
        status: 500,
        body: errorEnvelope("internal_error", error instanceof Error ? error.message : String(error)),
      };
    }
    send(answer);
    exchange.status = answer.status;
    exchange.headers = { "content-type": "application/json", ...answer.headers };
    exchange.bodyExcerpt = excerpt(JSON.stringify(answer.body));
    checked += 1;
    if (options.requests !== undefined && checked >= options.requests) finish();
  }

  const server: Server = createServer((req, res) => {
    handle(req, res).catch(() => {
      if (!res.headersSent) res.writeHead(500);
      res.end();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const address = server.address();
  const port = address !== null && typeof address === "object" ? address.port : options.port;
  const bracketed = host.includes(":") ? `[${host}]` : host;
  origin = (options.publicUrl ?? `http://${bracketed}:${port}`).replace(/\/+$/, "");
  const originUrl = new URL(origin);
  serviceDid = `did:web:${originUrl.host.replace(":", "%3A")}`;

  return {
    url: origin,
    done,
    checked: () => checked,
    report() {
      return agentProbes.map((probe): ProbeResult => {
        const state = states.get(probe.id) ?? { seen: false };
        const base = { id: probe.id, description: probe.description, section: probe.section, notes: [] };
        if (attestor === undefined && probe.id.startsWith("agent.attestation.")) {
          return { ...base, status: "skipped", message: "the stand-in is open (--open): it asks for no attestation" };
        }
        if (state.failure !== undefined) {
          return { ...base, status: "fail", message: state.failure.message, exchange: state.failure.exchange };
        }
        if (!state.seen) return { ...base, status: "skipped", message: `never exercised: ${probe.unexercised}` };
        return { ...base, status: "pass", message: "" };
      });
    },
    close() {
      finish();
      return new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}
