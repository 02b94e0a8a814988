import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { Writable } from "node:stream";
import { after, before, describe, test } from "node:test";
import { unescapeHtml } from "@proto/testkit";
import { readTrustConfig } from "../src/trust/config.js";
import type { OutboxMailer } from "../src/trust/mail.js";
import { Browserless, field, type PageAnswer } from "./support/browser-session.js";
import type { HttpResult } from "./support/http.js";
import { reportSkippedVariants, STORE_VARIANTS } from "./support/stores.js";
import {
  type Agent,
  freePort,
  newAgent,
  RELAXED_RATE_LIMITS,
  startTrustHarness,
  TEST_KEY_ENCRYPTION_KEY,
  TEST_PSEUDONYM_KEY,
  type TrustHarness,
} from "./support/trust.js";

/**
 * The attestor's Web Bot Auth key directory: a person publishes an agent's key from `/account`
 * (off by default), and `GET /.well-known/http-message-signatures-directory` lists it as a JWK
 * whose `kid` is its RFC 7638 thumbprint, until they stop, the binding is revoked or lapses, or
 * they lose every verification method. Driven as a browser drives the pages (cookie jar, forms
 * with their CSRF token) and as a verifier reads the directory.
 */

reportSkippedVariants();

/** What the attestor logs, kept to read back. */
class Capture extends Writable {
  text = "";
  override _write(chunk: Buffer, _encoding: string, done: () => void): void {
    this.text += chunk.toString("utf8");
    done();
  }
}

const DIRECTORY = "/.well-known/http-message-signatures-directory";
const MEDIA_TYPE = "application/http-message-signatures-directory+json";

let counter = 0;
const address = (label: string) => `${label}-${++counter}-${Math.random().toString(36).slice(2, 8)}@mail.test`;

/** The text of some HTML as a person reads it (tags dropped, entities decoded, spaces folded). */
const textOf = (markup: string) =>
  unescapeHtml(markup.replace(/<[^>]*>/g, " "))
    .replace(/\s+/g, " ")
    .replace(/ ([.,;])/g, "$1")
    .trim();

/** The notice at the top of the account page, as read; "" when there is none. */
const noticeOf = (page: string) => textOf(/<p class="notice" role="status">([\s\S]*?)<\/p>/.exec(page)?.[1] ?? "");

/** The card of one agent on the account page, found by its DID. */
function cardOf(page: string, agentDid: string): string {
  const card = page
    .split('<section class="card"')
    .slice(1)
    .find((c) => c.includes(`title="${agentDid}"`));
  assert.ok(card, `a card for ${agentDid} on the page:\n${page}`);
  return card.slice(0, card.indexOf("</section>"));
}

/** The Web Bot Auth part of an agent's card: its text, and its form's action and button, if any. */
function wbaOf(page: string, agentDid: string): { text: string; action: string | undefined; button: string } {
  const card = cardOf(page, agentDid);
  const part = card.slice(card.indexOf("<h3>Web Bot Auth</h3>"));
  const form = /<form method="post" action="([^"]*\/wba\/[^"]*)">([\s\S]*?)<\/form>/.exec(part);
  return {
    text: textOf(part.slice(0, part.indexOf("<form") === -1 ? undefined : part.indexOf("<form"))),
    action: form?.[1] === undefined ? undefined : unescapeHtml(form[1]),
    button: textOf(/<button[^>]*>([\s\S]*?)<\/button>/.exec(form?.[2] ?? "")?.[1] ?? ""),
  };
}

/**
 * The key a verifier expects for an agent, computed here from its raw public key and nothing of
 * the attestor's: the RFC 7638 thumbprint is SHA-256 over the required members, sorted, no spaces.
 */
function expectedKey(agent: Agent) {
  const x = agent.publicKeyB64;
  const kid = createHash("sha256").update(`{"crv":"Ed25519","kty":"OKP","x":"${x}"}`).digest("base64url");
  return { kty: "OKP", crv: "Ed25519", kid, x, use: "sig" };
}

