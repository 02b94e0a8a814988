/** Entry point of the `proto` command (`bin/proto.js` imports the compiled form of this file). */

import { describeError, EXIT, errorLine, Interrupted } from "./cli/output.js";
import { run } from "./cli/program.js";

const controller = new AbortController();
process.once("SIGINT", () => controller.abort(new Interrupted()));

// A failure that escapes every handler still ends as one line, never a stack trace.
const fatal = (error: unknown) => {
  process.stderr.write(`${errorLine(describeError(error))}\n`);
  process.exit(EXIT.server);
};
process.on("uncaughtException", fatal);
process.on("unhandledRejection", fatal);

const code = await run({
  argv: process.argv.slice(2),
  env: process.env,
  signal: controller.signal,
  stdout: process.stdout,
  stderr: process.stderr,
  stdin: process.stdin,
});
// Let pending output drain, then leave without waiting for idle keep-alive sockets.
process.stdout.write("", () => process.stderr.write("", () => process.exit(code)));
