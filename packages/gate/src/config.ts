/**
 * Reads `proto-gate.yaml` into a checked GateConfig. The gate starts only from a file every value of
 * which was understood: a typo (`acess:`), a duplicate key, a route needing a permission nobody
 * declared or an http public URL would otherwise start a gate that guards less than its operator
 * believes. Every refusal is a GateConfigError naming the file, the line and the key.
 *
 * The YAML is read as a syntax tree (not converted to plain objects first) so each value keeps the
 * line it came from.
 */
import { readFileSync } from "node:fs";
import { BlockList, isIP } from "node:net";
import { dirname, resolve } from "node:path";
import {
  type DiscoveryPermission,
  type DiscoveryPermissions,
  type DiscoveryRecipientType,
  didWebMismatch,
  hasUnsafeUrlCharacter,
  isLoopbackHostname,
  isPermissionName,
  MAX_PERMISSION_NAME_LENGTH,
  parseDid,
  percentDecodedSpellings,
  type UnclaimedMode,
  validateDiscoveryPermissions,
} from "@proto/protocol";
import { isAlias, isMap, isScalar, isSeq, LineCounter, parseDocument } from "yaml";
import type { GateAttestor, GateConfig, GateMcpPath, GateRoute, RouteAccess } from "./config-types.js";
import { underPrefix } from "./routes.js";

/** A refused configuration: `proto-gate.yaml:12: routes[1].access: must be one of ...`. */
export class GateConfigError extends Error {
  override readonly name = "GateConfigError";
  /** The file as it was named to the loader (undefined for text). */
  readonly file?: string;
  /** 1-based line of the offending value (undefined when the problem has no line: an unreadable file, the environment). */
  readonly line?: number;
  /** The offending key's path (`routes[1].access`), or the environment variable's name. */
  readonly key?: string;

  constructor(
    problem: string,
    where: { file?: string | undefined; line?: number | undefined; key?: string | undefined },
  ) {
    super(`${prefix(where.file, where.line)}${where.key === undefined ? "" : `${where.key}: `}${problem}`);
    if (where.file !== undefined) this.file = where.file;
    if (where.line !== undefined) this.line = where.line;
    if (where.key !== undefined) this.key = where.key;
  }
}

function prefix(file: string | undefined, line: number | undefined): string {
  if (file === undefined) return line === undefined ? "" : `line ${line}: `;
  return line === undefined ? `${file}: ` : `${file}:${line}: `;
}

/** Overrides `listen.port` (containers and tests pick the port at run time). */
export const LISTEN_PORT_ENV = "PROTO_GATE_LISTEN_PORT";

export const ROUTE_ACCESS: readonly RouteAccess[] = ["open", "optional", "agents", "attested"];
const SIGNED_AGENTS = ["allow", "challenge", "refuse"] as const;
const UNCLAIMED_MODES: readonly UnclaimedMode[] = ["free", "attested_only", "denied"];
const RECIPIENT_TYPES: readonly DiscoveryRecipientType[] = ["email", "phone", "oidc", "did"];
const DEFAULT_RECIPIENT_TYPES: DiscoveryRecipientType[] = ["email", "oidc"];
const MODES = ["proxy", "auth"] as const;
const LOG_LEVELS = ["fatal", "error", "warn", "info", "debug"] as const;

export const DEFAULT_DATABASE = "sqlite:./proto-gate.db";
export const DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024;
const MIN_BODY_BYTES = 1024;
const MAX_BODY_BYTES = 1024 * 1024 * 1024;
/** HMAC-SHA256 keys shorter than its 32-byte output weaken it; a secret an app must share is no place to save bytes. */
export const MIN_IDENTITY_SECRET_BYTES = 32;
const MAX_PATH_LENGTH = 2048;

const KEYS = {
  root: [
    "service",
    "listen",
    "upstream",
    "attestors",
    "store",
    "trusted_proxies",
    "permissions",
    "routes",
    "mcp",
    "mail",
    "identity",
    "limits",
    "mode",
    "log_level",
  ],
  service: ["did", "name", "public_url", "allow_http", "unclaimed_mode", "recipient_types"],
  listen: ["host", "port"],
  upstream: ["url", "timeout_seconds"],
  attestor: ["url", "display_name"],
  store: ["database", "redis_url"],
  permission: ["description", "default", "phishing_resistant", "currency"],
  route: ["path", "methods", "access", "permissions", "signed_agents"],
  mcp: ["path", "scopes"],
  mail: ["smtp_url_env", "from"],
  identity: ["secret_env"],
  limits: ["max_body_bytes"],
} as const;

/**
 * Keys people plausibly write that mean something else here, with what to write instead. Checked
 * before the spelling suggestions, since these are not typos.
 */
