/**
 * Issue 38, item 4: `kit.spend` (docs/authority.md, "Enforcement in the kit"). A Fastify service on
 * a real port whose pin route spends under the calling agent's grant, on SQLite and PostgreSQL:
 * `per_transaction` first, then `per_period` for the current calendar period (crossed by moving
 * the suite's clock), idempotent per reference, refused without a grant or a limit, bounded
 * inputs, the owner route's list by grant, and exactness under concurrent spends (two replicas on
 * one PostgreSQL database; one process on SQLite).
 */
import assert from "node:assert/strict";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";
import { type AuthorityGrant, type SpendLimit, spendPeriodEnd, spendPeriodKey } from "@proto/protocol";
import Fastify from "fastify";
import { agentRoute, createService } from "../src/fastify.js";
import { createKit, type Kit } from "../src/index.js";
import type { AdapterApp } from "./support/adapter-apps.js";
import type { Answer } from "./support/attestor.js";
import { authorityKitOptions, SERVICE_DID, signedCall } from "./support/authority.js";
import {
  createTestDatabase,
  ENGINES,
  newAgent,
  reportSkippedEngines,
  TestClock,
  type TestDatabase,
} from "./support/env.js";
import { ATTESTOR_NAME, ATTESTOR_URL, GrantAttestor } from "./support/grants.js";

reportSkippedEngines();

/**
 * The service: `POST /api/pins/:id` spends `{ amount, currency = EUR, reference = pin:<id> }` and
 * answers what `kit.spend` answers, or its refusal in the kit's envelope.
 */
async function pinService(kit: Kit): Promise<AdapterApp> {
  const app = Fastify({ logger: false });
  await app.register(createService(kit));
  app.setErrorHandler((error, _request, reply) => {
    const refusal = kit.errorResponse(error);
    return reply.code(refusal.status).headers(refusal.headers).send(refusal.body);
  });
  app.post("/api/pins/:id", agentRoute(kit), async (request) => {
    const { id } = request.params as { id: string };
    const body = request.body as Record<string, unknown>;
    return kit.spend(request.proto!, {
      amount: body.amount as number,
      currency: (body.currency as string | undefined) ?? "EUR",
      reference: (body.reference as string | undefined) ?? `pin:${id}`,
    });
  });
  await app.listen({ port: 0, host: "127.0.0.1" });
  const { port } = app.server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, close: () => app.close() };
}

/** Moves the clock to the middle of a month, so that no test meets a period's end unless it moves there. */
function toMidMonth(clock: TestClock): void {
  const now = new Date(clock.now());
  const target = Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 15, 12);
  clock.advance((target - clock.now()) / 1000);
}

