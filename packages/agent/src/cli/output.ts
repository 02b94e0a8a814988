/** How the CLI writes: one JSON document on stdout with `--json`, readable text otherwise; errors on one line. */
import { AgentError, type ErrorKind, ServerError } from "../errors.js";
import { oneLine } from "../http.js";
import { block, inline, jsonText } from "./terminal-text.js";

/** Exit codes (documented in the README). */
export const EXIT = {
  ok: 0,
  /** A server answered with an error (or with something that is not the protocol); unexpected failures. */
  server: 1,
  /** Bad arguments, missing configuration. */
  usage: 2,
  /** Unreachable host, TLS failure, timeout, oversized response. */
  network: 3,
  /** Not linked, binding revoked or expired, link request expired, signature or session refused. */
  auth: 4,
  /** Key file missing, unsafe permissions, unreadable agent home. */
  keystore: 5,
  /** The service's discovery document is invalid or not usable by a v0.1 agent. */
  incompatible: 6,
  /** `proto call --no-wait`: the person was asked for an approval and has not answered yet. */
  pending: 7,
  /** Interrupted (Ctrl-C). */
  interrupted: 130,
} as const;

const EXIT_BY_KIND: Record<ErrorKind, number> = {
  server: EXIT.server,
  usage: EXIT.usage,
  network: EXIT.network,
  auth: EXIT.auth,
  keystore: EXIT.keystore,
  incompatible: EXIT.incompatible,
};

/** Ctrl-C while a command runs. */
export class Interrupted extends Error {
  override name = "Interrupted";
  constructor() {
    super("interrupted");
  }
}

export function exitCodeOf(error: unknown): number {
  if (error instanceof Interrupted) return EXIT.interrupted;
  if (error instanceof AgentError) return EXIT_BY_KIND[error.kind];
  return EXIT.server;
}

/** `code` and one-line `message` of any error (unexpected ones become `internal_error`, without a stack). */
export function describeError(error: unknown): {
  code: string;
  message: string;
  status?: number;
  retry_after?: number;
} {
  if (error instanceof Interrupted) return { code: "interrupted", message: "interrupted" };
  if (error instanceof ServerError) {
    return {
      code: error.code,
      message: oneLine(forPeople(error) ?? error.message),
      status: error.status,
      ...(error.retryAfter === undefined ? {} : { retry_after: error.retryAfter }),
    };
  }
  if (error instanceof AgentError) return { code: error.code, message: oneLine(forPeople(error) ?? error.message) };
  const message = error instanceof Error ? error.message : String(error);
  return { code: "internal_error", message: oneLine(message) };
}

/**
 * The attestor's own words where they leave a person at a loss, said in the CLI's: a link request
 * that ends in 410 may just as well have been declined (the attestor does not tell the agent).
 * (The token endpoint's 401 is already worded by the SDK, naming `proto trust link`.) Other
 * messages stay the server's.
 */
function forPeople(error: AgentError): string | undefined {
  if (error.code === "link_request_expired") {
    return "the link was not confirmed: the person may have declined it, or the request expired before they confirmed it";
  }
  return undefined;
}

/**
 * The error's line on stderr: `proto: code: message`, or `proto: interrupted` for Ctrl-C (nothing
 * more to say). Code and message may be a server's: kept to one line, control characters visible.
 */
export function errorLine(described: { code: string; message: string }): string {
  return inline(
    described.code === described.message
      ? `proto: ${described.code}`
      : `proto: ${described.code}: ${described.message}`,
  );
}

/**
 * What a person can do about a final refusal, printed under it. Codes the agent cannot fix by
 * retrying: the key or the binding is gone for good.
 */
const NEXT_STEPS: Record<string, string> = {
  revoked_key:
    "this service revoked the agent's key: ask the account's owner to re-key it to a new key " +
    "(`proto keys rotate` makes one and prints its DID), then link that key with `proto trust link`",
  binding_revoked:
    "the person revoked this agent's link at the attestor: run `proto trust link` again to be linked anew",
  binding_expired: "the link to the person lapsed unused: run `proto trust link` again",
  link_request_expired: "run `proto trust link` to start a new link request, and ask the person to confirm it",
};

/** The server's `Retry-After` for a person: when trying again is worth it. */
export function retryLine(seconds: number): string {
  const wait = seconds < 90 ? `${seconds} s` : `${Math.ceil(seconds / 60)} min`;
  return `the server asks to wait: try again in ${wait}`;
}

/** The next step for a refusal code, if there is one to give. */
export function nextStepFor(code: string): string | undefined {
  return NEXT_STEPS[code];
}