const HINTS: Record<string, string> = {
  spending: "a spending permission is declared with currency: EUR (the ISO 4217 code its amounts are in)",
  secret: "secrets are never written in this file: put it in an environment variable and name that in secret_env",
  identity_secret:
    "secrets are never written in this file: put it in an environment variable and name it in identity.secret_env",
  smtp_url:
    "secrets are never written in this file: put the SMTP URL in an environment variable and name that in smtp_url_env",
  allow_http: "allow_http belongs under service (service.allow_http)",
};

/**
 * Parses and checks the configuration text. `file` names it in messages and anchors a relative
 * `sqlite:` path (default: the working directory); `env` holds the identity secret and the port
 * override (default `process.env`). Throws GateConfigError.
 */
export function parseConfig(text: string, file?: string, env: NodeJS.ProcessEnv = process.env): GateConfig {
  const source = new Source(text, file);
  const root = source.root();
  const baseDir = file === undefined ? process.cwd() : dirname(resolve(file));

  const mail = readMail(root.section("mail", KEYS.mail, false), env);
  const service = readService(root.section("service", KEYS.service, true), mail !== undefined);
  const listen = readListen(root.section("listen", KEYS.listen, false), env, source);
  const upstream = readUpstream(root.section("upstream", KEYS.upstream, true));
  const attestors = readAttestors(root, service.unclaimedMode);
  const store = readStore(root.section("store", KEYS.store, false), baseDir);
  const trustedProxies = readTrustedProxies(root);
  const permissions = readPermissions(root);
  const routes = readRoutes(root, permissions, attestors);
  const mcp = readMcp(root, permissions);
  const identitySecret = readIdentity(root.section("identity", KEYS.identity, false), env);
  const limits = root.section("limits", KEYS.limits, false);
  return {
    file: file === undefined ? undefined : resolve(file),
    service,
    listen,
    upstream,
    attestors,
    store,
    trustedProxies,
    permissions,
    routes,
    mcp,
    mail,
    identitySecret,
    limits: {
      maxBodyBytes: limits.integer("max_body_bytes", MIN_BODY_BYTES, MAX_BODY_BYTES) ?? DEFAULT_MAX_BODY_BYTES,
    },
    mode: root.oneOf("mode", MODES) ?? "proxy",
    logLevel: root.oneOf("log_level", LOG_LEVELS) ?? "info",
  };
}

/** Reads and parses a configuration file; an unreadable file is a GateConfigError naming it. */
export function loadConfigFile(path: string, env: NodeJS.ProcessEnv = process.env): GateConfig {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    const reason =
      code === "ENOENT"
        ? "no such file (write a starting one with `proto-gate init`)"
        : code === "EISDIR"
          ? "is a directory, not a file"
          : `cannot be read (${error instanceof Error ? error.message : String(error)})`;
    throw new GateConfigError(reason, { file: path });
  }
  return parseConfig(text, path, env);
}

// ---------------------------------------------------------------------------------------------
// The sections

function readService(section: Section, hasMail: boolean): GateConfig["service"] {
  const allowHttp = section.boolean("allow_http") ?? false;
  const publicUrlField = section.required("public_url", "the https origin agents call, like https://notes.example.com");
  const publicUrl = publicOrigin(section, publicUrlField, allowHttp);
  const didField = section.required("did", "a did:web naming the public URL's host, like did:web:notes.example.com");
  const did = section.stringOf(didField);
  const parsed = parseDid(did);
  if (!parsed.ok || parsed.did.method !== "web") {
    const reason = parsed.ok ? "it is a did:key" : parsed.reason;
    section.fail(didField, `must be a did:web, like did:web:notes.example.com (${reason})`);
  }
  const mismatch = didWebMismatch(did, new URL(publicUrl).host, `the host of service.public_url (${publicUrl})`);
  if (mismatch !== undefined) section.fail(didField, mismatch);
  const name = section.string("name");
  if (name !== undefined && (name.trim().length === 0 || name.trim().length > 60 || hasControl(name))) {
    section.fail(section.field("name"), "must be 1 to 60 characters on one line");
  }
  const recipientTypes = section.stringList("recipient_types", (value, item) => {
    const type = RECIPIENT_TYPES.find((known) => known === value);
    if (type === undefined)
      return item.fail(`must be one of ${RECIPIENT_TYPES.join(", ")} (got ${JSON.stringify(value)})`);
    return type;
  });
  if (recipientTypes !== undefined && recipientTypes.length === 0) {
    section.fail(section.field("recipient_types"), "must list at least one of email, phone, oidc, did");
  }
  // An e-mail invitation's claim link has to reach the person: without mail nothing would send it.
  if (recipientTypes?.includes("email") && !hasMail) {
    section.fail(
      section.field("recipient_types"),
      "email needs mail (mail: { smtp_url_env: SMTP_URL, from: ... }) to send the claim links; configure it or leave email out",
    );
  }
  return {
    did,
    name: name?.trim(),
    publicUrl,
    allowHttp,
    unclaimedMode: section.oneOf("unclaimed_mode", UNCLAIMED_MODES) ?? "attested_only",
    recipientTypes: unique(recipientTypes ?? (hasMail ? DEFAULT_RECIPIENT_TYPES : ["oidc"])),
  };
}

