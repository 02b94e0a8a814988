import assert from "node:assert/strict";
import { after, before, describe as suite, test } from "node:test";
import { freePort } from "@proto/testkit";
import { type PermissionRoute, serviceProbes } from "../src/index.js";
import { ABSENT_HEADER } from "../src/service/signature.js";
import { describe, run } from "./support/run.js";
import { type Breakage, editJson, pathOf, type StandIn, startStandIn } from "./support/stand-in.js";
import { type Notes, startFreeService, startNotes } from "./support/targets.js";

const ids = serviceProbes.map((p) => p.id);
/** The probes that write, and the one account they share, need a linked agent and its attestor. */
const WRITES = ["service.invitation.unsupported-recipient", "service.invitation.replaced"];
const AUTHORITY = "service.authority.insufficient-permission";
/** The notes service's route that needs a permission no agent holds without its person's approval. */
const DELETE_ROUTE: PermissionRoute = { method: "DELETE", path: "/notes/x", permission: "notes:delete" };
const AUTHORITY_SKIPPED = `${AUTHORITY}: skipped: needs --permission-route "METHOD /path permission" (a route needing a permission the linked agent lacks), --agent-key FILE and --attestor URL`;

suite("service probes against the example notes service", () => {
  let notes: Notes;
  let agentPem: string;
  before(async () => {
    notes = await startNotes();
    agentPem = (await notes.attestor.linkAgent()).pem;
  });
  after(() => notes.close());

  test("every probe passes, with --write, a linked agent and the route that needs notes:delete", async () => {
    const { results } = await run(serviceProbes, notes.url, {
      write: true,
      agentKeyPem: agentPem,
      attestorUrl: notes.attestor.url,
      permissionRoute: DELETE_ROUTE,
    });
    assert.deepEqual(
      results.map((r) => `${r.id}: ${r.status}`),
      ids.map((id) => `${id}: pass`),
      describe(results),
    );
  });

  test("without --write the invitation probes are skipped with the reason, the rest pass", async () => {
    const { results } = await run(serviceProbes, notes.url);
    assert.deepEqual(
      results.filter((r) => r.status !== "pass").map((r) => `${r.id}: ${r.status}: ${r.message}`),
      [...WRITES.map((id) => `${id}: skipped: creates state on the target: run with --write`), AUTHORITY_SKIPPED],
      describe(results),
    );
  });

  test("the permission probe says why it cannot run: a DELETE without --write, a default permission, a grant holding it", async () => {
    const linked = await notes.attestor.linkAgent();
    const probe = async (permissionRoute: PermissionRoute, write: boolean) => {
      const r = await run(serviceProbes, notes.url, {
        write,
        agentKeyPem: linked.pem,
        attestorUrl: notes.attestor.url,
        permissionRoute,
      });
      const result = r.byId(AUTHORITY);
      return `${result.status}: ${result.message}`;
    };
    assert.equal(
      await probe(DELETE_ROUTE, false),
      "skipped: DELETE /notes/x changes state if the service lets it through: run with --write",
    );
    assert.equal(
      await probe({ method: "GET", path: "/notes", permission: "notes:read" }, false),
      "skipped: notes:read is a default permission: an agent without a grant holds it",
    );
    assert.equal(
      await probe({ method: "GET", path: "/notes", permission: "notes:export" }, false),
      "skipped: the discovery document declares no permission notes:export: give one the service declares",
    );
    const did = `did:web:${new URL(notes.url).host.replace(":", "%3A")}`;
    await notes.attestor.grant(linked.did, did, { permissions: ["notes:read", "notes:delete"] });
    assert.equal(
      await probe(DELETE_ROUTE, true),
      "skipped: the linked agent's grant holds notes:delete: the probe needs an agent without it",
    );
  });

  test("with --write but no linked agent, the invitation probes say what they need", async () => {
    const { results } = await run(serviceProbes, notes.url, { write: true });
    for (const id of WRITES) {
      const result = results.find((r) => r.id === id);
      assert.equal(result?.status, "skipped", describe(results));
      assert.match(result.message, /--agent-key FILE .* --attestor URL/);
    }
  });
});