export interface Streams {
  stdout: NodeJS.WriteStream;
  stderr: NodeJS.WriteStream;
}

export class Output {
  readonly json: boolean;
  readonly stdout: NodeJS.WriteStream;
  readonly stderr: NodeJS.WriteStream;

  constructor(json: boolean, streams: Streams = { stdout: process.stdout, stderr: process.stderr }) {
    this.json = json;
    this.stdout = streams.stdout;
    this.stderr = streams.stderr;
  }

  /** True when stdout is a terminal and the output is for a person. */
  get interactive(): boolean {
    return !this.json && this.stdout.isTTY === true;
  }

  /** The command's result: the JSON document, or the human text. */
  result(value: unknown, human: string | string[]): void {
    if (this.json) this.stdout.write(`${jsonText(value, 2)}\n`);
    else this.stdout.write(lines(human));
  }

  /** Progress: a JSON line on stderr with `--json`, a text line on stdout otherwise. */
  event(event: Record<string, unknown>, human?: string | string[]): void {
    if (this.json) this.stderr.write(`${jsonText(event)}\n`);
    else if (human !== undefined) this.stdout.write(lines(human));
  }

  /** Text for a person on stdout (between a result's parts); nothing with `--json`. */
  print(human: string | string[]): void {
    if (!this.json) this.stdout.write(lines(human));
  }

  /**
   * The CLI's own drawing (a QR code), written as it is: its colours are escape sequences. Never
   * text that came from a server. Nothing with `--json`.
   */
  drawing(text: string): void {
    if (!this.json) this.stdout.write(`${text}\n`);
  }

  /** A remark for a person, on stderr (never in the way of piped output); silent with `--json`. */
  note(text: string): void {
    if (!this.json) this.stderr.write(lines(text));
  }

  /** A warning a person must see even with `--json` (stderr never mixes into the JSON document). */
  warn(text: string): void {
    this.stderr.write(lines(text));
  }

  /** `proto: code: message` on stderr; with `--json` also `{"error": {...}}` as the stdout document. */
  error(error: unknown): void {
    const described = describeError(error);
    this.stderr.write(`${errorLine(described)}\n`);
    const next = nextStepFor(described.code);
    if (next !== undefined) this.stderr.write(`proto: ${next}\n`);
    if (described.retry_after !== undefined) this.stderr.write(`proto: ${retryLine(described.retry_after)}\n`);
    if (this.json) this.errorDocument(error);
  }

  /** Only the `{"error": {...}}` stdout document (when the stderr line was already written). */
  errorDocument(error: unknown): void {
    this.stdout.write(`${jsonText({ error: describeError(error) }, 2)}\n`);
  }
}

/**
 * Human output, line by line, through the terminal filter: whatever part of it a server wrote,
 * no escape sequence reaches the terminal. Fields that must stay on one line are `inline` already.
 */
function lines(human: string | string[]): string {
  return `${(Array.isArray(human) ? human : [human]).map(block).join("\n")}\n`;
}

/** Rows as aligned columns (two spaces apart, the last column not padded); each cell kept to one line. */
export function table(cells: string[][]): string[] {
  const rows = cells.map((row) => row.map(inline));
  const widths: number[] = [];
  for (const row of rows) {
    row.forEach((cell, i) => {
      widths[i] = Math.max(widths[i] ?? 0, cell.length);
    });
  }
  return rows.map((row) =>
    row
      .map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i] ?? 0)))
      .join("  ")
      .trimEnd(),
  );
}

/** A spinner on a terminal; nothing at all elsewhere. */
export class Spinner {
  static readonly FRAMES = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
  readonly #stream: NodeJS.WriteStream;
  #timer: NodeJS.Timeout | undefined;
  #text = "";
  #frame = 0;

  constructor(stream: NodeJS.WriteStream) {
    this.#stream = stream;
  }

  start(text: string): void {
    this.#text = text;
    if (this.#timer !== undefined) return;
    this.#timer = setInterval(() => this.#draw(), 80);
    this.#timer.unref();
    this.#draw();
  }

  update(text: string): void {
    this.#text = text;
  }

  stop(): void {
    if (this.#timer === undefined) return;
    clearInterval(this.#timer);
    this.#timer = undefined;
    this.#stream.write("\r\u001b[K");
  }

  #draw(): void {
    const frame = Spinner.FRAMES[this.#frame++ % Spinner.FRAMES.length];
    this.#stream.write(`\r\u001b[K${frame} ${this.#text}`);
  }
}
