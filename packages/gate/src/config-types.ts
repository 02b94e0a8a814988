/**
 * The gate's configuration, as `loadConfig` answers it from the one YAML file (names there are
 * snake_case; see `proto-gate init` for the commented starting file). Every value here is checked:
 * URLs parse, numbers are in range, every route's permissions are declared.
 */
import type { DiscoveryPermissions, DiscoveryRecipientType, UnclaimedMode } from "@proto/protocol";

/** How a route lets callers in. */
export type RouteAccess =
  /** Anyone, unverified: forwarded as is (identity headers removed, none added). */
  | "open"
  /** Anonymous callers pass; a request that tries the protocol must pass it and is recognised. */
  | "optional"
  /** A verified agent (signature; an attestation when the service's unclaimed mode asks for one). */
  | "agents"
  /** A verified agent whose request carries a valid attestation. */
  | "attested";

export interface GateRoute {
  /** Path prefix, starting with `/`: `/api/` matches `/api/x`; `/api` matches `/api` and `/api/x`, not `/apix`. */
  path: string;
  /** Upper-case methods; undefined: every method. */
  methods: string[] | undefined;
  access: RouteAccess;
  /** Permissions the caller must hold (each declared under `permissions`). */
  permissions: string[];
  /** Web Bot Auth callers with no account: `allow` (default on optional), `challenge` (default elsewhere), `refuse`. */
  signedAgents: "allow" | "challenge" | "refuse" | undefined;
  /** The YAML line the route starts on (for messages). */
  line: number;
}

/** A path served as an OAuth protected resource (an MCP endpoint): bearer tokens from the attestors. */
export interface GateMcpPath {
  path: string;
  /** Scopes every token must carry here (each a declared permission). */
  scopes: string[];
  line: number;
}

export interface GateAttestor {
  /** The attestor's `{trust_url}` (its key set and OpenID provider live there). */
  url: string;
  displayName: string | undefined;
}

export interface GateConfig {
  /** The file it came from (absolute), or undefined for text. */
  file: string | undefined;
  service: {
    did: string;
    /** 1-60 characters; default: the public URL's host. */
    name: string | undefined;
    /** The public origin agents sign (`https://api.example.com`). */
    publicUrl: string;
    /** Development only: a plain-http public URL on this machine. */
    allowHttp: boolean;
    unclaimedMode: UnclaimedMode;
    /** Recipient types the service takes for owner invitations (default `["email", "oidc"]` with `mail`, else `["oidc"]`). */
    recipientTypes: DiscoveryRecipientType[];
  };
  listen: { host: string; port: number };
  upstream: {
    /** http(s) origin, optionally with a base path, of the application. */
    url: string;
    /** Whole-answer-start timeout: no status line from the upstream within it is a 504 (default 30). */
    timeoutSeconds: number;
  };
  attestors: Record<string, GateAttestor>;
  store: {
    /** `sqlite:PATH` (default `sqlite:./proto-gate.db`) or `postgres://...`. */
    database: string;
    /** Replay store and rate counters shared by replicas. */
    redisUrl: string | undefined;
  };
  /** Addresses or CIDRs of the TLS proxies in front (nginx, Caddy) whose X-Forwarded-* are believed. */
  trustedProxies: string[];
  /** Declared permissions (docs/authority.md): name -> description, spending, phishing resistance. */
  permissions: DiscoveryPermissions;
  routes: GateRoute[];
  mcp: GateMcpPath[];
  /**
   * How claim links of e-mail invitations are mailed: SMTP (`smtp_url` from an environment
   * variable named by `mail.smtp_url_env`, and `from`). Without it, `email` must not be among the
   * recipient types.
   */
  mail: { smtpUrl: string; from: string } | undefined;
  /** When set, the gate signs the identity headers it forwards (HMAC-SHA256 with this secret's bytes). */
  identitySecret: string | undefined;
  limits: {
    /** Largest body of a verified request, held while its digest and signature are checked (default 64 MiB). */
    maxBodyBytes: number;
  };
  /** `proxy` (a reverse proxy, default) or `auth` (answers nginx auth_request / Caddy forward_auth / Traefik forwardAuth). */
  mode: "proxy" | "auth";
  logLevel: "fatal" | "error" | "warn" | "info" | "debug";
}
