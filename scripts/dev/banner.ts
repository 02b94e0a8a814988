/**
 * What `npm run dev` prints once everything listens: every URL a person opens, the development CA,
 * and the six `proto` commands to try next, numbered, each one line that works when pasted into a
 * POSIX shell in the repository (the `dev-stack` test runs exactly these lines).
 */
import type { DevUrls } from "./stack.js";

export interface BannerInput {
  urls: DevUrls;
  /** The repository root, where `node_modules/.bin/proto` is. */
  root: string;
  dataDir: string;
  caCertPath: string;
  ca: "created" | "kept";
  logLevel: string;
  /** What became of the notes service's directory listing ("listed", or why not). */
  listing: string;
}

/** A word the shell passes through unchanged: bare when it is safe, else single-quoted. */
export function shellQuote(value: string): string {
  return /^[\w@%+=:,./-]+$/.test(value) ? value : `'${value.replaceAll("'", `'\\''`)}'`;
}

/** The first note an agent writes: valid JSON, quoted for the shell. */
export const FIRST_NOTE = JSON.stringify({ text: "Hello from my agent" });

/**
 * The agent command this clone installed, by its path: `npx proto` would do outside the
 * repository what it does here only by luck of the folder, ask the npm registry for `proto`, an
 * unrelated package of that name.
 */
export const PROTO_COMMAND = "node_modules/.bin/proto";

/** The six commands, in order (also what the test runs). */
export function nextCommands(input: Pick<BannerInput, "urls" | "caCertPath">): string[] {
  const { urls } = input;
  return [
    `${PROTO_COMMAND} init --attestor ${urls.trust} --directory ${urls.directory}`,
    `${PROTO_COMMAND} trust link`,
    // Only this one reaches the HTTPS service, so only it needs the development CA, named right here.
    `NODE_EXTRA_CA_CERTS=${shellQuote(input.caCertPath)} ${PROTO_COMMAND} call ${urls.notes}/notes -d ${shellQuote(FIRST_NOTE)}`,
    `${PROTO_COMMAND} directory list`,
    // The same notes as MCP tools: the agent gets an access token from the attestor by itself.
    `NODE_EXTRA_CA_CERTS=${shellQuote(input.caCertPath)} ${PROTO_COMMAND} mcp ${urls.notes}/mcp list_notes`,
    // Deleting needs a permission no agent holds by default: the call asks the person first.
    `NODE_EXTRA_CA_CERTS=${shellQuote(input.caCertPath)} ${PROTO_COMMAND} call -X DELETE ${urls.notes}/notes`,
  ];
}

export function renderBanner(input: BannerInput): string {
  const { urls } = input;
  const rows: [string, string, string][] = [
    ["Directory", `${urls.directory}/`, "browse the listings"],
    ["", `${urls.directory}/docs`, "API docs"],
    ["Attestor", `${urls.trust}/account`, "your account and linked agents"],
    ["", `${urls.trust}/docs`, "API docs"],
    ["", `${urls.trust}/dev/outbox`, "sign-in mail (development outbox)"],
    ["Notes", `${urls.notes}/`, urls.notesDid],
    ["", `${urls.notes}/owner`, "your agents' notes (sign in with the attestor)"],
    ["", urls.notesOutbox, "invitation mail (development outbox)"],
  ];
  const width = Math.max(...rows.map(([, url]) => url.length));
  const [init, link, call, list, mcp, remove] = nextCommands(input);
  const logs =
    input.logLevel === "warn"
      ? "warnings and errors only (LOG_LEVEL=info npm run dev for every request)"
      : `level ${input.logLevel}`;
  return [
    "",
    "proto development stack: directory, attestor and the notes example service. Ctrl-C stops them.",
    "",
    ...rows.map(([label, url, what]) => `  ${label.padEnd(11)}${url.padEnd(width)}  ${what}`),
    "",
    `  Development CA ${input.caCertPath} (${input.ca === "created" ? "new" : "kept from the last run"}; it certifies localhost only)`,
    `    for Node programs:  NODE_EXTRA_CA_CERTS=${shellQuote(input.caCertPath)}`,
    `    browsers warn on ${urls.notes} until you import that file as a certificate authority`,
    `  Data           ${input.dataDir} (test hooks off; mail stays in the outboxes)`,
    `  Listing        the notes service in the directory: ${input.listing}`,
    `  Logs           ${logs}`,
    "",
    `Next, in a second terminal in ${input.root}:`,
    `  1. ${init}`,
    `  2. ${link}`,
    `       open the link it prints, sign in by e-mail (the mail is at ${urls.trust}/dev/outbox), confirm`,
    `  3. ${call}`,
    `  4. ${list}`,
    `  5. ${mcp}`,
    `       the same notes through the service's MCP endpoint (without list_notes: every tool)`,
    `  6. ${remove}`,
    `       deleting needs your approval: it prints a link where you approve with a passkey, then deletes the notes`,
    "",
  ].join("\n");
}