suite("service probes against a free service on the kit (implicit signup)", () => {
  let service: { url: string; close(): Promise<void> };
  before(async () => {
    service = await startFreeService();
  });
  after(() => service.close());

  test("with --write every probe passes but the attested_only one, skipped with the reason", async () => {
    const { results } = await run(serviceProbes, service.url, { write: true });
    assert.deepEqual(
      results.filter((r) => r.status !== "pass").map((r) => `${r.id}: ${r.status}: ${r.message}`),
      [
        "service.signup.attestation-required: skipped: unclaimed_mode is free, not attested_only: a signup would create an account",
        AUTHORITY_SKIPPED,
      ],
      describe(results),
    );
  });

  test("without --write, the probes whose accepted request would sign the run's key up are skipped too", async () => {
    const { results } = await run(serviceProbes, service.url);
    assert.deepEqual(
      results.filter((r) => r.status !== "pass").map((r) => r.id),
      [
        "service.signature.accepted",
        "service.signature.replayed-nonce",
        "service.signup.attestation-required",
        ...WRITES,
        AUTHORITY,
      ],
      describe(results),
    );
    assert.match(
      results.find((r) => r.id === "service.signature.accepted")?.message ?? "",
      /unclaimed_mode is free: an accepted request may create an account, run with --write/,
    );
  });
});

/** A signature's parameters as the stand-in reads them from `Signature-Input`. */
function signatureInput(e: { headers: Record<string, string> }) {
  const input = e.headers["signature-input"] ?? "";
  const number = (name: string) => Number(new RegExp(`;${name}=(\\d+)`).exec(input)?.[1] ?? Number.NaN);
  return {
    input,
    keyid: /;keyid="([^"]+)"/.exec(input)?.[1],
    covers: (component: string) => input.includes(`"${component}"`),
    created: number("created"),
    expires: number("expires"),
  };
}

const ACCOUNTS = "/proto/v1/accounts";
const ME = `${ACCOUNTS}/me`;
const code = (a: { body: string }): unknown => {
  try {
    return (JSON.parse(a.body) as { error?: { code?: unknown } }).error?.code;
  } catch {
    return undefined;
  }
};
/** The answer of an accepted signature on the attested_only notes service. */
const asAccepted = (a: { status: number; headers: Record<string, string>; body: string }) =>
  editJson(a, (b) => {
    b.error = { code: "attestation_required", message: "signup needs a Proto-Attestation" };
  });
const errorCodeTo = (to: string) => (b: Record<string, unknown>) => {
  b.error = { ...(b.error as object), code: to };
};

/** Keys that POSTed a signup through the stand-in (the "creates nothing" breakage remembers them). */
const signedUp = new Set<string>();
/** Keys the stand-in has seen a request from. */
const seenKeys = new Set<string>();
/** First answers by signature value (the replay breakage answers a replay like the first). */
const firstAnswers = new Map<string, { status: number; headers: Record<string, string>; body: string }>();

