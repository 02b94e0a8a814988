/**
 * The service hosts a directory fetches from, for both the in-process directory harness and the
 * multi-replica cluster: one HTTPS host under a test CA answering for `site{i}.test`, with a
 * handler of its own per name for the proof and discovery paths and a count of fetches, so each
 * test can make its site serve, fail or misbehave without touching another's.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { DISCOVERY_PATH, type HttpsHost, PROOF_PATH, startHttpsHost, type TestCA } from "@proto/testkit";

export type SiteHandler = (req: IncomingMessage, res: ServerResponse) => void;

/** The proof and discovery paths, which every site has and counts; any other path a test routes. */
type SitePath = typeof PROOF_PATH | typeof DISCOVERY_PATH | (string & {});

/** One service host the directory can fetch from: its own hostname, proof and discovery document. */
export interface Site {
  hostname: string;
  /** `hostname:port` as it appears in URLs. */
  authority: string;
  discoveryUrl: string;
  proofUrl: string;
  /** `did:web:{hostname}%3A{port}`: the DID a well-formed document of this host declares. */
  did: string;
  /** A valid discovery document for this host, with overrides merged at the top level. */
  document(overrides?: Record<string, unknown>): Record<string, unknown>;
  serveProof(token: string): void;
  serveDiscovery(doc: unknown): void;
  /** Replaces the handling of a path: one of the two (misbehaviours, counters), or another (an API). */
  setHandler(path: SitePath, handler: SiteHandler): void;
  /** Whether the path has a handler yet (anything unhandled answers 404). */
  handles(path: SitePath): boolean;
  /** How often each path was fetched. */
  hits: { proof: number; discovery: number };
}

export interface SiteHost {
  /** `PROTO_FETCH_RESOLVE` entries pinning every site's name to the host. */
  resolveEntries(): string;
  /** Hands out a fresh site; throws once all `count` are taken. */
  site(): Site;
  close(): Promise<void>;
}

export async function startSiteHost(ca: TestCA, count: number): Promise<SiteHost> {
  const hostnames = Array.from({ length: count }, (_, i) => `site${i}.test`);
  const host: HttpsHost = await startHttpsHost({ ca, hostnames });
  const handlers = new Map<string, Map<string, SiteHandler>>();
  const hits = new Map<string, { proof: number; discovery: number }>();
  const routed = new Set<string>();
  /** One route per path on the shared host, dispatching on the Host header to that site's handler. */
  const routePath = (path: string) => {
    if (routed.has(path)) return;
    routed.add(path);
    host.route(path, (req, res) => {
      const name = (req.headers.host ?? "").split(":")[0] ?? "";
      const counter = hits.get(name);
      if (counter && (path === PROOF_PATH || path === DISCOVERY_PATH)) {
        counter[path === PROOF_PATH ? "proof" : "discovery"]++;
      }
      const handler = handlers.get(name)?.get(path);
      if (handler === undefined) {
        res.writeHead(404, { "content-type": "text/plain" });
        res.end("not found");
        return;
      }
      handler(req, res);
    });
  };
  routePath(PROOF_PATH);
  routePath(DISCOVERY_PATH);

  let next = 0;
  return {
    resolveEntries: () => host.resolveEntries(),
    close: () => host.close(),
    site() {
      if (next >= count) throw new Error(`the suite asked for more than ${count} sites`);
      const hostname = hostnames[next++]!;
      const authority = `${hostname}:${host.port}`;
      const own = new Map<string, SiteHandler>();
      handlers.set(hostname, own);
      const counter = { proof: 0, discovery: 0 };
      hits.set(hostname, counter);
      const did = `did:web:${hostname}%3A${host.port}`;
      return {
        hostname,
        authority,
        discoveryUrl: `https://${authority}${DISCOVERY_PATH}`,
        proofUrl: `https://${authority}${PROOF_PATH}`,
        did,
        hits: counter,
        document: (overrides = {}) => ({
          proto_version: "0.1",
          service_did: did,
          endpoints: {
            accounts: "/proto/v1/accounts",
            owner_invitation: "/proto/v1/accounts/me/owner-invitation",
            claim_page: `https://${authority}/claim`,
            claim_completion: "/proto/v1/claim",
          },
          signature_algorithms: ["ed25519"],
          ...overrides,
        }),
        serveProof(token) {
          own.set(PROOF_PATH, (_req, res) => {
            res.writeHead(200, { "content-type": "text/plain" });
            res.end(token);
          });
        },
        serveDiscovery(doc) {
          own.set(DISCOVERY_PATH, (_req, res) => {
            res.writeHead(200, { "content-type": "application/json" });
            res.end(typeof doc === "string" ? doc : JSON.stringify(doc));
          });
        },
        setHandler(path, handler) {
          routePath(path);
          own.set(path, handler);
        },
        handles: (path) => own.has(path),
      };
    },
  };
}
