/** The GateConfig of the in-process gate tests (gate.test.ts, forward-auth.test.ts): built directly, not parsed. */
import type { GateConfig } from "../../src/config-types.js";

export function gateConfig(
  publicUrl: string,
  appPort: number,
  trustUrl: string,
  database: string,
  options: { secret: string; mode: GateConfig["mode"]; host: string },
): GateConfig {
  const route = (path: string, access: GateConfig["routes"][number]["access"], line: number) => ({
    path,
    methods: undefined,
    access,
    permissions: [],
    signedAgents: undefined,
    line,
  });
  return {
    file: undefined,
    service: {
      did: `did:web:${options.host}%3A${new URL(publicUrl).port}`,
      name: "Echo",
      publicUrl,
      allowHttp: false,
      unclaimedMode: "free",
      // E-mail invitations need mail settings: their part is the kit's, tested there.
      recipientTypes: ["oidc"],
    },
    listen: { host: "127.0.0.1", port: 0 },
    upstream: { url: `http://127.0.0.1:${appPort}`, timeoutSeconds: 30 },
    attestors: { "proto-trust": { url: trustUrl, displayName: undefined } },
    store: { database, redisUrl: undefined },
    trustedProxies: [],
    permissions: {},
    routes: [
      route("/open/", "open", 1),
      route("/sse", "open", 2),
      route("/maybe/", "optional", 3),
      route("/attested/", "attested", 4),
      route("/", "agents", 5),
    ],
    mcp: [],
    mail: undefined,
    identitySecret: options.secret,
    limits: { maxBodyBytes: 64 * 1024 * 1024 },
    mode: options.mode,
    logLevel: "warn",
  };
}
