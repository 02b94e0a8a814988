/**
 * Runs the notes service: `npm start` in this folder (or `npm start -w @proto/example-service`).
 *
 * Environment:
 *   NOTES_PUBLIC_URL     the public origin (default http(s)://localhost:PORT)
 *   NOTES_DATABASE_URL   sqlite:PATH or postgres://... (default sqlite:./data/notes.db)
 *   NOTES_SERVICE_DID    default did:web:<host of the public URL>
 *   NOTES_ATTESTOR_URL   our attestor (default http://localhost:8081, the one `npm start` runs)
 *   NOTES_ATTESTOR_NAME  the attestor in words on the claim page (default "proto trust")
 *   NOTES_PORT / PORT    default 3000; NOTES_HOST default localhost
 *   NOTES_TLS_CERT, NOTES_TLS_KEY   PEM files: serve HTTPS directly (agents reach services over HTTPS only)
 *   NOTES_PROOF_DIR      where `proto directory register --proof-dir` writes (default ./data/webroot)
 *   NOTES_SMTP_URL       smtp://user:pass@host:587 (or smtps://): invitation mails; without it
 *                        (development only) they wait at {public URL}/proto/owner/dev/outbox
 *   NOTES_MAIL_FROM      default "Notes <no-reply@<host of the public URL>>"
 *   NOTES_WEB_BOT_AUTH   on (default) or off: Web Bot Auth callers, their key directories fetched
 *                        over public addresses only (PROTO_FETCH_ALLOW_PRIVATE=1 and
 *                        PROTO_FETCH_RESOLVE=host:port:address for development, never in production)
 *   LOG_LEVEL            default info
 */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { parseResolveOverrides } from "@proto/protocol";
import { buildNotesService } from "./app.js";

function fail(message: string): never {
  console.error(`notes: ${message}`);
  process.exit(2);
}

const env = process.env;
const nonEmpty = (value: string | undefined) => (value === undefined || value.trim() === "" ? undefined : value.trim());

const port = Number(nonEmpty(env.NOTES_PORT) ?? nonEmpty(env.PORT) ?? "3000");
if (!Number.isInteger(port) || port < 0 || port > 65535) fail("NOTES_PORT must be a port number");
const host = nonEmpty(env.NOTES_HOST) ?? "localhost";

const certFile = nonEmpty(env.NOTES_TLS_CERT);
const keyFile = nonEmpty(env.NOTES_TLS_KEY);
if ((certFile === undefined) !== (keyFile === undefined)) fail("set both NOTES_TLS_CERT and NOTES_TLS_KEY, or neither");
const https =
  certFile !== undefined && keyFile !== undefined
    ? { cert: readFileSync(certFile), key: readFileSync(keyFile) }
    : undefined;

const publicUrl = nonEmpty(env.NOTES_PUBLIC_URL) ?? `${https ? "https" : "http"}://localhost:${port}`;
try {
  const url = new URL(publicUrl);
  if (url.protocol !== "https:" && url.protocol !== "http:") throw new Error();
} catch {
  fail(`NOTES_PUBLIC_URL must be an http(s) URL, got ${JSON.stringify(publicUrl)}`);
}

const proofDir = resolve(nonEmpty(env.NOTES_PROOF_DIR) ?? "./data/webroot");

