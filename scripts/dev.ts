/**
 * `npm run dev`: the directory, the attestor and the notes example service together, with local
 * TLS from a development CA kept under the data folder, then a banner with every URL and the
 * `proto` commands to try next. Ctrl-C (SIGINT) or SIGTERM drains and stops all three.
 *
 * Environment: PROTO_DEV_DATA_DIR (default ./data), PROTO_DEV_DIRECTORY_PORT (8080),
 * PROTO_DEV_TRUST_PORT (8081), PROTO_DEV_NOTES_PORT (3443), LOG_LEVEL (warn). Other variables of
 * the servers (packages/server/README.md) pass through, except those this stack decides itself
 * (public URLs, databases, TRUST_OIDC_CLIENTS, test hooks off, mail to the outboxes).
 *
 * Everything listens on this machine only: the outboxes' links sign people in, and the directory
 * may fetch loopback addresses here (PROTO_FETCH_ALLOW_PRIVATE=1, to reach the notes service).
 */
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { renderBanner } from "./dev/banner.js";
import { ensureDevCa } from "./dev/ca.js";
import { DevSettingsError, readDevSettings } from "./dev/settings.js";
import { listNotesService, PortInUseError, startDevStack } from "./dev/stack.js";

function fail(message: string, code: number): never {
  process.stderr.write(`npm run dev: ${message}\n`);
  process.exit(code);
}

const settings = (() => {
  try {
    return readDevSettings();
  } catch (error) {
    if (error instanceof DevSettingsError) fail(error.message, 2);
    throw error;
  }
})();

const ca = await ensureDevCa({ dir: join(settings.dataDir, "dev-ca") });
const stack = await startDevStack(settings, ca).catch((error: unknown) => {
  if (error instanceof PortInUseError) fail(error.message, 1);
  fail(`could not start: ${error instanceof Error ? error.message : String(error)}`, 1);
});

let stopping = false;
const stop = (signal: NodeJS.Signals) => {
  if (stopping) {
    // A second Ctrl-C while draining: the person wants out now.
    process.stderr.write("npm run dev: stopped without waiting\n");
    process.exit(130);
  }
  stopping = true;
  process.stderr.write(`\nnpm run dev: ${signal}, stopping the services\n`);
  stack.close().then(
    () => {
      process.stderr.write("npm run dev: stopped\n");
      process.exit(0);
    },
    (error: unknown) => fail(`stopping failed: ${error instanceof Error ? error.message : String(error)}`, 1),
  );
};
process.on("SIGINT", stop);
process.on("SIGTERM", stop);

// A listing that cannot be made (say, the directory's per-host challenge limit after many
// restarts) leaves the stack usable: the banner says why.
const listing = await listNotesService(stack, settings.dataDir).catch(
  (error: unknown) => `not listed (${error instanceof Error ? error.message : String(error)})`,
);

process.stdout.write(
  renderBanner({
    urls: stack.urls,
    // Where `node_modules/.bin/proto` is, wherever this was started from.
    root: fileURLToPath(new URL("..", import.meta.url)).replace(/\/$/, ""),
    dataDir: settings.dataDir,
    caCertPath: ca.caCertPath,
    ca: ca.ca,
    logLevel: settings.logLevel,
    listing: listing === "listed" || listing === "already listed" ? `${listing} (${stack.urls.notesDid})` : listing,
  }),
);