/** `alsoFails`: probes that rightly fail with it (an invalid member makes the whole document invalid). */
const BREAKAGES: { id: string; how: string; breakage: Breakage; alsoFails?: string[] }[] = [
  {
    id: "service.discovery.document",
    how: "a document without ed25519 among its signature_algorithms",
    breakage: {
      response: (e, a) =>
        pathOf(e) === "/.well-known/proto"
          ? editJson(a, (b) => {
              b.signature_algorithms = ["ecdsa-p256-sha256"];
            })
          : undefined,
    },
  },
  {
    id: "service.discovery.billing",
    how: "attested_only without accepted_attestors",
    breakage: {
      response: (e, a) =>
        pathOf(e) === "/.well-known/proto"
          ? editJson(a, (b) => {
              delete (b.billing as Record<string, unknown>).accepted_attestors;
            })
          : undefined,
    },
  },
  {
    id: "service.discovery.permissions",
    how: "a declared permission whose description is two lines",
    alsoFails: ["service.discovery.document"],
    breakage: {
      response: (e, a) =>
        pathOf(e) === "/.well-known/proto"
          ? editJson(a, (b) => {
              b.permissions = { ...(b.permissions as object), "notes:share": { description: "Share\na note" } };
            })
          : undefined,
    },
  },
  {
    id: "service.signature.accepted",
    how: "a correct signature refused as invalid_signature",
    breakage: {
      // Only a key's first request: a GET after a signup (the signup probe's) is left alone.
      response(e, a) {
        const { keyid } = signatureInput(e);
        if (keyid === undefined) return undefined;
        const first = !seenKeys.has(keyid);
        seenKeys.add(keyid);
        return first && pathOf(e) === ME && code(a) === "attestation_required"
          ? editJson(a, errorCodeTo("invalid_signature"))
          : undefined;
      },
    },
  },
  {
    id: "service.signature.missing-digest",
    how: "a POST accepted although its signature does not cover content-digest",
    breakage: {
      response: (e, a) =>
        e.method === "POST" &&
        pathOf(e) === ACCOUNTS &&
        e.headers["signature-input"] &&
        !signatureInput(e).covers("content-digest")
          ? asAccepted(a)
          : undefined,
    },
  },
  {
    id: "service.signature.missing-target-uri",
    how: "a signature without @target-uri accepted",
    breakage: {
      response: (e, a) =>
        signatureInput(e).keyid !== undefined && !signatureInput(e).covers("@target-uri") ? asAccepted(a) : undefined,
    },
  },
  {
    id: "service.signature.extra-component",
    how: "a signature covering a header it does not carry accepted",
    breakage: { response: (e, a) => (signatureInput(e).covers(ABSENT_HEADER) ? asAccepted(a) : undefined) },
  },
  {
    id: "service.signature.extra-carried-component",
    how: "a signature also covering content-type or @authority, both in the request, accepted",
    breakage: {
      response: (e, a) =>
        signatureInput(e).covers("content-type") || signatureInput(e).covers("@authority") ? asAccepted(a) : undefined,
    },
  },
  {
    id: "service.signature.wrong-digest",
    how: "a Content-Digest that is not the body's accepted",
    breakage: {
      response: (e, a) => (e.method === "POST" && e.body.includes('"conformance"') ? asAccepted(a) : undefined),
    },
  },
  {
    id: "service.signature.validity-too-long",
    how: "a signature valid 301 s accepted",
    breakage: {
      response: (e, a) => {
        const { created, expires } = signatureInput(e);
        return expires - created === 301 ? asAccepted(a) : undefined;
      },
    },
  },
  {
    id: "service.signature.expired",
    how: "an expired signature answered invalid_signature",
    breakage: {
      response: (_, a) => (code(a) === "expired_signature" ? editJson(a, errorCodeTo("invalid_signature")) : undefined),
    },
  },
  {
    id: "service.signature.future-created",
    how: "a signature created in the future accepted",
    breakage: {
      response: (e, a) => (signatureInput(e).created > Math.floor(Date.now() / 1000) + 120 ? asAccepted(a) : undefined),
    },
  },
  {
    id: "service.signature.wrong-target-uri",
    how: "a well-formed, current signature over another @target-uri accepted",
    breakage: {
      // What is left of the refused GETs once the other broken ones are told apart by their headers.
      response(e, a) {
        const s = signatureInput(e);
        const now = Math.floor(Date.now() / 1000);
        return pathOf(e) === ME &&
          code(a) === "invalid_signature" &&
          s.keyid !== undefined &&
          s.covers("@target-uri") &&
          !s.covers("@authority") &&
          s.expires - s.created === 60 &&
          s.created <= now + 60
          ? asAccepted(a)
          : undefined;
      },
    },
  },
  {
    id: "service.signature.replayed-nonce",
    how: "a replay answered like the first request",
    breakage: {
      response(e, a) {
        const signature = e.headers.signature;
        if (signature === undefined) return undefined;
        const first = firstAnswers.get(signature);
        if (first === undefined) firstAnswers.set(signature, a);
        return first;
      },
    },
  },
  {
    id: "service.signup.attestation-required",
    how: "a refused signup whose key then introspects as an account",
    breakage: {
      response(e) {
        const { keyid } = signatureInput(e);
        if (keyid === undefined) return undefined;
        if (e.method === "POST" && pathOf(e) === ACCOUNTS) signedUp.add(keyid);
        return e.method === "GET" && pathOf(e) === ME && signedUp.has(keyid)
          ? {
              status: 200,
              headers: { "content-type": "application/json" },
              body: JSON.stringify({ account_id: "acct_fake", agent_did: keyid, state: "UNCLAIMED" }),
            }
          : undefined;
      },
    },
  },
  {
    id: "service.challenge.header",
    how: "401s without WWW-Authenticate",
    breakage: {
      response: (_, a) => {
        if (a.status !== 401) return undefined;
        const { "www-authenticate": _dropped, ...headers } = a.headers;
        return { ...a, headers };
      },
    },
  },
  {
    id: "service.error.envelope",
    how: "errors without a message",
    breakage: {
      response: (_, a) =>
        a.status === 401
          ? editJson(a, (b) => {
              b.error = { code: (b.error as { code: unknown }).code };
            })
          : undefined,
    },
  },
  {
    id: "service.invitation.unsupported-recipient",
    how: "an unsupported recipient type answered malformed_request",
    breakage: {
      response: (_, a) =>
        code(a) === "unsupported_recipient_type" ? editJson(a, errorCodeTo("malformed_request")) : undefined,
    },
  },
  {
    id: "service.invitation.replaced",
    how: "a replaced invitation's claim link still answering 200",
    breakage: {
      response: (e, a) => (pathOf(e) === "/proto/claim" && a.status === 410 ? { ...a, status: 200 } : undefined),
    },
  },
  {
    id: AUTHORITY,
    how: "a route answering 200 to an agent without its permission",
    breakage: {
      response: (e, a) =>
        e.method === "DELETE" && code(a) === "insufficient_permission"
          ? { status: 200, headers: { "content-type": "application/json" }, body: '{"deleted":1}' }
          : undefined,
    },
  },
];