// Invitation mails: SMTP, or the kit's development outbox (which it refuses in production).
const smtpUrl = nonEmpty(env.NOTES_SMTP_URL);
if (smtpUrl !== undefined && !/^smtps?:\/\//.test(smtpUrl)) fail("NOTES_SMTP_URL must start with smtp:// or smtps://");
if (smtpUrl === undefined && env.NODE_ENV === "production")
  fail("set NOTES_SMTP_URL: the development outbox is off in production");
const mailFrom = nonEmpty(env.NOTES_MAIL_FROM) ?? `Notes <no-reply@${new URL(publicUrl).hostname}>`;
const mail = smtpUrl === undefined ? { developmentOutbox: true } : { smtpUrl, from: mailFrom };
const serviceDid = nonEmpty(env.NOTES_SERVICE_DID);

// Web Bot Auth callers: their key directories are fetched like the directory server fetches
// (public addresses only; PROTO_FETCH_ALLOW_PRIVATE and PROTO_FETCH_RESOLVE for development).
const webBotAuthSetting = nonEmpty(env.NOTES_WEB_BOT_AUTH) ?? "on";
if (webBotAuthSetting !== "on" && webBotAuthSetting !== "off") fail("NOTES_WEB_BOT_AUTH must be on or off");
const phishingResistant = nonEmpty(env.NOTES_PHISHING_RESISTANT_SIGNIN) ?? "0";
if (phishingResistant !== "0" && phishingResistant !== "1") fail("NOTES_PHISHING_RESISTANT_SIGNIN must be 1 or 0");
const allowPrivate = env.PROTO_FETCH_ALLOW_PRIVATE === "1";
if (allowPrivate && env.NODE_ENV === "production")
  fail("PROTO_FETCH_ALLOW_PRIVATE must not be set when NODE_ENV=production");
let resolveOverrides: Map<string, string>;
try {
  resolveOverrides = parseResolveOverrides(nonEmpty(env.PROTO_FETCH_RESOLVE));
} catch (error) {
  fail(`PROTO_FETCH_RESOLVE: ${error instanceof Error ? error.message : String(error)}`);
}

const service = await buildNotesService({
  publicUrl,
  database: nonEmpty(env.NOTES_DATABASE_URL) ?? "sqlite:./data/notes.db",
  ...(serviceDid === undefined ? {} : { serviceDid }),
  attestorUrl: nonEmpty(env.NOTES_ATTESTOR_URL) ?? "http://localhost:8081",
  ...(nonEmpty(env.NOTES_ATTESTOR_NAME) === undefined ? {} : { attestorName: nonEmpty(env.NOTES_ATTESTOR_NAME) }),
  proofDir,
  mail,
  phishingResistantSignIn: phishingResistant === "1",
  ...(https === undefined ? {} : { https }),
  logger: { level: nonEmpty(env.LOG_LEVEL) ?? "info" },
  webBotAuth: webBotAuthSetting === "off" ? false : { fetch: { allowPrivate, resolve: resolveOverrides } },
}).catch((error: unknown) => fail(error instanceof Error ? error.message : String(error)));

await service.app.listen({ port, host });

const origin = new URL(publicUrl).origin;
process.stdout.write(`
notes service ${service.serviceDid}
  public URL        ${origin}  (listening on ${host}:${port}${https ? ", HTTPS" : ""})
  discovery         ${origin}/.well-known/proto
  owner page        ${origin}/owner
  invitation mail   ${smtpUrl === undefined ? `development outbox: ${origin}${service.kit.ownerPath}/dev/outbox` : `SMTP, from ${mailFrom}`}
  agent API         POST ${origin}/notes {"text"}, GET ${origin}/notes, GET ${origin}/whoami
                    DELETE ${origin}/notes[/ID] (notes:delete, approved with a passkey), POST ${origin}/notes/ID/pin (0.50 EUR)
  Web Bot Auth      ${webBotAuthSetting === "on" ? "signed agents accepted on /whoami (NOTES_WEB_BOT_AUTH=off to refuse)" : "off"}
  listing proof     ${proofDir}/.well-known/proto-registry-proof

Owner sign-in needs this client at the attestor (TRUST_OIDC_CLIENTS):
  ${JSON.stringify([service.oidcClient])}

`);

let closing = false;
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.once(signal, () => {
    if (closing) return;
    closing = true;
    service.close().then(
      () => process.exit(0),
      (error: unknown) => {
        console.error(error);
        process.exit(1);
      },
    );
  });
}