/** The public URL is what agents sign (`@target-uri`), so it is an origin and, off this machine, https. */
function publicOrigin(section: Section, field: Field, allowHttp: boolean): string {
  const url = section.urlOf(field, "an https origin, like https://notes.example.com");
  if (url.pathname !== "/" || url.search !== "" || url.hash !== "") {
    section.fail(field, `must be an origin, with no path, query or fragment (${url.origin})`);
  }
  if (url.protocol === "https:") return url.origin;
  if (url.protocol !== "http:") section.fail(field, `must be an https URL (got ${url.protocol}//)`);
  const agents = "proto agents call services over https only";
  if (!isLoopbackHostname(url.hostname)) {
    section.fail(
      field,
      `must be https: ${agents}. Put a TLS proxy (nginx, Caddy) in front and give its https origin${
        allowHttp ? " (allow_http accepts http on localhost, 127.0.0.0/8 and [::1] only)" : ""
      }`,
    );
  }
  if (!allowHttp) {
    section.fail(field, `must be https: ${agents}. For development on this machine only, set service.allow_http: true`);
  }
  return url.origin;
}

function readListen(section: Section, env: NodeJS.ProcessEnv, source: Source): GateConfig["listen"] {
  const host = section.string("host") ?? "127.0.0.1";
  if (host.startsWith("[")) section.fail(section.field("host"), "write an IPv6 address without brackets (::1)");
  if (isIP(host) === 0 && !/^[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})$/.test(host)) {
    section.fail(section.field("host"), "must be an IP address or a host name (127.0.0.1, 0.0.0.0, ::, localhost)");
  }
  let port = section.integer("port", 0, 65535) ?? 8080;
  const override = env[LISTEN_PORT_ENV];
  if (override !== undefined && override !== "") {
    if (!/^\d{1,5}$/.test(override) || Number(override) > 65535) {
      throw new GateConfigError(`must be a port number, 0 to 65535 (got ${JSON.stringify(override.slice(0, 20))})`, {
        file: source.file,
        key: LISTEN_PORT_ENV,
      });
    }
    port = Number(override);
  }
  return { host, port };
}

function readUpstream(section: Section): GateConfig["upstream"] {
  const field = section.required("url", "the application's address, like http://127.0.0.1:8000");
  const url = section.urlOf(field, "an http(s) URL, like http://127.0.0.1:8000");
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    section.fail(field, `must be an http or https URL (got ${url.protocol}//)`);
  }
  if (url.username !== "" || url.password !== "") section.fail(field, "must not carry a user name or password");
  if (url.search !== "" || url.hash !== "" || section.stringOf(field).includes("?")) {
    section.fail(field, "must not have a query or fragment (a base path is allowed: http://127.0.0.1:8000/app)");
  }
  // One spelling: the origin, plus the base path without its trailing slash, which request paths are appended to.
  const base = url.pathname === "/" ? "" : url.pathname.replace(/\/+$/, "");
  return { url: `${url.origin}${base}`, timeoutSeconds: section.integer("timeout_seconds", 1, 3600) ?? 30 };
}

function readAttestors(root: Section, mode: UnclaimedMode): Record<string, GateAttestor> {
  const attestors: Record<string, GateAttestor> = {};
  const entries = root.named("attestors");
  for (const [name, field] of entries ?? []) {
    if (name.length > 200 || /\s/.test(name) || hasControl(name)) {
      root.fail(field, "an attestor's name is its attestation issuer (iss), like proto-trust: no spaces", true);
    }
    const entry = root.sectionOf(field, KEYS.attestor);
    const urlField = entry.required("url", "the attestor's {trust_url}, like https://trust.example");
    const url = entry.urlOf(urlField, "an https URL, like https://trust.example");
    if (url.protocol !== "https:" && !(url.protocol === "http:" && isLoopbackHostname(url.hostname))) {
      entry.fail(
        urlField,
        "must be https (plain http is accepted only on this machine: localhost, 127.0.0.0/8, [::1])",
      );
    }
    if (url.username !== "" || url.password !== "" || url.search !== "" || url.hash !== "") {
      entry.fail(urlField, "must not carry a user name, password, query or fragment");
    }
    const displayName = entry.string("display_name");
    if (displayName !== undefined && (displayName.trim().length === 0 || displayName.trim().length > 60)) {
      entry.fail(entry.field("display_name"), "must be 1 to 60 characters");
    }
    attestors[name] = { url: url.href.replace(/\/$/, ""), displayName: displayName?.trim() };
  }
  if (Object.keys(attestors).length === 0 && mode !== "free") {
    root.fail(
      entries === undefined ? undefined : root.field("attestors"),
      `list at least one attestor (attestors: { proto-trust: { url: https://trust.example } }): unclaimed_mode ${mode} needs attestations`,
      false,
      "attestors",
    );
  }
  return attestors;
}