for (const engine of ENGINES) {
  describe(`kit.spend (${engine})`, { timeout: 120_000 }, () => {
    const clock = new TestClock();
    let grants: GrantAttestor;
    let database: TestDatabase;
    let kit: Kit;
    let app: AdapterApp;
    const unexpected: unknown[] = [];
    let grantCount = 0;

    before(async () => {
      toMidMonth(clock);
      grants = await GrantAttestor.create(clock);
      database = await createTestDatabase(engine);
      kit = await createKit(
        authorityKitOptions(grants, clock, { database: database.url, onError: (error) => unexpected.push(error) }),
      );
      app = await pinService(kit);
    });

    after(async () => {
      await app?.close();
      await kit?.close();
      await database?.drop();
    });

    function purchaseGrant(limit: Omit<SpendLimit, "permission" | "currency"> | undefined): AuthorityGrant {
      return {
        id: `grt_spend_${engine}_${++grantCount}`,
        permissions: ["notes:read", "purchase"],
        spendLimits: limit === undefined ? [] : [{ permission: "purchase", currency: "EUR", ...limit }],
      };
    }

    /** An agent whose attestation carries `grant` (or none), and its spends through `base` (default the service). */
    async function spender(grant: AuthorityGrant | undefined) {
      const agent = newAgent();
      let attestation = await grants.attest(agent, SERVICE_DID, grant);
      return {
        agent,
        /** A new attestation of the same grant, on the clock's time now. */
        async reattest() {
          attestation = await grants.attest(agent, SERVICE_DID, grant);
        },
        pin(id: string, body: Record<string, unknown>, options: { base?: string; attested?: boolean } = {}) {
          return signedCall(options.base ?? app.url, agent, clock, "POST", `/api/pins/${id}`, {
            body,
            ...(options.attested === false ? {} : { attestation }),
          });
        },
      };
    }

    function expectRefusal(answer: Answer, status: number, code: string, details?: Record<string, unknown>): void {
      assert.equal(answer.status, status, answer.text);
      assert.equal(answer.json.error.code, code, answer.text);
      if (details !== undefined) assert.deepEqual(answer.json.error.details, details, answer.text);
    }

    const overLimit = (limit: "per_transaction" | "per_period", remaining: number, period = "month") => ({
      permission: "purchase",
      currency: "EUR",
      limit,
      remaining,
      period,
      audience: SERVICE_DID,
      attestor: ATTESTOR_URL,
    });

    test("per_transaction is checked first: over it, 403 spend_limit_exceeded with the remaining amount; within it, the spend", async () => {
      const grant = purchaseGrant({ perTransaction: 2000, perPeriod: 10_000, period: "month" });
      const { pin } = await spender(grant);
      expectRefusal(await pin("1", { amount: 2500 }), 403, "spend_limit_exceeded", overLimit("per_transaction", 2000));
      const spent = await pin("1", { amount: 1500 });
      assert.equal(spent.status, 200, spent.text);
      assert.deepEqual(spent.json, {
        reference: "pin:1",
        amount: 1500,
        currency: "EUR",
        permission: "purchase",
        grantId: grant.id,
        periodKey: spendPeriodKey("month", clock.now()),
        spentInPeriod: 1500,
        remainingInPeriod: 8500,
        replayed: false,
      });
    });

    test("per_period counts the month: over it, 403 with what is left; the last cent, then nothing", async () => {
      const { pin } = await spender(purchaseGrant({ perTransaction: 5000, perPeriod: 6000, period: "month" }));
      assert.equal((await pin("a", { amount: 4000 })).json.remainingInPeriod, 2000);
      expectRefusal(await pin("b", { amount: 3000 }), 403, "spend_limit_exceeded", overLimit("per_period", 2000));
      // Over the transaction limit with less left in the month: the month's remainder is what may be spent.
      expectRefusal(await pin("c", { amount: 5001 }), 403, "spend_limit_exceeded", overLimit("per_transaction", 2000));
      const last = await pin("d", { amount: 2000 });
      assert.equal(last.status, 200, last.text);
      assert.equal(last.json.spentInPeriod, 6000);
      assert.equal(last.json.remainingInPeriod, 0);
      expectRefusal(await pin("e", { amount: 1 }), 403, "spend_limit_exceeded", overLimit("per_period", 0));
    });

    test("a reference spends once: again, the first answer (replayed) and nothing counted; another amount, 409", async () => {
      const { pin } = await spender(purchaseGrant({ perPeriod: 1000, period: "day" }));
      const first = await pin("x", { amount: 700 });
      assert.equal(first.status, 200, first.text);
      const again = await pin("x", { amount: 700 });
      assert.equal(again.status, 200, again.text);
      assert.deepEqual(again.json, { ...first.json, replayed: true });
      // Counted once: 300 is still left today.
      expectRefusal(await pin("y", { amount: 301 }), 403, "spend_limit_exceeded", overLimit("per_period", 300, "day"));
      // Even over the limit now, the first spend's reference answers the first spend.
      assert.deepEqual((await pin("x", { amount: 700 })).json, { ...first.json, replayed: true });
      const reused = await pin("x", { amount: 800 });
      expectRefusal(reused, 409, "kit_spend_reference_reused");
      assert.match(reused.json.error.message, /700 EUR/);
    });

    test("the period ends with the calendar (the kit's clock): next month the limit is whole again", async () => {
      const grant = purchaseGrant({ perPeriod: 1000, period: "month" });
      const agent = await spender(grant);
      const before = await agent.pin("m1", { amount: 1000 });
      assert.equal(before.status, 200, before.text);
      const month = before.json.periodKey as string;
      expectRefusal(await agent.pin("m2", { amount: 1 }), 403, "spend_limit_exceeded", overLimit("per_period", 0));
      clock.advance((spendPeriodEnd("month", clock.now()) - clock.now()) / 1000 + 1);
      await agent.reattest();
      const after = await agent.pin("m2", { amount: 1000 });
      assert.equal(after.status, 200, after.text);
      assert.notEqual(after.json.periodKey, month);
      assert.equal(after.json.periodKey, spendPeriodKey("month", clock.now()));
      assert.equal(after.json.spentInPeriod, 1000);
      toMidMonth(clock);
    });

    test("no spending without authority: no grant, no spending permission, no limit, no attestation", async () => {
      const missing = { missing: ["purchase"], audience: SERVICE_DID, attestor: ATTESTOR_URL };
      expectRefusal(await (await spender(undefined)).pin("n", { amount: 1 }), 403, "insufficient_permission", missing);
      const readOnly = await spender({ id: `grt_ro_${engine}`, permissions: ["notes:read"], spendLimits: [] });
      expectRefusal(await readOnly.pin("n", { amount: 1 }), 403, "insufficient_permission", missing);
      const unlimited = await spender(purchaseGrant(undefined));
      expectRefusal(await unlimited.pin("n", { amount: 1 }), 403, "spend_limit_exceeded", {
        permission: "purchase",
        currency: "EUR",
        limit: "per_transaction",
        remaining: 0,
        audience: SERVICE_DID,
        attestor: ATTESTOR_URL,
      });
      // Signed up with a grant, then a request without the attestation: only the defaults are held.
      const later = await spender(purchaseGrant({ perTransaction: 100 }));
      assert.equal((await later.pin("n", { amount: 100 })).status, 200);
      expectRefusal(await later.pin("o", { amount: 100 }, { attested: false }), 403, "insufficient_permission", {
        missing: ["purchase"],
        audience: SERVICE_DID,
      });
    });

    test("bounded inputs: amount, reference and currency out of bounds are 400 malformed_request, never a 500", async () => {
      const { pin } = await spender(purchaseGrant({ perTransaction: 100 }));
      const bad: Record<string, unknown>[] = [
        { amount: 0 },
        { amount: -5 },
        { amount: 1.5 },
        { amount: "5" },
        { amount: 10 ** 13 },
        { amount: 1, reference: "" },
        { amount: 1, reference: "   " },
        { amount: 1, reference: "r".repeat(201) },
        { amount: 1, reference: "two\nlines" },
        { amount: 1, reference: "sep\u2028arated" },
        { amount: 1, currency: "eur" },
        { amount: 1, currency: "EURO" },
        // Well formed, but not the currency purchase declares.
        { amount: 1, currency: "USD" },
      ];
      for (const body of bad) {
        expectRefusal(await pin("bad", body), 400, "malformed_request");
      }
      const longest = await pin("ok", { amount: 1, reference: "r".repeat(200) });
      assert.equal(longest.status, 200, longest.text);
    });

    test("the owner route lists each agent's spends by grant: amount in its currency, reference, when", async () => {
      const grant = purchaseGrant({ perTransaction: 5000 });
      const { agent, pin } = await spender(grant);
      const spentWithin = async (id: string, amount: number) => {
        const from = clock.now();
        assert.equal((await pin(id, { amount })).status, 200);
        return [from, clock.now()] as const;
      };
      const first = await spentWithin("owner-1", 1500);
      clock.advance(60);
      const second = await spentWithin("owner-2", 5);
      const person = await kit.store.upsertPerson(ATTESTOR_NAME, grants.subject(SERVICE_DID), clock.now());
      const { token } = await kit.createOwnerSession({
        identities: [{ type: "oidc", value: { issuer: ATTESTOR_NAME, sub: person.subject } }],
        personId: person.id,
      });
      const listed = await fetch(`${app.url}/proto/owner/accounts`, { headers: { cookie: `proto_owner=${token}` } });
      assert.equal(listed.status, 200);
      const { accounts } = (await listed.json()) as {
        accounts: { agent_did: string; spending: { grant_id: string; spends: Record<string, unknown>[] }[] }[];
      };
      const account = accounts.find((entry) => entry.agent_did === agent.did);
      assert.ok(account, "the agent's account is listed");
      const spends = account.spending[0]?.spends ?? [];
      // When: the instant of each spend, on the kit's clock.
      for (const [index, [from, to]] of [second, first].entries()) {
        const when = Date.parse(String(spends[index]?.spent_at));
        assert.ok(when >= from && when <= to, `spent_at ${spends[index]?.spent_at}`);
      }
      assert.deepEqual(
        account.spending.map((entry) => ({
          grant_id: entry.grant_id,
          spends: entry.spends.map(({ spent_at: _when, ...rest }) => rest),
        })),
        [
          {
            grant_id: grant.id,
            spends: [
              { reference: "pin:owner-2", permission: "purchase", amount: 5, currency: "EUR", amount_text: "0.05 EUR" },
              {
                reference: "pin:owner-1",
                permission: "purchase",
                amount: 1500,
                currency: "EUR",
                amount_text: "15.00 EUR",
              },
            ],
          },
        ],
      );
    });

    test("one reference spent by 10 concurrent requests: one spend, nine replays, counted once", async () => {
      const { pin } = await spender(purchaseGrant({ perPeriod: 1000, period: "month" }));
      const answers = await Promise.all(Array.from({ length: 10 }, () => pin("same", { amount: 400 })));
      assert.deepEqual(
        answers.map((answer) => answer.status),
        Array(10).fill(200),
        answers.map((a) => a.text).join("\n"),
      );
      assert.equal(answers.filter((answer) => answer.json.replayed === false).length, 1);
      assert.ok(answers.every((answer) => answer.json.spentInPeriod === 400));
      assert.equal((await pin("other", { amount: 600 })).json.spentInPeriod, 1000);
    });

    /**
     * 20 spends of 25 cents race for the last euro of the month: exactly four go through and the
     * month's total is the limit. On PostgreSQL half go through another replica (a second kit on
     * the same database); on SQLite one process serves them all.
     */
    test("20 concurrent spends on the last euro: exactly the limit is spent, the rest refused", async () => {
      const replica =
        engine === "postgres"
          ? await createKit(authorityKitOptions(grants, clock, { database: database.url }))
          : undefined;
      const second = replica === undefined ? undefined : await pinService(replica);
      try {
        const grant = purchaseGrant({ perTransaction: 10_000, perPeriod: 10_000, period: "month" });
        const { pin } = await spender(grant);
        assert.equal((await pin("start", { amount: 9900 })).status, 200);
        const answers = await Promise.all(
          Array.from({ length: 20 }, (_, i) =>
            pin(`race-${i}`, { amount: 25 }, { base: second !== undefined && i % 2 === 1 ? second.url : app.url }),
          ),
        );
        const spent = answers.filter((answer) => answer.status === 200);
        const refused = answers.filter((answer) => answer.status !== 200);
        assert.equal(spent.length, 4, answers.map((a) => a.text).join("\n"));
        for (const answer of refused) {
          expectRefusal(answer, 403, "spend_limit_exceeded", overLimit("per_period", 0));
        }
        assert.deepEqual(
          spent.map((answer) => answer.json.spentInPeriod).sort((a, b) => a - b),
          [9925, 9950, 9975, 10_000],
        );
        const month = spendPeriodKey("month", clock.now());
        assert.equal(await kit.store.spentInPeriod(grant.id, "purchase", month), 10_000);
        // And the next request, whichever replica, is refused with nothing left.
        expectRefusal(await pin("after", { amount: 1 }), 403, "spend_limit_exceeded", overLimit("per_period", 0));
      } finally {
        await second?.close();
        await replica?.close();
      }
    });

    test("nothing unexpected reached onError", () => {
      assert.deepEqual(unexpected, []);
    });
  });
}