for (const variant of STORE_VARIANTS) {
  describe(`Web Bot Auth key directory (${variant.name})`, { timeout: 120_000 }, () => {
    let h: TrustHarness;
    let trustUrl: string;
    let outbox: OutboxMailer;

    before(async () => {
      const port = await freePort();
      trustUrl = `http://127.0.0.1:${port}`;
      h = await startTrustHarness(variant, {
        port,
        env: { TRUST_PUBLIC_URL: trustUrl, TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS },
      });
      outbox = h.app.mailer as OutboxMailer;
    });
    after(() => h.close());

    /** A browser signed in as `email` through the e-mail sign-in pages. */
    async function signedIn(email: string): Promise<Browserless> {
      // Ten sign-in mails a minute per client address: each person in a window of their own.
      await h.alignTo(60);
      const b = new Browserless(trustUrl);
      const page = await b.get("/signin");
      const sent = await b.post("/signin/email", { _csrf: field(page.text, "_csrf"), next: "/account", email });
      assert.equal(sent.status, 200, sent.text);
      // The outbox keeps the newest mail first.
      const mail = outbox.entries.find((m) => m.to === email);
      const link = /https?:\/\/\S+\/signin\/email\/verify\?token=\S+/.exec(mail?.text ?? "")?.[0];
      assert.ok(link, `a sign-in mail to ${email}`);
      const verify = await b.get(link);
      const done = await b.post("/signin/email/verify", {
        _csrf: field(verify.text, "_csrf"),
        token: field(verify.text, "token"),
      });
      assert.equal(done.status, 303, done.text);
      return b;
    }

    /** Presses the agent's Web Bot Auth button, follows the redirect, answers the page it lands on. */
    async function pressWba(b: Browserless, agent: Agent): Promise<string> {
      const page = (await b.get("/account")).text;
      const { action } = wbaOf(page, agent.did);
      assert.ok(action, `a publish or stop button for ${agent.did}`);
      const pressed = await b.post(action, { _csrf: field(page, "_csrf") });
      assert.equal(pressed.status, 303, pressed.text);
      assert.ok(pressed.location?.startsWith("/account?"), pressed.location);
      const landed = await b.get(pressed.location as string);
      assert.equal(landed.status, 200, landed.text);
      return landed.text;
    }

    async function directory(headers: Record<string, string> = {}): Promise<HttpResult> {
      return h.request("GET", DIRECTORY, { headers });
    }

    /** The kids the directory lists now, in its order. */
    async function listedKids(): Promise<string[]> {
      const read = await directory();
      assert.equal(read.status, 200, read.text);
      return (read.json.keys as { kid: string }[]).map((k) => k.kid);
    }

    test("off by default: a linked agent is not listed; the empty directory has its media type, cache headers and ETag", async () => {
      const email = address("default");
      const { agent } = await h.link(newAgent(), email);
      const read = await directory();
      assert.equal(read.status, 200, read.text);
      assert.equal(read.headers.get("content-type"), MEDIA_TYPE);
      assert.equal(read.headers.get("cache-control"), "public, max-age=300");
      assert.equal(read.headers.get("access-control-allow-origin"), "*");
      assert.equal(read.text, '{"keys":[]}');
      const etag = read.headers.get("etag");
      assert.match(etag ?? "", /^"[A-Za-z0-9_-]+"$/);

      // A conditional read of the same state: 304, no body, the same validators.
      for (const tag of [etag as string, `W/${etag}`, `"other", ${etag}`]) {
        const again = await directory({ "if-none-match": tag });
        assert.equal(again.status, 304, tag);
        assert.equal(again.text, "");
        assert.equal(again.headers.get("etag"), etag);
        assert.equal(again.headers.get("cache-control"), "public, max-age=300");
      }
      assert.equal((await directory({ "if-none-match": '"something-else"' })).status, 200);
      const head = await h.request("HEAD", DIRECTORY);
      assert.equal(head.status, 200);
      assert.equal(head.headers.get("content-type"), MEDIA_TYPE);

      // The account page offers it, says what it means, and says it is not published.
      const b = await signedIn(email);
      const wba = wbaOf((await b.get("/account")).text, agent.did);
      const host = new URL(trustUrl).host;
      assert.equal(
        wba.text,
        `Web Bot Auth Sites that check Web Bot Auth will see this agent as signed by ${host}; anyone can see that this key is linked at this attestor. Not published.`,
      );
      assert.equal(wba.button, "Publish this agent's key for Web Bot Auth (test agent)");
      assert.match(wba.action ?? "", /^\/account\/bindings\/bnd_[^/]+\/wba\/publish$/);
    });

    test("publish: the key is listed with its RFC 7638 thumbprint, newest first; stop: it is gone", async () => {
      const email = address("publisher");
      const { agent } = await h.link(newAgent(), email);
      const second = (await h.link(newAgent(), email)).agent;
      const stranger = (await h.link(newAgent(), address("stranger"))).agent;
      const b = await signedIn(email);
      const before = await directory();

      const beforePress = await h.nowMs();
      let page = await pressWba(b, agent);
      const afterPress = await h.nowMs();
      const url = `${trustUrl}${DIRECTORY}`;
      assert.equal(noticeOf(page), `Agent test agent's key is published at ${url}.`);
      const wba = wbaOf(page, agent.did);
      assert.match(
        wba.text,
        /Published since \d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC Directory: \S+ The agent names it in its requests: Signature-Agent: sig1="\S+"$/,
      );
      assert.ok(wba.text.includes(`Directory: ${url} `), wba.text);
      assert.ok(wba.text.endsWith(`Signature-Agent: sig1="${url}"`), wba.text);
      const since = /Published<\/span> since <time datetime="([^"]*)"/.exec(cardOf(page, agent.did))?.[1];
      assert.ok(Date.parse(since ?? "") >= beforePress - 60_000 && Date.parse(since ?? "") <= afterPress, since);
      assert.equal(wba.button, "Stop publishing the key of test agent");
      assert.equal(wbaOf(page, second.did).button, "Publish this agent's key for Web Bot Auth (test agent)");

      // The verifier's view: exactly the JWK it would compute, and a new entity tag.
      let read = await directory();
      assert.equal(read.headers.get("content-type"), MEDIA_TYPE);
      const listed = (read.json.keys as Record<string, unknown>[]).find((k) => k.x === agent.publicKeyB64);
      assert.deepEqual(listed, expectedKey(agent));
      assert.notEqual(read.headers.get("etag"), before.headers.get("etag"));
      assert.equal(
        (await directory({ "if-none-match": before.headers.get("etag") as string })).status,
        200,
        "the old tag no longer matches",
      );

      // A second agent published later comes first; other agents are not listed.
      await h.advance(60);
      page = await pressWba(b, second);
      let kids = await listedKids();
      assert.ok(kids.indexOf(expectedKey(second).kid) < kids.indexOf(expectedKey(agent).kid), kids.join(" "));
      assert.ok(kids.indexOf(expectedKey(second).kid) >= 0);
      assert.ok(!kids.includes(expectedKey(stranger).kid));

      // Pressing publish again (a stale form) keeps the first publication, and its place.
      const stale = await b.post(`${wbaOf(page, agent.did).action?.replace(/unpublish$/, "publish")}`, {
        _csrf: field(page, "_csrf"),
      });
      assert.equal(stale.status, 303, stale.text);
      assert.deepEqual(await listedKids(), kids);

      // Stop: gone from the directory, and the page says so.
      const published = (await b.get("/account")).text;
      const stopAt = wbaOf(published, agent.did).action;
      page = await pressWba(b, agent);
      assert.equal(
        noticeOf(page),
        "Agent test agent's key is no longer published. Sites that fetched the directory may keep it for up to 5 minutes.",
      );
      assert.equal(wbaOf(page, agent.did).button, "Publish this agent's key for Web Bot Auth (test agent)");
      kids = await listedKids();
      assert.ok(!kids.includes(expectedKey(agent).kid));
      assert.ok(kids.includes(expectedKey(second).kid));
      read = await directory();
      assert.ok(!read.text.includes(agent.publicKeyB64));
      // Reloading the "published" notice after stopping says nothing that is no longer true.
      assert.ok(stopAt?.endsWith("/wba/unpublish"));
      const bindingId = /\/account\/bindings\/([^/]+)\//.exec(stopAt ?? "")?.[1] ?? "";
      assert.equal(noticeOf((await b.get(`/account?done=published&binding=${bindingId}`)).text), "");
    });

    test("revoked, lapsed or unverified: not listed; a re-link by the same person keeps it published, a new link after a revocation does not", async () => {
      const email = address("lifecycle");
      const agent = newAgent();
      const { bindingId } = await h.link(agent, email);
      const b = await signedIn(email);
      await pressWba(b, agent);
      const kid = expectedKey(agent).kid;
      assert.ok((await listedKids()).includes(kid));

      // The same person links the same agent again: a new binding, still published.
      const relinked = await h.link(agent, email);
      assert.notEqual(relinked.bindingId, bindingId);
      assert.ok((await listedKids()).includes(kid));
      assert.match(wbaOf((await b.get("/account")).text, agent.did).text, /Published since/);

      // The person loses every verification method: no longer vouched for, so not listed.
      assert.equal((await h.hook("/__test/humans/clear-verifications", { email })).status, 200);
      assert.ok(!(await listedKids()).includes(kid));
      await signedIn(email); // signing in by e-mail verifies the address again
      assert.ok((await listedKids()).includes(kid));

      // The binding lapses: not listed, and the card says why.
      assert.equal((await h.hook("/__test/bindings/expire", { binding_id: relinked.bindingId })).status, 200);
      assert.ok(!(await listedKids()).includes(kid));
      assert.match(
        wbaOf((await b.get("/account")).text, agent.did).text,
        /Published since .* \(not listed while this agent's link has lapsed\)/,
      );

      // Linked again, then revoked: gone, and the next link starts unpublished.
      const third = await h.link(agent, email);
      assert.ok((await listedKids()).includes(kid));
      assert.equal((await h.hook("/__test/bindings/revoke", { binding_id: third.bindingId })).status, 200);
      assert.ok(!(await listedKids()).includes(kid));
      await h.link(agent, email);
      assert.ok(!(await listedKids()).includes(kid));
      assert.equal(wbaOf((await b.get("/account")).text, agent.did).button.startsWith("Publish"), true);
    });

    test("revoking from /account takes the key out of the directory", async () => {
      const email = address("revoker");
      const agent = newAgent();
      const { bindingId } = await h.link(agent, email);
      const b = await signedIn(email);
      const page = await pressWba(b, agent);
      assert.ok((await listedKids()).includes(expectedKey(agent).kid));
      const revoked = await b.post(`/account/bindings/${bindingId}/revoke`, { _csrf: field(page, "_csrf") });
      assert.equal(revoked.status, 303, revoked.text);
      assert.ok(!(await listedKids()).includes(expectedKey(agent).kid));
    });

    test("refusals: another person's or a revoked binding 404; no CSRF token, another origin 403; signed out, a did:web agent, a lapsed link", async () => {
      const email = address("owner");
      const { agent, bindingId } = await h.link(newAgent(), email);
      const stranger = await h.link(newAgent(), address("stranger"));
      const b = await signedIn(email);
      const page = (await b.get("/account")).text;
      const csrf = field(page, "_csrf");
      const kid = expectedKey(agent).kid;

      const notMine = await b.post(`/account/bindings/${stranger.bindingId}/wba/publish`, { _csrf: csrf });
      assert.equal(notMine.status, 404, notMine.text);
      assert.match(notMine.headers.get("content-type") ?? "", /^text\/html/);
      assert.match(textOf(notMine.text), /Unknown agent/);
      assert.ok(!(await listedKids()).includes(expectedKey(stranger.agent).kid));

      const noToken = await b.post(`/account/bindings/${bindingId}/wba/publish`, {});
      assert.equal(noToken.status, 403, noToken.text);
      assert.match(textOf(noToken.text), /This form has expired/);

      // Another origin, as the suspension forms refuse it.
      const foreign: Record<string, string>[] = [
        { origin: "https://evil.example" },
        { origin: trustUrl.replace("127.0.0.1", "localhost") },
        { origin: `${trustUrl}/` },
        { origin: "null", "sec-fetch-site": "same-site" },
        { origin: "null", "sec-fetch-site": "cross-site" },
        { origin: trustUrl, "sec-fetch-site": "cross-site" },
        { "sec-fetch-site": "same-site" },
      ];
      for (const headers of foreign) {
        const cross = await b.send("POST", `/account/bindings/${bindingId}/wba/publish`, {
          form: { _csrf: csrf },
          headers,
        });
        assert.equal(cross.status, 403, `${JSON.stringify(headers)}: ${cross.text}`);
        assert.match(textOf(cross.text), /This form came from another site/);
      }
      assert.ok(!(await listedKids()).includes(kid), "nothing was published");

      // From its own pages it works, as a browser sends it under the no-referrer policy.
      const own = await b.send("POST", `/account/bindings/${bindingId}/wba/publish`, {
        form: { _csrf: csrf },
        headers: { origin: "null", "sec-fetch-site": "same-origin" },
      });
      assert.equal(own.status, 303, own.text);
      assert.ok((await listedKids()).includes(kid));
      // ...and stopping from another origin is refused just the same.
      const crossStop = await b.send("POST", `/account/bindings/${bindingId}/wba/unpublish`, {
        form: { _csrf: csrf },
        headers: { "sec-fetch-site": "cross-site" },
      });
      assert.equal(crossStop.status, 403, crossStop.text);
      assert.ok((await listedKids()).includes(kid));

      // Signed out: to sign-in, nothing changes.
      const anonymous = new Browserless(trustUrl);
      const signin = await anonymous.get("/signin");
      const signedOut: PageAnswer = await anonymous.post(`/account/bindings/${bindingId}/wba/unpublish`, {
        _csrf: field(signin.text, "_csrf"),
      });
      assert.equal(signedOut.status, 303, signedOut.text);
      assert.equal(signedOut.location, "/signin?next=%2Faccount");
      assert.ok((await listedKids()).includes(kid));

      // A lapsed link cannot be published (the directory would not list it anyway).
      const lapsing = await h.link(newAgent(), email);
      assert.equal((await h.hook("/__test/bindings/expire", { binding_id: lapsing.bindingId })).status, 200);
      const lapsedCard = wbaOf((await b.get("/account")).text, lapsing.agent.did);
      assert.equal(lapsedCard.action, undefined);
      assert.match(lapsedCard.text, /This agent's link has lapsed: link it again to publish its key\./);
      const lapsed = await b.post(`/account/bindings/${lapsing.bindingId}/wba/publish`, { _csrf: csrf });
      assert.equal(lapsed.status, 410, lapsed.text);
      assert.match(textOf(lapsed.text), /This agent's link has lapsed/);

      // A did:web agent has no key the attestor could list.
      const webAgent = { ...newAgent(), did: "did:web:agent.example" };
      const started = await h.startLink(webAgent, { agent_label: "web agent" });
      assert.equal(started.status, 200, started.text);
      const confirmed = await h.hook("/__test/link/confirm", { req_id: started.json.req_id, email });
      assert.equal(confirmed.status, 200, confirmed.text);
      const webCard = wbaOf((await b.get("/account")).text, webAgent.did);
      assert.equal(webCard.action, undefined);
      assert.match(webCard.text, /not a did:key, so the attestor has no key of it to publish/);
      const web = await b.post(`/account/bindings/${confirmed.json.binding_id}/wba/publish`, { _csrf: csrf });
      assert.equal(web.status, 400, web.text);
      assert.match(textOf(web.text), /This agent has no key to publish/);

      // A revoked binding: 404, and still not listed.
      assert.equal((await h.hook("/__test/bindings/revoke", { binding_id: bindingId })).status, 200);
      const revoked = await b.post(`/account/bindings/${bindingId}/wba/publish`, { _csrf: csrf });
      assert.equal(revoked.status, 404, revoked.text);
      assert.ok(!(await listedKids()).includes(kid));
    });

    test("the directory and the forms are in the OpenAPI document", async () => {
      const doc = (await h.request("GET", "/openapi.json")).json;
      const get = doc.paths[DIRECTORY]?.get;
      assert.ok(get, "the directory is documented");
      assert.deepEqual(get.tags, ["web-bot-auth"]);
      assert.equal(typeof get.summary, "string");
      assert.ok(get.responses["200"].content[MEDIA_TYPE], JSON.stringify(get.responses["200"]));
      assert.match(get.description, /not signed/);
      for (const action of ["publish", "unpublish"]) {
        const post = doc.paths[`/account/bindings/{id}/wba/${action}`]?.post;
        assert.ok(post, action);
        assert.equal(typeof post.summary, "string");
        assert.deepEqual(post.tags, ["pages"]);
      }
      assert.ok(doc.tags.some((t: { name: string }) => t.name === "web-bot-auth"));
    });
  });

  describe(`Web Bot Auth directory limit (${variant.name})`, { timeout: 60_000 }, () => {
    let h: TrustHarness;
    const logs = new Capture();
    before(async () => {
      h = await startTrustHarness(variant, {
        logStream: logs,
        env: { TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS, TRUST_WBA_DIRECTORY_MAX_KEYS: "2" },
      });
    });
    after(() => h.close());

    test("TRUST_WBA_DIRECTORY_MAX_KEYS: the most recently published keys, the oldest left out, with one warning", async () => {
      const kids = () => h.request("GET", DIRECTORY).then((r) => r.json.keys.map((k: { kid: string }) => k.kid));
      const warnings = () => logs.text.split("\n").filter((line) => line.includes("TRUST_WBA_DIRECTORY_MAX_KEYS"));
      const agents: Agent[] = [];
      for (let i = 0; i < 3; i++) {
        const { bindingId, agent } = await h.link(newAgent(), address("limit"));
        await h.advance(10);
        // Straight through the service: the pages' part is covered above.
        assert.equal((await h.app.service.setWbaPublished(bindingId, undefined, true)).binding_id, bindingId);
        agents.push(agent);
        if (i === 1) {
          assert.equal((await kids()).length, 2);
          assert.deepEqual(warnings(), [], "at the limit, nothing is left out");
        }
      }
      const [first, second, third] = agents.map((a) => expectedKey(a).kid);
      assert.deepEqual(await kids(), [third, second]);
      assert.deepEqual(await kids(), [third, second]);
      assert.equal(warnings().length, 1, "warned once, not on every read");

      // One withdrawn: the oldest is back.
      const thirdBinding = await h.app.service.database.db
        .selectFrom("trust_bindings")
        .select("id")
        .where("agent_did", "=", (agents[2] as Agent).did)
        .executeTakeFirstOrThrow();
      await h.app.service.setWbaPublished(thirdBinding.id, undefined, false);
      assert.deepEqual(await kids(), [second, first]);
    });

    test("the limit is a whole number from 1 to 10000", () => {
      // Secrets given, so reading the configuration writes no development secrets anywhere.
      const base = {
        TRUST_DATABASE_URL: "sqlite::memory:",
        TRUST_KEY_ENCRYPTION_KEY: TEST_KEY_ENCRYPTION_KEY.toString("base64url"),
        TRUST_PSEUDONYM_KEY: TEST_PSEUDONYM_KEY.toString("base64url"),
      };
      for (const value of ["0", "10001", "many"]) {
        assert.throws(
          () => readTrustConfig({ ...base, TRUST_WBA_DIRECTORY_MAX_KEYS: value }),
          (error: Error & { problems?: string[] }) =>
            (error.problems ?? [error.message]).some((p) =>
              p.includes("TRUST_WBA_DIRECTORY_MAX_KEYS must be a whole number from 1 to 10000"),
            ),
        );
      }
      assert.equal(readTrustConfig(base).settings.wbaDirectoryMaxKeys, 1000);
      assert.equal(
        readTrustConfig({ ...base, TRUST_WBA_DIRECTORY_MAX_KEYS: "10000" }).settings.wbaDirectoryMaxKeys,
        10000,
      );
    });
  });
}
