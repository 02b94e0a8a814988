/**
 * Issue 24: the MCP project's own conformance suite (`@modelcontextprotocol/conformance`, its
 * `authorization` mode) against our attestor: the metadata scenario, and the authorization code
 * grant with a resource, its authorization URL driven as the person's browser (sign-in by the
 * mailed link, consent) while the suite waits at its loopback callback. The suite needs Node 22
 * or later: on Node 20 this file says so and skips; CI runs it on its Node 24 and 26 lines.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Browserless } from "./support/browser-session.js";
import { answerConsent, signInByEmail } from "./support/people.js";
import { reportSkippedVariants, STORE_VARIANTS } from "./support/stores.js";
import { freePort, RELAXED_RATE_LIMITS, startTrustHarness, type TrustHarness } from "./support/trust.js";

reportSkippedVariants();

const major = Number(process.versions.node.split(".")[0]);
const SKIP =
  major < 22
    ? `@modelcontextprotocol/conformance needs Node 22 or later (this is ${process.version}); CI runs it on its Node 24 and 26 lines`
    : undefined;
if (SKIP !== undefined) process.stdout.write(`# MCP conformance skipped: ${SKIP}\n`);

const CONFORMANCE_CLI = join(
  dirname(createRequire(import.meta.url).resolve("@modelcontextprotocol/conformance/package.json")),
  "dist/index.js",
);
const RESOURCE = "https://notes.test/mcp";

interface Run {
  code: number | null;
  output: string;
}

/**
 * Runs the suite; `onAuthorizationUrl` gets the URL it asks a person to open once the suite's
 * callback server listens, and must see the browser through to its callback.
 */
function runConformance(args: string[], onAuthorizationUrl: (url: string) => Promise<void>): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CONFORMANCE_CLI, ...args], { stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    let driven = false;
    const seen = (chunk: Buffer) => {
      output += chunk.toString("utf8");
      const url = /^(http\S+\/oidc\/authorize\?\S+)$/m.exec(output)?.[1];
      // The suite prints the URL before its callback server listens; a browser as quick as
      // ours would find the port closed, so wait for the suite to say the server started.
      const listening = /^Callback server started: /m.test(output);
      if (url !== undefined && listening && !driven) {
        driven = true;
        onAuthorizationUrl(url).catch((error: unknown) => {
          child.kill("SIGKILL");
          reject(error);
        });
      }
    };
    child.stdout.on("data", seen);
    child.stderr.on("data", seen);
    child.once("error", reject);
    child.once("close", (code) => resolve({ code, output }));
  });
}

describe("@modelcontextprotocol/conformance (authorization mode) against the attestor", { skip: SKIP }, () => {
  for (const variant of STORE_VARIANTS) {
    describe(`(${variant.name})`, { timeout: 120_000 }, () => {
      let h: TrustHarness;
      let trustUrl: string;
      before(async () => {
        const port = await freePort();
        trustUrl = `http://127.0.0.1:${port}`;
        h = await startTrustHarness(variant, {
          port,
          env: { TRUST_PUBLIC_URL: trustUrl, TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS },
        });
      });
      after(() => h?.close());

      test("the metadata scenario passes", async () => {
        const run = await runConformance(
          ["authorization", "--url", trustUrl, "--scenario", "authorization-server-metadata-endpoint"],
          async () => {
            throw new Error("the metadata scenario asks for no browser");
          },
        );
        assert.equal(run.code, 0, run.output);
        assert.doesNotMatch(run.output, /FAILURE|WARNING/, run.output);
        // One scenario sums up as "Passed: 2/2, 0 failed, 0 warnings".
        assert.match(run.output, /Passed: ([1-9]\d*)\/\1, 0 failed, 0 warnings/, run.output);
      });

      test("every scenario passes: metadata, and the authorization code grant for a resource, driven as a person", async () => {
        const callbackPort = await freePort();
        const registered = await new Browserless(trustUrl).send("POST", "/oidc/register", {
          json: { client_name: "MCP conformance", redirect_uris: [`http://127.0.0.1:${callbackPort}/callback`] },
        });
        assert.equal(registered.status, 201, registered.text);
        const person = new Browserless(trustUrl);
        await signInByEmail(h, person, `conformance-${randomUUID()}@mail.test`);
        const run = await runConformance(
          [
            "authorization",
            "--url",
            trustUrl,
            "--client-id",
            registered.json.client_id,
            "--resource",
            RESOURCE,
            "--port",
            String(callbackPort),
          ],
          async (url) => {
            const consent = await person.get(url);
            const answer = await answerConsent(person, consent, "allow");
            assert.equal(answer.status, 302, answer.text);
            const callback = new URL(answer.location ?? "");
            assert.equal(callback.searchParams.get("iss"), trustUrl);
            // The suite's callback server takes the code, as the browser would deliver it.
            const delivered = await fetch(callback);
            assert.equal(delivered.status, 200);
            await delivered.text();
          },
        );
        assert.equal(run.code, 0, run.output);
        assert.match(run.output, /authorization-code-grant/, run.output);
        assert.doesNotMatch(run.output, /FAILURE|skipped/i, run.output);
        assert.match(run.output, /authorization-code-grant: [1-9]\d* passed, 0 failed/, run.output);
        assert.match(run.output, /Total: [1-9]\d* passed, 0 failed/, run.output);
      });
    });
  }
});