function readStore(section: Section, baseDir: string): GateConfig["store"] {
  const field = section.field("database");
  let database = DEFAULT_DATABASE;
  if (field !== undefined) database = section.stringOf(field);
  const usage = "must be sqlite:PATH (relative to this file's directory), sqlite::memory: or postgres://...";
  if (database.startsWith("sqlite:")) {
    const path = database.slice("sqlite:".length);
    if (path === "" || hasControl(path)) section.fail(field, usage);
    if (path !== ":memory:") database = `sqlite:${resolve(baseDir, path)}`;
  } else if (!/^postgres(ql)?:\/\//.test(database) || !URL.canParse(database)) {
    section.fail(field, `${usage} (got ${JSON.stringify(database.slice(0, 40))})`);
  }
  const redisUrl = section.string("redis_url");
  if (redisUrl !== undefined && (!/^rediss?:\/\//.test(redisUrl) || !URL.canParse(redisUrl))) {
    section.fail(section.field("redis_url"), "must be a redis:// or rediss:// URL");
  }
  return { database, redisUrl };
}

function readTrustedProxies(root: Section): string[] {
  const proxies =
    root.stringList("trusted_proxies", (entry, item) => {
      const problem = proxyProblem(entry);
      if (problem !== undefined) item.fail(problem);
      return entry;
    }) ?? [];
  return unique(proxies);
}

/** An address or CIDR the gate believes `X-Forwarded-*` from; undefined when fine. */
function proxyProblem(entry: string): string | undefined {
  const usage = "must be an IP address or a CIDR (10.0.0.0/8, fd00::/8)";
  const slash = entry.indexOf("/");
  const address = slash < 0 ? entry : entry.slice(0, slash);
  const family = isIP(address);
  if (family === 0) return `${usage} (got ${JSON.stringify(entry.slice(0, 60))})`;
  if (slash < 0) return undefined;
  const prefix = entry.slice(slash + 1);
  const max = family === 4 ? 32 : 128;
  if (!/^\d{1,3}$/.test(prefix) || Number(prefix) > max) return `${usage}: the prefix must be 1 to ${max}`;
  // A zero prefix believes every client about its own address: exactly what the list prevents.
  if (Number(prefix) === 0)
    return `${entry} would trust every address, so any client could choose its own; list the proxies`;
  try {
    new BlockList().addSubnet(address, Number(prefix), family === 4 ? "ipv4" : "ipv6");
  } catch {
    return usage;
  }
  return undefined;
}

function readPermissions(root: Section): DiscoveryPermissions {
  const declared: DiscoveryPermissions = {};
  const lines = new Map<string, { field: Field; section: Section }>();
  for (const [name, field] of root.named("permissions") ?? []) {
    if (!isPermissionName(name)) {
      root.fail(
        field,
        `${JSON.stringify(name)} is not a permission name (lowercase segments separated by colons, like notes:read, at most ${MAX_PERMISSION_NAME_LENGTH} characters)`,
        true,
      );
    }
    const entry = root.sectionOf(field, KEYS.permission);
    const permission: DiscoveryPermission = {
      description: entry.stringOf(entry.required("description", "one line saying what it lets an agent do")),
    };
    const isDefault = entry.boolean("default");
    if (isDefault !== undefined) permission.default = isDefault;
    const phishingResistant = entry.boolean("phishing_resistant");
    if (phishingResistant !== undefined) permission.phishing_resistant = phishingResistant;
    const currency = entry.string("currency");
    if (currency !== undefined) permission.currency = currency;
    declared[name] = permission;
    lines.set(name, { field, section: entry });
  }
  // The discovery schema's own rules (description text, currency code, how many), in its words.
  const result = validateDiscoveryPermissions(declared);
  if (!result.valid) {
    const [first] = result.errors;
    const [, , name, member] = (first?.path ?? "/permissions").split("/").map(unescapePointer);
    const found = name === undefined ? undefined : lines.get(name);
    const key = ["permissions", name, member].filter((part) => part !== undefined).join(".");
    const message = (first?.message ?? "is invalid").replace(`${key}: `, "");
    if (found === undefined) root.fail(root.field("permissions"), message, false, "permissions");
    else if (member === undefined) root.fail(found.field, message, true);
    else found.section.fail(found.section.field(member), message, false, key);
  }
  return declared;
}

function readRoutes(
  root: Section,
  permissions: DiscoveryPermissions,
  attestors: Record<string, GateAttestor>,
): GateRoute[] {
  const items = root.list("routes");
  // Without routes every path is for verified agents: the gate's purpose, and the safe side.
  if (items === undefined) {
    return [{ path: "/", methods: undefined, access: "agents", permissions: [], signedAgents: undefined, line: 0 }];
  }
  if (items.length === 0) {
    root.fail(root.field("routes"), "must list at least one route (leave it out for the default: / for agents)");
  }
  const routes: GateRoute[] = [];
  for (const item of items) {
    const route = root.sectionOf(item, KEYS.route);
    const path = routePath(route, route.required("path", "a path prefix starting with /, like /api/"));
    const methods = route.stringList("methods", (value, entry) => {
      if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(value)) entry.fail("must be an HTTP method name, like GET or POST");
      return value.toUpperCase();
    });
    if (methods !== undefined && methods.length === 0) {
      route.fail(route.field("methods"), "must list at least one method (leave it out for every method)");
    }
    const access = route.oneOf("access", ROUTE_ACCESS, true);
    const needed = declaredNames(route, "permissions", permissions);
    const signedAgents = route.oneOf("signed_agents", SIGNED_AGENTS);
    if (access === "open" && (needed.length > 0 || signedAgents !== undefined)) {
      const key = needed.length > 0 ? "permissions" : "signed_agents";
      route.fail(route.field(key), `has no effect on an open route (nobody is verified there); use access: agents`);
    }
    if (access === "attested" && Object.keys(attestors).length === 0) {
      route.fail(route.field("access"), "no caller can pass: attested needs at least one attestor under attestors");
    }
    const line = item.line;
    const next: GateRoute = {
      path,
      methods: methods === undefined ? undefined : unique(methods),
      access,
      permissions: needed,
      signedAgents,
      line,
    };
    const shadow = routes.find((earlier) => shadows(earlier, next));
    if (shadow !== undefined) {
      route.fail(
        undefined,
        `is never used: the route on line ${shadow.line} (${shadow.path}) comes first and matches every request it would; routes are tried in file order, so put the more specific one first`,
      );
    }
    routes.push(next);
  }
  return routes;
}