suite("each service probe fails against a stand-in that breaks its rule, and no other does", () => {
  let notes: Notes;
  let standIn: StandIn;
  let agentPem: string;
  before(async () => {
    // The service's public URL is the stand-in's: what agents sign for is what the service checks.
    const port = await freePort();
    standIn = await startStandIn(`http://127.0.0.1:${port}`);
    notes = await startNotes({ port, publicUrl: standIn.url });
    agentPem = (await notes.attestor.linkAgent()).pem;
  });
  after(async () => {
    await standIn.close();
    await notes.close();
  });
  const options = () => ({
    write: true,
    agentKeyPem: agentPem,
    attestorUrl: notes.attestor.url,
    permissionRoute: DELETE_ROUTE,
  });

  test("the table covers every service probe", () => {
    assert.deepEqual(BREAKAGES.map((b) => b.id).sort(), [...ids].sort());
  });

  test("through a faithful stand-in every probe passes", async () => {
    standIn.breakWith(undefined);
    const { results } = await run(serviceProbes, standIn.url, options());
    assert.equal(results.filter((r) => r.status !== "pass").length, 0, describe(results));
  });

  for (const { id, how, breakage, alsoFails = [] } of BREAKAGES) {
    test(`${id} fails on ${how}`, async () => {
      standIn.breakWith(breakage);
      const { results } = await run(serviceProbes, standIn.url, options());
      assert.deepEqual(
        results
          .filter((r) => r.status !== "pass")
          .map((r) => `${r.id}: ${r.status}`)
          .sort(),
        [id, ...alsoFails].map((failed) => `${failed}: fail`).sort(),
        describe(results),
      );
      const failed = results.find((r) => r.id === id);
      assert.ok(failed?.exchange, "the failure shows what was sent and what came back");
      assert.match(failed.exchange.url, /^http:\/\/127\.0\.0\.1:\d+\//);
      assert.ok(failed.exchange.status > 0);
    });
  }

  test("a refusal that names the permission only in its body is reported for its challenge", async () => {
    standIn.breakWith({
      response: (_, a) =>
        code(a) === "insufficient_permission"
          ? {
              ...a,
              headers: { ...a.headers, "www-authenticate": 'Proto discovery="x", error="insufficient_permission"' },
            }
          : undefined,
    });
    const r = await run(serviceProbes, standIn.url, options());
    const failed = r.byId(AUTHORITY);
    assert.equal(
      failed.message,
      "DELETE /notes/x by an agent without notes:delete: the challenge's permissions= must name notes:delete, got undefined",
    );
    // The attestation sent is a credential: the report shows its length only.
    assert.match(failed.exchange?.requestHeaders["proto-attestation"] ?? "", /^<\d+ characters>$/);
  });
});
