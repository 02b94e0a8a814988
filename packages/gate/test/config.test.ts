import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { describe, it } from "node:test";
import { GateConfigError, loadConfigFile, parseConfig } from "../src/config.js";
import { initTemplate } from "../src/init-template.js";

const BASE = `service:
  did: did:web:notes.example.com
  public_url: https://notes.example.com
upstream:
  url: http://127.0.0.1:8000
attestors:
  proto-trust: { url: https://trust.example }
`;

const SECRET = "s".repeat(32);

/** The 1-based line of the first line of `text` containing `needle`, as an editor shows it. */
function lineOf(text: string, needle: string): number {
  const index = text.split("\n").findIndex((line) => line.includes(needle));
  assert.ok(index >= 0, `${needle} is not in the text`);
  return index + 1;
}

/** The GateConfigError parsing `text` gives (as file proto-gate.yaml unless told). */
function refusal(text: string, env: NodeJS.ProcessEnv = {}, options: { file?: string } = { file: "proto-gate.yaml" }) {
  const { file } = options;
  try {
    parseConfig(text, file, env);
  } catch (error) {
    assert.ok(error instanceof GateConfigError, `expected a GateConfigError, got ${String(error)}`);
    return error;
  }
  assert.fail("the configuration was accepted");
}

/** Removes the `# ` of the commented block starting at the line `start` (every following commented line). */
function uncomment(text: string, start: string): string {
  const lines = text.split("\n");
  let index = lines.indexOf(start);
  assert.ok(index >= 0, `${start} is not a line of the template`);
  while (index < lines.length && /^\s*# /.test(lines[index] as string)) {
    lines[index] = (lines[index] as string).replace("# ", "");
    index++;
  }
  return lines.join("\n");
}

describe("the init template", () => {
  it("parses as written", () => {
    const config = parseConfig(initTemplate(), "/srv/gate/proto-gate.yaml", {});
    assert.equal(config.service.did, "did:web:notes.example.com");
    assert.equal(config.routes.length, 2);
    assert.equal(config.store.database, "sqlite:/srv/gate/proto-gate.db");
  });

  it("parses after the user edits the DID, the public URL and the upstream", () => {
    const edited = initTemplate()
      .replace("did: did:web:notes.example.com", "did: did:web:api.acme.test")
      .replace("public_url: https://notes.example.com", "public_url: https://api.acme.test")
      .replace("url: http://127.0.0.1:8000", "url: http://10.1.2.3:5000/app/");
    const config = parseConfig(edited, undefined, {});
    assert.equal(config.service.did, "did:web:api.acme.test");
    assert.equal(config.service.publicUrl, "https://api.acme.test");
    assert.equal(config.upstream.url, "http://10.1.2.3:5000/app");
  });

  it("has commented examples that parse once uncommented", () => {
    let text = initTemplate();
    for (const block of [
      "# mcp:",
      "# mail:",
      "# identity:",
      "  # redis_url: redis://127.0.0.1:6379    # replay protection and rate counters shared by replicas",
      "    # display_name: Proto Trust    # shown on sign-in buttons (default: the URL's host)",
      "  # notes:write:",
    ]) {
      text = uncomment(text, block);
    }
    const config = parseConfig(text, undefined, {
      SMTP_URL: "smtp://mailer:pw@127.0.0.1:2525",
      PROTO_GATE_SECRET: SECRET,
    });
    assert.deepEqual(config.mcp, [{ path: "/mcp", scopes: ["notes:read"], line: lineOf(text, "- path: /mcp") }]);
    assert.deepEqual(config.mail, {
      smtpUrl: "smtp://mailer:pw@127.0.0.1:2525",
      from: "Notes <no-reply@notes.example.com>",
    });
    assert.equal(config.identitySecret, SECRET);
    assert.equal(config.store.redisUrl, "redis://127.0.0.1:6379");
    assert.equal(config.attestors["proto-trust"]?.displayName, "Proto Trust");
    assert.deepEqual(Object.keys(config.permissions), ["notes:read", "notes:write"]);
  });
});

