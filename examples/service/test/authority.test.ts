/**
 * Bounded authority at the notes service (docs/authority.md), black-box: OUR attestor and the
 * notes service over real HTTPS, agents made with the @proto/agent SDK. An agent without a grant
 * (as every agent of an upstream or older attestor is) reads and writes, as before permissions
 * existed; deleting needs `notes:delete` and pinning is paid under the person's spend limits, both
 * only once the person's grant says so. Grants are written at the attestor as an approval writes
 * them. On SQLite, and on PostgreSQL + Redis when TEST_POSTGRES_URL and TEST_REDIS_URL are set.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { type Agent, connectMcp, type ServiceClient } from "@proto/agent";
import { findProtoChallenge } from "@proto/protocol";
import { decodeJwt } from "jose";
import { reportSkippedVariants, STORE_VARIANTS } from "../../../packages/server/test/support/stores.js";
import { NOTES_PERMISSIONS } from "../src/app.js";
import { MCP_PATH } from "../src/mcp.js";
import { type NotesStack, startNotesStack } from "./support/notes-stack.js";

reportSkippedVariants();

const PIN_LIMIT = {
  permission: "purchase",
  currency: "EUR",
  perTransaction: 100,
  perPeriod: 120,
  period: "month" as const,
};

interface Answer {
  status: number;
  headers: Headers;
  // biome-ignore lint/suspicious/noExplicitAny: answers of many shapes, asserted field by field
  body: any;
}

for (const variant of STORE_VARIANTS) {
  describe(`bounded authority at the notes service (${variant.name})`, { timeout: 120_000 }, () => {
    let stack: NotesStack;

    before(async () => {
      stack = await startNotesStack(variant);
    });
    after(() => stack?.close());

    /** A linked agent, signed up at the notes service (its attestation carries no grant yet). */
    async function signedUp(label: string): Promise<{ agent: Agent; client: ServiceClient }> {
      const agent = await stack.linkAgent(label);
      const client = await agent.service(stack.publicUrl);
      const signup = await client.fetch(client.discovery.document.endpoints.accounts, { method: "POST" });
      assert.equal(signup.status, 201, await signup.clone().text());
      return { agent, client };
    }

    async function call(client: ServiceClient, method: string, path: string, body?: unknown): Promise<Answer> {
      const response = await client.fetch(path, {
        method,
        ...(body === undefined ? {} : { headers: { "content-type": "application/json" }, body: JSON.stringify(body) }),
      });
      const text = await response.text();
      return { status: response.status, headers: response.headers, body: text === "" ? undefined : JSON.parse(text) };
    }

    async function write(client: ServiceClient, text: string): Promise<string> {
      const written = await call(client, "POST", "/notes", { text });
      assert.equal(written.status, 201, JSON.stringify(written.body));
      return written.body.note.id;
    }

    /** The person's grant changed: the agent's next request carries a freshly minted attestation. */
    async function granted(agent: Agent, content: Parameters<NotesStack["grant"]>[1]): Promise<string> {
      const grant = await stack.grant(agent, content);
      const { jwt } = await agent.attestor().token(stack.notes.serviceDid, { fresh: true });
      assert.equal(decodeJwt(jwt).grant_id, grant.id, "the new attestation carries the grant");
      return grant.id;
    }

    function assertInsufficient(answer: Answer, missing: string[]): void {
      assert.equal(answer.status, 403, JSON.stringify(answer.body));
      assert.equal(answer.body.error.code, "insufficient_permission");
      assert.deepEqual(answer.body.error.details, {
        missing,
        audience: stack.notes.serviceDid,
        attestor: stack.trustUrl,
      });
      const challenge = findProtoChallenge(answer.headers.get("www-authenticate"));
      assert.equal(challenge?.error, "insufficient_permission");
      assert.deepEqual(challenge?.permissions, missing);
      assert.equal(challenge?.attestor, stack.trustUrl, "the challenge names whom to ask");
    }

    test("the discovery document declares what agents may do: reading and writing by default", async () => {
      const document = (await (await stack.fetch(`${stack.publicUrl}/.well-known/proto`)).json()) as {
        permissions?: unknown;
      };
      assert.deepEqual(document.permissions, {
        "notes:read": { description: "Read your notes", default: true },
        "notes:write": { description: "Add notes", default: true },
        "notes:delete": { description: "Delete your notes", phishing_resistant: true },
        purchase: { description: "Pay to pin notes", currency: "EUR" },
      });
      assert.deepEqual(document.permissions, NOTES_PERMISSIONS);
    });

    test("an agent whose attestation has no grant (as an upstream attestor's) reads and writes, as before", async () => {
      const { agent, client } = await signedUp("no grant");
      const { jwt } = await agent.attestor().token(stack.notes.serviceDid);
      const claims = decodeJwt(jwt);
      assert.equal(claims.grant_id, undefined);
      assert.equal(claims.scope, undefined);
      const id = await write(client, "Buy milk");
      const listed = await call(client, "GET", "/notes");
      assert.equal(listed.status, 200);
      assert.deepEqual(
        listed.body.notes.map((note: { id: string; text: string; pinned: boolean }) => [
          note.id,
          note.text,
          note.pinned,
        ]),
        [[id, "Buy milk", false]],
      );
    });

    test("deleting without notes:delete is 403 insufficient_permission naming it and the attestor; nothing is deleted", async () => {
      const { client } = await signedUp("no delete");
      const id = await write(client, "Keep me");
      assertInsufficient(await call(client, "DELETE", `/notes/${id}`), ["notes:delete"]);
      assertInsufficient(await call(client, "DELETE", "/notes"), ["notes:delete"]);
      const listed = await call(client, "GET", "/notes");
      assert.deepEqual(
        listed.body.notes.map((note: { text: string }) => note.text),
        ["Keep me"],
      );
    });

    test("with a grant holding notes:delete the agent deletes a note, then all of them", async () => {
      const { agent, client } = await signedUp("deleter");
      const [first] = [await write(client, "one"), await write(client, "two"), await write(client, "three")];
      await granted(agent, { permissions: ["notes:read", "notes:write", "notes:delete"] });

      const deleted = await call(client, "DELETE", `/notes/${first}`);
      assert.equal(deleted.status, 200, JSON.stringify(deleted.body));
      assert.deepEqual(deleted.body, { deleted: 1 });
      const again = await call(client, "DELETE", `/notes/${first}`);
      assert.equal(again.status, 404);
      assert.equal(again.body.error.code, "notes_not_found");
      assert.deepEqual(
        (await call(client, "GET", "/notes")).body.notes.map((note: { text: string }) => note.text),
        ["three", "two"],
      );

      const all = await call(client, "DELETE", "/notes");
      assert.equal(all.status, 200);
      assert.deepEqual(all.body, { deleted: 2 });
      assert.deepEqual((await call(client, "GET", "/notes")).body.notes, []);
    });

    test("another account's note is not found, and deleting all of them leaves other accounts' notes", async () => {
      const owner = await signedUp("owner of the note");
      const theirs = await write(owner.client, "mine, not yours");
      const other = await signedUp("another deleter");
      await granted(other.agent, { permissions: ["notes:read", "notes:write", "notes:delete"] });
      const refused = await call(other.client, "DELETE", `/notes/${theirs}`);
      assert.equal(refused.status, 404);
      assert.equal(refused.body.error.code, "notes_not_found");
      assert.deepEqual((await call(other.client, "DELETE", "/notes")).body, { deleted: 0 });
      assert.deepEqual(
        (await call(owner.client, "GET", "/notes")).body.notes.map((note: { text: string }) => note.text),
        ["mine, not yours"],
      );
    });

    test("a grant's permissions are exactly what the token holds: without notes:write, writing is refused", async () => {
      const { agent, client } = await signedUp("read only");
      await granted(agent, { permissions: ["notes:read", "notes:delete"] });
      assertInsufficient(await call(client, "POST", "/notes", { text: "not allowed" }), ["notes:write"]);
      assert.equal((await call(client, "GET", "/notes")).status, 200);
    });

    test("pinning without a grant is refused (no spending), and the note stays unpinned", async () => {
      const { client } = await signedUp("no purse");
      const id = await write(client, "pin me");
      assertInsufficient(await call(client, "POST", `/notes/${id}/pin`), ["purchase"]);
      const listed = await call(client, "GET", "/notes");
      assert.equal(listed.body.notes[0].pinned, false);
    });

    test("pinning at 0.50 EUR under limits of 1.00 per pin and 1.20 a month: two pins, the third refused with 0.20 left; re-pinning pays nothing", async () => {
      const { agent, client } = await signedUp("spender");
      const [a, b, c] = [await write(client, "a"), await write(client, "b"), await write(client, "c")];
      await granted(agent, {
        permissions: ["notes:read", "notes:write", "purchase"],
        spendLimits: [PIN_LIMIT],
      });

      const unknown = await call(client, "POST", "/notes/note_unknown/pin");
      assert.equal(unknown.status, 404, "nothing is paid for a note that does not exist");
      assert.equal(unknown.body.error.code, "notes_not_found");

      const first = await call(client, "POST", `/notes/${a}/pin`);
      assert.equal(first.status, 200, JSON.stringify(first.body));
      assert.equal(first.body.note.id, a);
      assert.equal(first.body.note.pinned, true);
      assert.deepEqual(first.body.payment, { reference: `pin:${a}`, amount: 50, currency: "EUR", replayed: false });
      const second = await call(client, "POST", `/notes/${b}/pin`);
      assert.equal(second.status, 200, JSON.stringify(second.body));
      assert.equal(second.body.payment.replayed, false);

      const third = await call(client, "POST", `/notes/${c}/pin`);
      assert.equal(third.status, 403, JSON.stringify(third.body));
      assert.equal(third.body.error.code, "spend_limit_exceeded");
      assert.deepEqual(third.body.error.details, {
        permission: "purchase",
        currency: "EUR",
        limit: "per_period",
        remaining: 20,
        period: "month",
        audience: stack.notes.serviceDid,
        attestor: stack.trustUrl,
      });

      // The same pin again: answered as it is, paid once; what is left this month is unchanged.
      const again = await call(client, "POST", `/notes/${a}/pin`);
      assert.equal(again.status, 200, JSON.stringify(again.body));
      assert.deepEqual(again.body.payment, { reference: `pin:${a}`, amount: 50, currency: "EUR", replayed: true });
      const still = await call(client, "POST", `/notes/${c}/pin`);
      assert.equal(still.status, 403);
      assert.equal(still.body.error.details.remaining, 20);

      // Pinned notes first, marked pinned.
      const listed = await call(client, "GET", "/notes");
      const seen = listed.body.notes.map((note: { id: string; pinned: boolean }) => [note.id, note.pinned]);
      assert.deepEqual(
        seen.slice(0, 2).sort(),
        [
          [a, true],
          [b, true],
        ].sort(),
      );
      assert.deepEqual(seen[2], [c, false]);
    });

    test("MCP: with the grant, the agent's access token carries it and delete_note deletes", async () => {
      const { agent, client } = await signedUp("mcp deleter");
      const id = await write(client, "delete me through MCP");
      await granted(agent, { permissions: ["notes:read", "notes:write", "notes:delete"] });
      // The token carries the scopes asked for within the grant: the agent asks for what it needs.
      const mcp = await connectMcp(agent, `${stack.publicUrl}${MCP_PATH}`, { scope: "notes:read notes:delete" });
      try {
        const result = await mcp.callTool({ name: "delete_note", arguments: { id } });
        assert.notEqual(result.isError, true, JSON.stringify(result));
        assert.deepEqual(JSON.parse((result.content as { text: string }[])[0]?.text ?? "null"), { deleted: 1 });
      } finally {
        await mcp.close();
      }
      assert.deepEqual((await call(client, "GET", "/notes")).body.notes, []);
    });
  });
}