/** Whether `earlier` takes every request `later` would: it matches each path `later` does, for each of its methods. */
function shadows(earlier: GateRoute, later: GateRoute): boolean {
  const path = later.path;
  // The paths `later` matches are its prefix, the prefix without its last slash, and all below.
  const samples = [path, path.endsWith("/") ? path.slice(0, -1) || "/" : `${path}/`, `${path.replace(/\/$/, "")}/x`];
  if (!samples.every((sample) => underPrefix(sample, earlier.path))) return false;
  if (earlier.methods === undefined) return true;
  return later.methods?.every((method) => earlier.methods?.includes(method)) === true;
}

function readMcp(root: Section, permissions: DiscoveryPermissions): GateMcpPath[] {
  const paths: GateMcpPath[] = [];
  for (const item of root.list("mcp") ?? []) {
    const entry = root.sectionOf(item, KEYS.mcp);
    const path = routePath(entry, entry.required("path", "the MCP endpoint's path, like /mcp"));
    const earlier = paths.find((other) => other.path === path);
    if (earlier !== undefined) entry.fail(entry.field("path"), `${path} is already listed on line ${earlier.line}`);
    paths.push({ path, scopes: declaredNames(entry, "scopes", permissions), line: item.line });
  }
  return paths;
}

function readMail(section: Section, env: NodeJS.ProcessEnv): GateConfig["mail"] {
  const field = section.field("smtp_url_env");
  if (field === undefined) {
    if (section.field("from") !== undefined) section.fail(section.field("from"), "needs mail.smtp_url_env beside it");
    return undefined;
  }
  const smtpUrl = envSecret(
    section,
    field,
    "holds the SMTP server's URL, smtp://user:password@host:587 or smtps://...:465",
    env,
  );
  if (!/^smtps?:\/\//.test(smtpUrl) || !URL.canParse(smtpUrl)) {
    // Not quoted back: the URL carries the password.
    section.fail(field, `the environment variable ${section.stringOf(field)} must hold an smtp:// or smtps:// URL`);
  }
  const from = section.stringOf(
    section.required("from", 'the From of the mails, like "Notes <no-reply@notes.example.com>"'),
  );
  if (from.trim() === "" || from.length > 200 || hasControl(from)) {
    section.fail(
      section.field("from"),
      "must be one line, 1 to 200 characters, like Notes <no-reply@notes.example.com>",
    );
  }
  return { smtpUrl, from: from.trim() };
}