describe("defaults", () => {
  it("fills every key the file leaves out", () => {
    const config = parseConfig(BASE, undefined, {});
    assert.deepEqual(config, {
      file: undefined,
      service: {
        did: "did:web:notes.example.com",
        name: undefined,
        publicUrl: "https://notes.example.com",
        allowHttp: false,
        unclaimedMode: "attested_only",
        recipientTypes: ["oidc"],
      },
      listen: { host: "127.0.0.1", port: 8080 },
      upstream: { url: "http://127.0.0.1:8000", timeoutSeconds: 30 },
      attestors: { "proto-trust": { url: "https://trust.example", displayName: undefined } },
      store: { database: `sqlite:${resolve("proto-gate.db")}`, redisUrl: undefined },
      trustedProxies: [],
      permissions: {},
      routes: [{ path: "/", methods: undefined, access: "agents", permissions: [], signedAgents: undefined, line: 0 }],
      mcp: [],
      mail: undefined,
      identitySecret: undefined,
      limits: { maxBodyBytes: 64 * 1024 * 1024 },
      mode: "proxy",
      logLevel: "info",
    });
  });

  it("offers email invitations by default once mail is configured", () => {
    const text = `${BASE}mail: { smtp_url_env: SMTP_URL, from: Notes <no-reply@notes.example.com> }\n`;
    const config = parseConfig(text, undefined, { SMTP_URL: "smtps://mail.example.com:465" });
    assert.deepEqual(config.service.recipientTypes, ["email", "oidc"]);
  });

  it("needs no attestor when unclaimed agents are free", () => {
    const text =
      "service: { did: did:web:a.example, public_url: https://a.example, unclaimed_mode: free }\nupstream: { url: http://127.0.0.1:1 }\n";
    assert.deepEqual(parseConfig(text, undefined, {}).attestors, {});
  });

  it("reads routes in file order, methods upper-cased", () => {
    const text = `${BASE}permissions:
  notes:write: { description: Write notes, phishing_resistant: true }
routes:
  - path: /api/
    methods: [get, Post]
    access: attested
    permissions: [notes:write]
    signed_agents: refuse
  - path: /
    access: optional
`;
    const config = parseConfig(text, undefined, {});
    assert.deepEqual(config.routes, [
      {
        path: "/api/",
        methods: ["GET", "POST"],
        access: "attested",
        permissions: ["notes:write"],
        signedAgents: "refuse",
        line: 11,
      },
      { path: "/", methods: undefined, access: "optional", permissions: [], signedAgents: undefined, line: 16 },
    ]);
    assert.deepEqual(config.permissions, { "notes:write": { description: "Write notes", phishing_resistant: true } });
  });
});

