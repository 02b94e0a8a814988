/**
 * A service that declares permissions (docs/authority.md), as the attestor reads it: its discovery
 * document at `https://notes.test:PORT/.well-known/proto`, served over real HTTPS under a test CA
 * the attestor is told to trust. The same host also answers as `broken.test` (its document fails)
 * and `elsewhere.test` (its document names notes.test's DID), for the refusals.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { createTestCA, DISCOVERY_PATH, type HttpsHost, startHttpsHost, type TestCA } from "@proto/testkit";

/** What notes.test declares: a default, one that needs a passkey, and a spending one. */
export const NOTES_PERMISSIONS = {
  "notes:read": { description: "Read your notes", default: true },
  "notes:write": { description: "Write and edit your notes" },
  "notes:delete": { description: "Delete your notes", phishing_resistant: true },
  purchase: { description: "Pay for pinned notes", currency: "EUR" },
} as const;

export interface DeclaringService {
  /** `did:web:notes.test%3APORT`. */
  aud: string;
  /** `https://notes.test:PORT`. */
  url: string;
  /** The origin of a host whose document answers 500. */
  brokenUrl: string;
  /** The origin of a host whose document calls itself `aud`. */
  elsewhereUrl: string;
  ca: TestCA;
  /** What the attestor needs to reach and trust the hosts: its `fetchCa` and environment. */
  trustOptions: { fetchCa: string; env: Record<string, string> };
  close(): Promise<void>;
}

export async function startDeclaringService(): Promise<DeclaringService> {
  const ca = await createTestCA();
  const host: HttpsHost = await startHttpsHost({ ca, hostnames: ["notes.test", "broken.test", "elsewhere.test"] });
  const aud = `did:web:notes.test%3A${host.port}`;
  host.route(DISCOVERY_PATH, (req: IncomingMessage, res: ServerResponse) => {
    const name = (req.headers.host ?? "").split(":")[0];
    if (name === "broken.test") {
      res.writeHead(500, { "content-type": "text/plain" });
      res.end("down");
      return;
    }
    res.writeHead(200, { "content-type": "application/json" });
    res.end(
      JSON.stringify({
        proto_version: "0.1",
        service_did: aud,
        endpoints: { accounts: "/proto/v1/accounts" },
        signature_algorithms: ["ed25519"],
        permissions: NOTES_PERMISSIONS,
      }),
    );
  });
  return {
    aud,
    url: host.origin("notes.test"),
    brokenUrl: host.origin("broken.test"),
    elsewhereUrl: host.origin("elsewhere.test"),
    ca,
    trustOptions: {
      fetchCa: ca.certPem,
      env: { PROTO_FETCH_ALLOW_PRIVATE: "1", PROTO_FETCH_RESOLVE: host.resolveEntries() },
    },
    close: () => host.close(),
  };
}