/** The value of the environment variable named at `field`; `why` says what it holds. Never quoted back. */
function envSecret(section: Section, field: Field, why: string, env: NodeJS.ProcessEnv): string {
  const name = section.stringOf(field);
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) {
    section.fail(field, "must be the name of an environment variable (letters, digits, _), like PROTO_GATE_SECRET");
  }
  const value = env[name];
  if (value === undefined || value === "")
    section.fail(field, `the environment variable ${name} is not set (it ${why})`);
  return value;
}

function readIdentity(section: Section, env: NodeJS.ProcessEnv): string | undefined {
  const field = section.field("secret_env");
  if (field === undefined) return undefined;
  const why = `holds the secret the gate signs forwarded identity headers with, at least ${MIN_IDENTITY_SECRET_BYTES} bytes`;
  const value = envSecret(section, field, why, env);
  if (Buffer.byteLength(value, "utf8") < MIN_IDENTITY_SECRET_BYTES) {
    section.fail(
      field,
      `the environment variable ${section.stringOf(field)} is too short (it ${why}; openssl rand -base64 48 makes one)`,
    );
  }
  return value;
}

/** A route's or MCP path's prefix: one the request paths the gate sees are spelled with. */
function routePath(section: Section, field: Field): string {
  const path = section.stringOf(field);
  if (hasControl(path) || hasUnsafeUrlCharacter(path)) {
    section.fail(field, "must not contain control characters or a backslash, even percent-encoded");
  }
  if (!path.startsWith("/")) section.fail(field, `must start with / (/${path})`);
  if (path.length > MAX_PATH_LENGTH) section.fail(field, `must be at most ${MAX_PATH_LENGTH} characters`);
  if (path.includes("?") || path.includes("#")) {
    section.fail(field, "must be a path only, without a query (?) or fragment (#): routes match on the path");
  }
  if (path.includes("*")) section.fail(field, "is a prefix, not a pattern: /api/ matches every path under /api/");
  if (percentDecodedSpellings(path).some((spelling) => spelling.split("/").some((s) => s === ".." || s === "."))) {
    section.fail(field, "must not contain . or .. segments, even percent-encoded");
  }
  // Requests are matched by their parsed path; a prefix spelled otherwise (a space, é) would never match.
  const canonical = new URL(path, "http://gate.invalid").pathname;
  if (canonical !== path) section.fail(field, `must be written as requests spell it: ${canonical}`);
  return path;
}

/** A list of permission names, each declared under `permissions`. */
function declaredNames(section: Section, key: string, permissions: DiscoveryPermissions): string[] {
  const declared = Object.keys(permissions);
  const names =
    section.stringList(key, (name, item) => {
      if (!Object.hasOwn(permissions, name)) {
        item.fail(
          declared.length === 0
            ? `${name} is not declared: declare it under permissions (permissions: { ${name}: { description: ... } })`
            : `${name} is not declared under permissions (declared: ${declared.join(", ")})`,
        );
      }
      return name;
    }) ?? [];
  return unique(names);
}

// ---------------------------------------------------------------------------------------------
// Reading the YAML tree, with the line of every value

/**
 * One value of the file: its node, its key path (`routes[1].access`), the 1-based line of the value
 * and of its key (a nested map's value starts on the line after its key).
 */
interface Field {
  node: unknown;
  path: string;
  line: number;
  keyLine: number;
}

/** An item of a list, able to refuse itself. */
interface Item {
  field: Field;
  fail(problem: string): never;
}

class Source {
  readonly #lines = new LineCounter();
  readonly #root: unknown;

