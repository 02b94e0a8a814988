/**
 * Asking the person for more (docs/authority.md, "Approvals" and "The agent's side"): `proto call`
 * against a kit service that refuses with 403 `insufficient_permission` or `spend_limit_exceeded`
 * asks the real attestor for an approval, prints its link, waits, and once the person approves
 * (through the attestor's own approval functions) sends the call again with a fresh token;
 * `--no-wait`, a declined request, a spend limit asked for with the flags; and the SDK's wait for
 * a request the person never answers, on the attestor's moved clock.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Agent } from "../src/index.js";
import {
  approve,
  decline,
  type NotesService,
  PIN_PRICE,
  review,
  setGrant,
  startNotesService,
} from "./support/authority.js";
import { jsonOf, runCli, startCli, startTestEnv, type TestEnv, tempHome } from "./support/env.js";

const APPROVAL_URL = /^https:\/\/127\.0\.0\.1:\d+\/approvals\/apr_[A-Za-z0-9_-]+$/;

describe("proto call asks the person for what a service refused", { timeout: 180_000 }, () => {
  let env: TestEnv;
  let notes: NotesService;
  let agent: Agent;
  let home: string;
  const cli = (...args: string[]) => runCli(args, { home, caFile: env.caFile });
  const start = (...args: string[]) => startCli(args, { home, caFile: env.caFile });
  /** The `approval_requested` event a `--json` run writes on stderr. */
  const requested = async (running: ReturnType<typeof start>) =>
    JSON.parse(await running.line("stderr", (line) => line.includes('"approval_requested"'))) as {
      approval_id: string;
      approval_url: string;
      expires_at: string;
      interval: number;
    };

  before(async () => {
    env = await startTestEnv();
    notes = await startNotesService(env);
    home = tempHome();
    agent = Agent.init({ home, fetch: env.fetch, attestorUrl: env.trustUrl }).agent;
    const request = await agent.attestor().linkStart();
    await env.trustHook("/__test/link/confirm", { req_id: request.req_id, email: "ivan@example.com" });
    await agent.attestor().linkPoll(request.req_id);
    agent.store.updateConfig({ attestor_url: env.trustUrl });
  });
  after(async () => {
    await notes?.close();
    await env?.close();
  });

  test("insufficient_permission: the approval link, the person approves, the call goes through with a fresh token", async () => {
    // The agent already holds a token for the service, without the permission: it must not be reused.
    assert.equal((await cli("call", `${notes.origin}/notes`)).code, 0);
    const running = start("call", "-X", "DELETE", `${notes.origin}/notes/3?trace=x`, "--json");
    const asked = await requested(running);
    assert.match(asked.approval_url, APPROVAL_URL);
    assert.equal(asked.interval, 3);
    assert.ok(Date.parse(asked.expires_at) > Date.now());

    // What the person sees: the agent's words (the call, without its query) and the permission added.
    const page = await review(env.attestor, agent.did, asked.approval_id);
    assert.equal(page.approval.reason, `proto call DELETE ${notes.origin}/notes/3`);
    assert.deepEqual(page.approval.permissions, ["notes:write"]);
    assert.equal(page.approval.aud, notes.did);

    await running.line("stderr", (line) => line.includes('"waiting"'));
    await approve(env.attestor, agent.did, asked.approval_id);
    const result = await running.done;
    assert.equal(result.code, 0, result.stderr);
    const doc = jsonOf(result);
    assert.equal(doc.status, 200);
    assert.deepEqual(doc.body, { deleted: "3" });
    assert.equal(doc.approval.approval_id, asked.approval_id);
    assert.equal(doc.approval.status, "approved");
    const events = result.stderr
      .split("\n")
      .filter((line) => line.startsWith("{"))
      .map((line) => JSON.parse(line).event);
    assert.deepEqual(events, ["refused", "approval_requested", "waiting", "approved"]);

    // The grant holds from now on: the next call needs no approval.
    const again = await cli("call", "-X", "DELETE", `${notes.origin}/notes/4`);
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stdout, /^HTTP 200 OK\n\{"deleted":"4"\}/);
  });

  test("--no-wait: the link and its QR code, exit 7 and what to run next; once approved, the same call works", async () => {
    const result = await cli("call", `${notes.origin}/export`, "--no-wait", "--reason", "Back up your notes");
    assert.equal(result.code, 7, result.stderr);
    assert.match(result.stdout, /^HTTP 403 Forbidden: the person has not granted notes:export here$/m);
    assert.match(result.stdout, /^Asking the person for notes:export, in the agent's words: "Back up your notes"$/m);
    assert.match(result.stdout, /^Open this link to approve it \(it expires in 10 minutes\):$/m);
    const url = /^ {2}(https:\/\/\S+)$/m.exec(result.stdout)?.[1] ?? "";
    assert.match(url, APPROVAL_URL);
    // The QR code: block characters of the terminal renderer, under the link.
    assert.match(result.stdout, /[▀▄█]{10,}/);
    assert.match(result.stdout, /^This link points to this machine: a phone that scans the QR code cannot open it\.$/m);
    assert.equal(
      result.stderr,
      `proto: approval_pending: the person has not answered yet; once they approve at ${url}, run this \`proto call\` again\n`,
    );

    const id = url.slice(url.lastIndexOf("/") + 1);
    assert.equal((await review(env.attestor, agent.did, id)).approval.reason, "Back up your notes");
    // A phishing-resistant permission: the person approves with a passkey.
    await approve(env.attestor, agent.did, id, "passkey");
    const after = await cli("call", `${notes.origin}/export`);
    assert.equal(after.code, 0, after.stderr);
    assert.match(after.stdout, /^HTTP 200 OK\n\{"exported":true\}/);
  });

  test("declined: one line saying so, exit 4, nothing retried", async () => {
    // A spending permission without a limit allows no spending: the call says what to add first.
    const unasked = await cli("call", "-X", "POST", `${notes.origin}/notes/1/pin`);
    assert.equal(unasked.code, 4);
    assert.equal(
      unasked.stderr.split("\n")[1],
      "proto: purchase spends money: to ask the person for it, run the call again with --per-transaction AMOUNT and/or --per-period AMOUNT[/day|week|month] (in EUR)",
    );
    const running = start("call", "-X", "POST", `${notes.origin}/notes/1/pin`, "--per-transaction", "10", "--json");
    const asked = await requested(running);
    const page = await review(env.attestor, agent.did, asked.approval_id);
    // The spending permission was missing: it is asked for, with the limit of the flags.
    assert.deepEqual(page.approval.permissions, ["purchase"]);
    assert.deepEqual(page.approval.spendLimits, [{ permission: "purchase", currency: "EUR", perTransaction: 1000 }]);
    await decline(env.attestor, agent.did, asked.approval_id);
    const result = await running.done;
    assert.equal(result.code, 4, result.stderr);
    assert.match(
      result.stderr,
      new RegExp(
        `^proto: approval_declined: the person declined the request for purchase up to 10\\.00 EUR per transaction at ${notes.did.replace(/[.%]/g, "\\$&")}$`,
        "m",
      ),
    );
    assert.deepEqual(jsonOf(result).error.code, "approval_declined");
  });

  test("spend_limit_exceeded: without a limit to ask for, what to add; with --per-transaction, approved and spent", async () => {
    await setGrant(
      env.attestor,
      agent.did,
      { aud: notes.did, serviceUrl: notes.origin },
      {
        permissions: ["notes:read", "notes:write", "notes:export", "purchase"],
        spendLimits: [
          { permission: "purchase", currency: "EUR", perTransaction: 200, perPeriod: 5000, period: "month" },
        ],
      },
    );
    const refused = await cli("call", "-X", "POST", `${notes.origin}/notes/2/pin`);
    assert.equal(refused.code, 4);
    assert.match(refused.stdout, /^HTTP 403 Forbidden\n.*"spend_limit_exceeded"/);
    assert.equal(
      refused.stderr,
      [
        "proto: spend_limit_exceeded: The spend exceeds the limit the person set",
        "proto: to ask the person for a higher limit, run the call again with --per-transaction AMOUNT and/or --per-period AMOUNT[/day|week|month] (in EUR; 2.00 EUR remains)",
        "",
      ].join("\n"),
    );

    const running = start("call", "-X", "POST", `${notes.origin}/notes/2/pin`, "--per-transaction", "7.5", "--json");
    const asked = await requested(running);
    const page = await review(env.attestor, agent.did, asked.approval_id);
    // The limit in force, with the flag's part raised: the period limit stays.
    assert.deepEqual(page.approval.spendLimits, [
      { permission: "purchase", currency: "EUR", perTransaction: 750, perPeriod: 5000, period: "month" },
    ]);
    // Spend limits need a passkey to approve.
    await approve(env.attestor, agent.did, asked.approval_id, "passkey");
    const result = await running.done;
    assert.equal(result.code, 0, result.stderr);
    assert.deepEqual(jsonOf(result).body, { pinned: "2", spent: PIN_PRICE });
  });

  test("Ctrl-C while waiting: stops cleanly, says the request stays open; once approved, the call works", async () => {
    const running = start("call", "-X", "POST", `${notes.origin}/notes/5/share`, "--reason", "Share note 5 with Bob");
    const link = await running.line("stdout", (line) => /^ {2}https:\/\//.test(line));
    await running.line("stdout", (line) => line === "Waiting for the person to approve...");
    running.interrupt();
    const result = await running.done;
    assert.equal(result.code, 130);
    const url = link.trim();
    const id = url.slice(url.lastIndexOf("/") + 1);
    const { approval } = await review(env.attestor, agent.did, id);
    assert.equal(approval.status, "pending");
    assert.equal(
      result.stderr,
      [
        `Stopped waiting. The request stays open until ${new Date(approval.expiresAt).toISOString()}: once the person approves it, run the same command again.`,
        "proto: interrupted",
        "",
      ].join("\n"),
    );
    await approve(env.attestor, agent.did, id);
    const again = await cli("call", "-X", "POST", `${notes.origin}/notes/5/share`);
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stdout, /^HTTP 200 OK\n\{"shared":"5"\}/);
  });

  test("SDK: a request the person never answers ends expired; the wait stops there", async () => {
    const asked = await agent
      .attestor()
      .requestApproval({ aud: notes.did, permissions: ["notes:write"], reason: "Tidy up", serviceUrl: notes.origin });
    assert.equal(asked.status, "pending");
    // Past the request's ten minutes on the attestor's clock; the agent signs on the same time.
    await env.trustHook("/__test/clock", { advance_seconds: 601 });
    const later = Agent.load({ home, fetch: env.fetch, attestorUrl: env.trustUrl, now: () => Date.now() + 601_000 });
    const polls: string[] = [];
    const answered = await later.attestor().waitForApproval(asked.id, {
      onPoll: ({ approval }) => polls.push(approval.status),
    });
    assert.equal(answered.status, "expired");
    assert.deepEqual(polls, []);
  });
});