describe("the store's SQLite path", () => {
  it("is resolved against the config file's directory", () => {
    const text = `${BASE}store: { database: sqlite:./data/gate.db }\n`;
    assert.equal(parseConfig(text, "/srv/gate/proto-gate.yaml", {}).store.database, "sqlite:/srv/gate/data/gate.db");
    assert.equal(
      parseConfig(text, "conf/proto-gate.yaml", {}).store.database,
      `sqlite:${resolve("conf/data/gate.db")}`,
    );
  });

  it("keeps absolute paths, :memory: and postgres URLs as written", () => {
    for (const database of ["sqlite:/var/lib/gate.db", "sqlite::memory:", "postgres://gate@db.internal:5432/gate"]) {
      const text = `${BASE}store: { database: "${database}" }\n`;
      assert.equal(parseConfig(text, "/srv/gate/proto-gate.yaml", {}).store.database, database);
    }
  });

  it("is the file's directory when loaded from a file", () => {
    const dir = mkdtempSync(join(tmpdir(), "gate-config-"));
    try {
      const file = join(dir, "proto-gate.yaml");
      writeFileSync(file, BASE);
      const config = loadConfigFile(file, {});
      assert.equal(config.file, file);
      assert.equal(config.store.database, `sqlite:${join(dir, "proto-gate.db")}`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("refusals name the file, the line and the key", () => {
  it("a missing file", () => {
    const missing = join(tmpdir(), "no-such-dir-for-gate", "proto-gate.yaml");
    assert.throws(
      () => loadConfigFile(missing, {}),
      (error: unknown) =>
        error instanceof GateConfigError &&
        error.file === missing &&
        error.message.startsWith(`${missing}: no such file`) &&
        error.message.includes("proto-gate init"),
    );
  });

  it("an unknown key, with the likely one and the allowed ones", () => {
    const text = `${BASE}routes:\n  - path: /api/\n    acess: agents\n`;
    const error = refusal(text);
    assert.equal(error.line, lineOf(text, "acess"));
    assert.equal(error.key, "routes[0].acess");
    assert.equal(
      error.message,
      `proto-gate.yaml:${error.line}: routes[0].acess: unknown key (did you mean access?); allowed here: path, methods, access, permissions, signed_agents`,
    );
  });

  it("a camelCase key, pointed at its snake_case name", () => {
    const text = BASE.replace("public_url:", "publicUrl:");
    const error = refusal(text);
    assert.equal(error.key, "service.publicUrl");
    assert.equal(error.line, 3);
    assert.match(error.message, /did you mean public_url\?/);
  });

  it("an unknown top-level key", () => {
    const error = refusal(`${BASE}upstreams: {}\n`);
    assert.equal(error.key, "upstreams");
    assert.equal(error.line, 8);
    assert.match(error.message, /did you mean upstream\?/);
  });

  it("a secret written in the file", () => {
    const error = refusal(`${BASE}identity:\n  secret: hunter2hunter2hunter2hunter2hunter2\n`);
    assert.equal(error.key, "identity.secret");
    assert.equal(error.line, 9);
    assert.match(error.message, /never written in this file.*secret_env/);
    assert.doesNotMatch(error.message, /hunter2/);
  });

  it("a value outside its enumeration", () => {
    const text = `${BASE}routes:\n  - path: /\n    access: agents\n  - path: /x/\n    access: agent\n`;
    const error = refusal(text);
    assert.equal(error.line, 12);
    assert.equal(error.key, "routes[1].access");
    assert.equal(
      error.message,
      'proto-gate.yaml:12: routes[1].access: must be one of open, optional, agents, attested (got "agent")',
    );
  });

  it("other enumerations", () => {
    assert.equal(refusal(`${BASE}mode: gateway\n`).key, "mode");
    assert.equal(refusal(`${BASE}log_level: trace\n`).key, "log_level");
    const mode = refusal(BASE.replace("  public_url:", "  unclaimed_mode: anything\n  public_url:"));
    assert.equal(mode.key, "service.unclaimed_mode");
    assert.equal(mode.line, 3);
  });

  it("a route requiring an undeclared permission", () => {
    const text = `${BASE}permissions:
  notes:read: { description: Read notes }
routes:
  - path: /api/
    access: agents
    permissions:
      - notes:read
      - notes:write
`;
    const error = refusal(text);
    assert.equal(error.line, lineOf(text, "- notes:write"));
    assert.equal(error.key, "routes[0].permissions[1]");
    assert.match(error.message, /notes:write is not declared under permissions \(declared: notes:read\)/);
  });

  it("an MCP scope that is not a declared permission", () => {
    const error = refusal(`${BASE}mcp:\n  - path: /mcp\n    scopes: [notes:read]\n`);
    assert.equal(error.key, "mcp[0].scopes[0]");
    assert.equal(error.line, 10);
  });

  it("bad URLs", () => {
    const cases: [string, string, RegExp][] = [
      ["url: http://127.0.0.1:8000", "url: not a url", /upstream\.url: must be an http\(s\) URL/],
      ["url: http://127.0.0.1:8000", "url: ftp://files.example", /must be an http or https URL/],
      ["url: http://127.0.0.1:8000", "url: http://127.0.0.1:8000/app?x=1", /must not have a query/],
      ["url: http://127.0.0.1:8000", "url: http://me:pw@127.0.0.1:8000", /user name or password/],
      ["public_url: https://notes.example.com", "public_url: https://notes.example.com/app", /must be an origin/],
      ["{ url: https://trust.example }", "{ url: http://trust.example }", /attestors\.proto-trust\.url: must be https/],
    ];
    for (const [from, to, message] of cases) {
      const text = BASE.replace(from, to);
      const error = refusal(text);
      assert.match(error.message, message);
      assert.equal(error.line, lineOf(text, to));
    }
  });

  it("an http public URL off this machine, even with allow_http", () => {
    for (const allow of ["false", "true"]) {
      const text = BASE.replace("https://notes.example.com", "http://notes.example.com").replace(
        "upstream:",
        `  allow_http: ${allow}\nupstream:`,
      );
      const error = refusal(text);
      assert.equal(error.key, "service.public_url");
      assert.equal(error.line, 3);
      assert.match(error.message, /must be https: proto agents call services over https only/);
    }
  });

  it("an http public URL on this machine without allow_http, and with it", () => {
    const text = BASE.replace("https://notes.example.com", "http://localhost:8080").replace(
      "did:web:notes.example.com",
      "did:web:localhost%3A8080",
    );
    assert.match(refusal(text).message, /service\.allow_http: true/);
    const allowed = parseConfig(text.replace("upstream:", "  allow_http: true\nupstream:"), undefined, {});
    assert.equal(allowed.service.publicUrl, "http://localhost:8080");
  });

  it("a DID that does not name the public URL's host", () => {
    const text = BASE.replace("did:web:notes.example.com", "did:web:other.example.com");
    const error = refusal(text);
    assert.equal(error.key, "service.did");
    assert.equal(error.line, 2);
    assert.match(error.message, /the did:web of that host is did:web:notes\.example\.com/);
    assert.match(refusal(BASE.replace("did:web:notes.example.com", "notes.example.com")).message, /must be a did:web/);
  });

  it("a missing secret environment variable, and a short one, never quoted", () => {
    const text = `${BASE}identity:\n  secret_env: PROTO_GATE_SECRET\n`;
    const missing = refusal(text, {});
    assert.equal(missing.key, "identity.secret_env");
    assert.equal(missing.line, 9);
    assert.match(missing.message, /the environment variable PROTO_GATE_SECRET is not set/);
    const short = refusal(text, { PROTO_GATE_SECRET: "tooshort-secret" });
    assert.match(short.message, /PROTO_GATE_SECRET is too short/);
    assert.doesNotMatch(short.message, /tooshort-secret/);
    assert.equal(parseConfig(text, undefined, { PROTO_GATE_SECRET: SECRET }).identitySecret, SECRET);
  });

  it("email invitations without mail, and a missing SMTP variable", () => {
    const email = refusal(BASE.replace("upstream:", "  recipient_types: [email]\nupstream:"));
    assert.equal(email.key, "service.recipient_types");
    assert.match(email.message, /email needs mail/);
    const smtp = refusal(`${BASE}mail: { smtp_url_env: SMTP_URL, from: a@b.example }\n`, {});
    assert.equal(smtp.key, "mail.smtp_url_env");
    assert.match(smtp.message, /SMTP_URL is not set/);
  });

  it("a duplicate key", () => {
    const text = `${BASE}listen:\n  port: 8080\n  host: 0.0.0.0\n  port: 9090\n`;
    const error = refusal(text);
    assert.equal(error.key, "listen.port");
    assert.equal(error.line, 11);
    assert.match(error.message, /duplicate key \(first on line 9\)/);
  });

  it("a duplicate section", () => {
    const error = refusal(`${BASE}upstream:\n  url: http://127.0.0.1:9000\n`);
    assert.equal(error.key, "upstream");
    assert.equal(error.line, 8);
    assert.match(error.message, /duplicate key \(first on line 4\)/);
  });

  it("a YAML syntax error", () => {
    const text = `${BASE}routes:\n  - path: /api/\n    methods: [GET, POST\n  - path: /\n`;
    const error = refusal(text);
    assert.equal(error.key, undefined);
    assert.ok(error.line !== undefined && error.line >= 10 && error.line <= 11, `line ${error.line}`);
    assert.match(error.message, /^proto-gate\.yaml:1[01]: not valid YAML: /);
    const indent = refusal("service:\n  did: did:web:a.example\n public_url: https://a.example\n");
    assert.equal(indent.line, 3);
  });

  it("control characters in a path, written or percent-encoded", () => {
    for (const path of ['"/api\\0"', '"/a\\tb/"', "/api%00/", '"/x\\u0085"', "/a\\b"]) {
      const text = `${BASE}routes:\n  - path: ${path}\n    access: agents\n`;
      const error = refusal(text);
      assert.equal(error.key, "routes[0].path", path);
      assert.equal(error.line, 9, path);
      assert.match(error.message, /control characters or a backslash/, path);
    }
  });

  it("other bad paths", () => {
    const cases: [string, RegExp][] = [
      ["api/", /must start with \//],
      ["/api/?x=1", /without a query/],
      ["/api/../admin", /\. or \.\. segments/],
      ["/api/%2e%2e/admin", /\. or \.\. segments/],
      ["/api/*", /a prefix, not a pattern/],
      ['"/my notes/"', /as requests spell it: \/my%20notes\//],
    ];
    for (const [path, message] of cases) {
      const error = refusal(`${BASE}routes:\n  - path: ${path}\n    access: open\n`);
      assert.equal(error.key, "routes[0].path", path);
      assert.match(error.message, message, path);
    }
  });

  it("a route no request can reach", () => {
    const text = `${BASE}routes:\n  - path: /api\n    access: agents\n  - path: /api/admin/\n    methods: [DELETE]\n    access: attested\n`;
    const error = refusal(text);
    assert.equal(error.key, "routes[1]");
    assert.equal(error.line, 11);
    assert.match(error.message, /never used: the route on line 9 \(\/api\) comes first/);
    // Narrower methods first leave the later route reachable.
    const reachable = text.replace("- path: /api\n", "- path: /api\n    methods: [GET]\n");
    assert.equal(parseConfig(reachable, undefined, {}).routes.length, 2);
  });

  it("wrong types", () => {
    const port = refusal(`${BASE}listen: { port: "80a" }\n`);
    assert.equal(port.key, "listen.port");
    assert.match(port.message, /must be a whole number, 0 to 65535 \(got "80a"\)/);
    assert.match(refusal(`${BASE}listen: { port: 70000 }\n`).message, /must be 0 to 65535 \(got 70000\)/);
    const allow = refusal(BASE.replace("upstream:", "  allow_http: yes\nupstream:"));
    assert.match(allow.message, /service\.allow_http: must be true or false \(got "yes"\)/);
    assert.match(refusal(`${BASE}trusted_proxies: 127.0.0.1\n`).message, /trusted_proxies: must be a list/);
    assert.match(refusal(`${BASE}routes:\n  - /api/\n`).message, /routes\[0\]: must be a map of keys/);
    assert.match(refusal(`${BASE}limits: { max_body_bytes: 10 }\n`).message, /must be 1024 to 1073741824/);
  });

  it("missing required keys, at the section that lacks them", () => {
    const did = refusal(BASE.replace("  did: did:web:notes.example.com\n", ""));
    assert.equal(did.key, "service.did");
    assert.equal(did.line, 1);
    assert.match(did.message, /is required/);
    const upstream = refusal(BASE.replace("upstream:\n  url: http://127.0.0.1:8000\n", ""));
    assert.equal(upstream.key, "upstream");
    const empty = refusal("");
    assert.equal(empty.key, "service");
    assert.equal(empty.line, 1);
  });

  it("no attestor while unclaimed agents need attestations", () => {
    const error = refusal(BASE.replace("attestors:\n  proto-trust: { url: https://trust.example }\n", ""));
    assert.equal(error.key, "attestors");
    assert.match(error.message, /unclaimed_mode attested_only needs attestations/);
  });

  it("bad trusted proxies", () => {
    const text = `${BASE}trusted_proxies:\n  - 10.0.0.0/8\n  - 10.0.0.0/33\n  - 0.0.0.0/0\n  - proxy.internal\n`;
    const error = refusal(text);
    assert.equal(error.key, "trusted_proxies[1]");
    assert.equal(error.line, 10);
    assert.match(refusal(text.replace("  - 10.0.0.0/33\n", "")).message, /would trust every address/);
    assert.match(
      refusal(text.replace("  - 10.0.0.0/33\n  - 0.0.0.0/0\n", "")).message,
      /must be an IP address or a CIDR/,
    );
    const ok = text.replace("  - 10.0.0.0/33\n  - 0.0.0.0/0\n  - proxy.internal\n", "  - fd00::/8\n  - ::1\n");
    assert.deepEqual(parseConfig(ok, undefined, {}).trustedProxies, ["10.0.0.0/8", "fd00::/8", "::1"]);
  });

  it("permissions the discovery schema refuses, and unknown permission fields", () => {
    const name = refusal(`${BASE}permissions:\n  Notes: { description: Notes }\n`);
    assert.equal(name.key, "permissions.Notes");
    assert.equal(name.line, 9);
    assert.match(name.message, /is not a permission name/);
    const text = `${BASE}permissions:\n  notes:read: { description: Read }\n  purchase:\n    description: Buy\n    currency: eur\n`;
    const currency = refusal(text);
    assert.equal(currency.key, "permissions.purchase.currency");
    assert.equal(currency.line, lineOf(text, "currency: eur"));
    assert.match(currency.message, /ISO 4217/);
    const spending = refusal(`${BASE}permissions:\n  purchase: { description: Buy, spending: true }\n`);
    assert.equal(spending.key, "permissions.purchase.spending");
    assert.match(spending.message, /currency: EUR/);
  });

  it("anchors and aliases", () => {
    const text = `${BASE}routes:\n  - path: /a/\n    methods: &m [GET]\n    access: open\n  - path: /b/\n    methods: *m\n    access: open\n`;
    const error = refusal(text);
    assert.equal(error.line, lineOf(text, "*m"));
    assert.equal(error.key, "routes[1].methods");
    assert.match(error.message, /aliases/);
    const value = refusal(`${BASE}mode: &m proxy\nlog_level: *m\n`);
    assert.equal(value.key, "log_level");
    assert.equal(value.line, 9);
  });

  it("a message without a file names the line alone", () => {
    const error = refusal(`${BASE}mode: gateway\n`, {}, {});
    assert.equal(error.file, undefined);
    assert.equal(error.message, 'line 8: mode: must be one of proxy, auth (got "gateway")');
  });
});

describe("PROTO_GATE_LISTEN_PORT", () => {
  it("overrides listen.port", () => {
    const text = `${BASE}listen: { port: 9000 }\n`;
    assert.equal(parseConfig(text, undefined, {}).listen.port, 9000);
    assert.equal(parseConfig(text, undefined, { PROTO_GATE_LISTEN_PORT: "0" }).listen.port, 0);
    assert.equal(parseConfig(text, undefined, { PROTO_GATE_LISTEN_PORT: "18443" }).listen.port, 18443);
  });

  it("is refused when not a port, naming the variable", () => {
    const error = refusal(BASE, { PROTO_GATE_LISTEN_PORT: "80a" });
    assert.equal(error.key, "PROTO_GATE_LISTEN_PORT");
    assert.equal(error.line, undefined);
    assert.match(error.message, /PROTO_GATE_LISTEN_PORT: must be a port number, 0 to 65535 \(got "80a"\)/);
  });
});