  constructor(
    text: string,
    readonly file: string | undefined,
  ) {
    // uniqueKeys off: duplicates are found while reading, where the key's name and both lines are known.
    const doc = parseDocument(text, { lineCounter: this.#lines, uniqueKeys: false, prettyErrors: false });
    const [problem] = [...doc.errors, ...doc.warnings];
    if (problem !== undefined) {
      const line = this.#lines.linePos(problem.pos[0]).line;
      const message = problem.message.replace(/\s+at line \d+.*$/s, "");
      throw new GateConfigError(`not valid YAML: ${message}`, { file, line });
    }
    this.#root = doc.contents;
  }

  root(): Section {
    const field: Field = { node: this.#root, path: "", line: 1, keyLine: 1 };
    if (isNull(this.#root)) return new Section(this, field, new Map());
    return this.sectionOf(field, KEYS.root);
  }

  lineOf(node: unknown, fallback: number): number {
    const range = (node as { range?: [number, number, number] } | null)?.range;
    return range === undefined ? fallback : this.#lines.linePos(range[0]).line;
  }

  fail(field: { path: string; line: number }, problem: string): never {
    throw new GateConfigError(problem, { file: this.file, line: field.line, key: field.path || undefined });
  }

  /** The map at `field`, every key checked against `allowed` and seen once. */
  sectionOf(field: Field, allowed: readonly string[] | undefined): Section {
    if (isNull(field.node)) return new Section(this, field, new Map());
    if (!isMap(field.node)) this.fail(field, `must be a map of keys${allowed ? ` (${allowed.join(", ")})` : ""}`);
    const entries = new Map<string, Field>();
    for (const pair of field.node.items) {
      const keyLine = this.lineOf(pair.key, field.line);
      const at = (path: string) => ({ path, line: keyLine });
      if (!isScalar(pair.key) || typeof pair.key.value !== "string") {
        this.fail(at(field.path), 'every key must be a name (quote it if it looks like a number: "123")');
      }
      const key = pair.key.value;
      const path = field.path === "" ? key : `${field.path}.${key}`;
      if (allowed !== undefined && !allowed.includes(key)) this.fail(at(path), unknownKey(key, allowed));
      const earlier = entries.get(key);
      if (earlier !== undefined) this.fail(at(path), `duplicate key (first on line ${earlier.keyLine})`);
      if (isAlias(pair.value)) this.fail(at(path), ALIAS_REFUSAL);
      // An empty value has no place of its own: its key's line is the one to show.
      entries.set(key, {
        node: pair.value,
        path,
        line: isNull(pair.value) ? keyLine : this.lineOf(pair.value, keyLine),
        keyLine,
      });
    }
    return new Section(this, field, entries);
  }
}

const ALIAS_REFUSAL = "anchors and aliases (*name) are not supported here: write the value out";

class Section {
  constructor(
    readonly source: Source,
    readonly self: Field,
    readonly entries: Map<string, Field>,
  ) {}

  /** The value of `key`; undefined when absent or empty (`key:` with nothing after it). */
  field(key: string): Field | undefined {
    const field = this.entries.get(key);
    return field === undefined || isNull(field.node) ? undefined : field;
  }

  /**
   * Refuses: at `field` (or at this section when undefined). `onKey` points at the key's line for a
   * problem with a name, not a value. `key` overrides the path named.
   */
  fail(field: Field | undefined, problem: string, onKey = false, key?: string): never {
    const at = field ?? this.self;
    const line = onKey ? at.keyLine : at.line;
    this.source.fail({ path: key ?? at.path, line }, problem);
  }

  required(key: string, what: string): Field {
    const field = this.field(key);
    if (field === undefined) {
      const path = this.self.path === "" ? key : `${this.self.path}.${key}`;
      this.source.fail({ path, line: this.entries.get(key)?.keyLine ?? this.self.keyLine }, `is required: ${what}`);
    }
    return field;
  }

  section(key: string, allowed: readonly string[], required: boolean): Section {
    const field = this.field(key);
    if (field === undefined) {
      const path = this.self.path === "" ? key : `${this.self.path}.${key}`;
      const line = this.entries.get(key)?.keyLine ?? this.self.keyLine;
      if (required) this.source.fail({ path, line }, "is required");
      return new Section(this.source, { node: null, path, line, keyLine: line }, new Map());
    }
    return this.source.sectionOf(field, allowed);
  }

  sectionOf(field: Field, allowed: readonly string[]): Section {
    return this.source.sectionOf(field, allowed);
  }

  /** A map of free names (attestors, permissions) to their values, in file order. */
  named(key: string): [string, Field][] | undefined {
    const field = this.field(key);
    if (field === undefined) return undefined;
    return [...this.source.sectionOf(field, undefined).entries.entries()];
  }

  list(key: string): Field[] | undefined {
    const field = this.field(key);
    if (field === undefined) return undefined;
    if (!isSeq(field.node)) this.fail(field, `must be a list (${key}: [...], or one "- " line per entry)`);
    return field.node.items.map((node, index) => {
      if (isAlias(node)) this.fail(field, ALIAS_REFUSAL);
      const line = this.source.lineOf(node, field.line);
      return { node, path: `${field.path}[${index}]`, line, keyLine: line };
    });
  }

  stringOf(field: Field): string {
    if (!isScalar(field.node) || typeof field.node.value !== "string") {
      this.fail(field, `must be a string (got ${describe(field.node)})`);
    }
    return field.node.value;
  }

  string(key: string): string | undefined {
    const field = this.field(key);
    return field === undefined ? undefined : this.stringOf(field);
  }

  boolean(key: string): boolean | undefined {
    const field = this.field(key);
    if (field === undefined) return undefined;
    if (!isScalar(field.node) || typeof field.node.value !== "boolean") {
      this.fail(field, `must be true or false (got ${describe(field.node)})`);
    }
    return field.node.value;
  }

  integer(key: string, min: number, max: number): number | undefined {
    const field = this.field(key);
    if (field === undefined) return undefined;
    const value = isScalar(field.node) ? field.node.value : undefined;
    if (typeof value !== "number" || !Number.isInteger(value)) {
      this.fail(field, `must be a whole number, ${min} to ${max} (got ${describe(field.node)})`);
    }
    if (value < min || value > max) this.fail(field, `must be ${min} to ${max} (got ${value})`);
    return value;
  }

  oneOf<T extends string>(key: string, values: readonly T[], required: true): T;
  oneOf<T extends string>(key: string, values: readonly T[], required?: false): T | undefined;
  oneOf<T extends string>(key: string, values: readonly T[], required = false): T | undefined {
    const field = required ? this.required(key, `one of ${values.join(", ")}`) : this.field(key);
    if (field === undefined) return undefined;
    const value = isScalar(field.node) ? field.node.value : undefined;
    if (typeof value !== "string" || !(values as readonly string[]).includes(value)) {
      this.fail(field, `must be one of ${values.join(", ")} (got ${describe(field.node)})`);
    }
    return value as T;
  }

  /** A URL at `field`, parsed; `what` says what belongs there. */
  urlOf(field: Field, what: string): URL {
    const text = this.stringOf(field);
    if (hasControl(text) || /\s/.test(text)) this.fail(field, `must be ${what}, without spaces or control characters`);
    if (!URL.canParse(text)) this.fail(field, `must be ${what} (got ${JSON.stringify(text.slice(0, 80))})`);
    return new URL(text);
  }

  /** A list of strings, each passed through `check` (which may refuse it with `item.fail`). */
  stringList<T>(key: string, check: (value: string, item: Item) => T): T[] | undefined {
    const items = this.list(key);
    if (items === undefined) return undefined;
    return items.map((field) => {
      const item: Item = { field, fail: (problem) => this.fail(field, problem) };
      return check(this.stringOf(field), item);
    });
  }
}

function isNull(node: unknown): boolean {
  return node === null || node === undefined || (isScalar(node) && node.value === null);
}

function describe(node: unknown): string {
  if (isMap(node)) return "a map";
  if (isSeq(node)) return "a list";
  const value = isScalar(node) ? node.value : node;
  if (typeof value === "string") return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
  return String(value);
}

/** Names the unknown key, the likeliest intended one, and every key allowed there. */
function unknownKey(key: string, allowed: readonly string[]): string {
  const hint = HINTS[key];
  const allowedList = `allowed here: ${allowed.join(", ")}`;
  if (hint !== undefined && !allowed.includes(key)) return `unknown key: ${hint} (${allowedList})`;
  const suggestion = closest(key, allowed);
  return `unknown key${suggestion === undefined ? "" : ` (did you mean ${suggestion}?)`}; ${allowedList}`;
}

function closest(key: string, allowed: readonly string[]): string | undefined {
  // publicUrl and public-url mean public_url: compare without case and separators first.
  const loose = (value: string) => value.toLowerCase().replaceAll(/[_-]/g, "");
  const same = allowed.find((candidate) => loose(candidate) === loose(key));
  if (same !== undefined) return same;
  let best: string | undefined;
  let bestDistance = Math.max(2, Math.floor(key.length / 3)) + 1;
  for (const candidate of allowed) {
    const distance = editDistance(loose(key), loose(candidate));
    if (distance < bestDistance) {
      best = candidate;
      bestDistance = distance;
    }
  }
  return best;
}

function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, index) => index);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      current[j] = Math.min(
        (previous[j] as number) + 1,
        (current[j - 1] as number) + 1,
        (previous[j - 1] as number) + cost,
      );
    }
    previous = current;
  }
  return previous[b.length] as number;
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/;

function hasControl(value: string): boolean {
  return CONTROL.test(value);
}

function unique<T>(values: T[]): T[] {
  return [...new Set(values)];
}

function unescapePointer(token: string): string {
  return token.replaceAll("~1", "/").replaceAll("~0", "~");
}
