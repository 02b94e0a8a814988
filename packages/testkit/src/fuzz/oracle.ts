/**
 * What every answer must be: never a 5xx; on an API route every non-2xx answer is the error
 * envelope as JSON (on an OAuth route, the OAuth error JSON), whatever broke (framing, Host, sizes included); on a page route every answer
 * that is not a redirect is HTML, except that a request broken below routing or off its route may
 * get the envelope instead (no route owns it), but never a bare status line.
 */
import type { FuzzRequest } from "./request.js";
import { header, type RawAnswer, type RawResult } from "./wire.js";

function envelopeProblem(answer: RawAnswer, method: string): string | undefined {
  const type = header(answer, "content-type");
  if (!/^application\/json/i.test(type ?? "")) return `not JSON (content-type ${type ?? "none"})`;
  if (method === "HEAD") return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(answer.body.toString("utf8"));
  } catch {
    return "body is not JSON";
  }
  const error = (parsed as { error?: { code?: unknown; message?: unknown } } | null)?.error;
  if (parsed === null || typeof parsed !== "object" || Object.keys(parsed).join() !== "error") {
    return "not the error envelope (top-level keys)";
  }
  if (typeof error?.code !== "string" || error.code === "" || typeof error.message !== "string") {
    return "not the error envelope (code, message)";
  }
  return undefined;
}

/** RFC 6749 §5.2: `{"error": "...", "error_description"?: "..."}` (the spec's rule for `/oidc/*`). */
function oauthProblem(answer: RawAnswer, method: string): string | undefined {
  const type = header(answer, "content-type");
  if (!/^application\/json/i.test(type ?? "")) return `not JSON (content-type ${type ?? "none"})`;
  if (method === "HEAD") return undefined;
  try {
    const parsed = JSON.parse(answer.body.toString("utf8")) as { error?: unknown; error_description?: unknown } | null;
    if (typeof parsed?.error !== "string" || parsed.error === "") return "not an OAuth error (error)";
    const description = parsed.error_description;
    return description === undefined || typeof description === "string"
      ? undefined
      : "not an OAuth error (error_description)";
  } catch {
    return "body is not JSON";
  }
}

/** JSON-RPC 2.0 §5: `{"jsonrpc": "2.0", "error": {"code": <integer>, "message": "..."}, "id": ...}`. */
function jsonRpcProblem(answer: RawAnswer, method: string): string | undefined {
  const type = header(answer, "content-type");
  if (!/^application\/json/i.test(type ?? "")) return `not JSON (content-type ${type ?? "none"})`;
  if (method === "HEAD") return undefined;
  try {
    const parsed = JSON.parse(answer.body.toString("utf8")) as {
      jsonrpc?: unknown;
      error?: { code?: unknown; message?: unknown };
      id?: unknown;
    } | null;
    if (parsed?.jsonrpc !== "2.0" || !("id" in parsed)) return "not a JSON-RPC 2.0 response (jsonrpc, id)";
    if (!Number.isInteger(parsed.error?.code) || typeof parsed.error?.message !== "string") {
      return "not a JSON-RPC error (code, message)";
    }
    return undefined;
  } catch {
    return "body is not JSON";
  }
}

const isHtml = (answer: RawAnswer) => /^text\/html/i.test(header(answer, "content-type") ?? "");

/** The request names `text/html` in its `Accept`, as a browser does (the servers then answer pages). */
const asksForHtml = (request: FuzzRequest) =>
  request.headers.some(([name, value]) => name.toLowerCase() === "accept" && /text\/html/i.test(value));

/**
 * A redirect must stay on `origins` as a browser resolves it (tabs and newlines dropped,
 * backslashes as slashes): `/\t/evil.example` is `//evil.example`, another site.
 */
function redirectProblem(answer: RawAnswer, origins: string[]): string | undefined {
  const location = header(answer, "location");
  if (location === undefined) return undefined;
  let target: URL;
  try {
    target = new URL(location, origins[0]);
  } catch {
    return "redirect to an unreadable Location";
  }
  return origins.includes(target.origin) ? undefined : `redirect off-site (to ${target.origin})`;
}

/**
 * The problem with `result` as an answer to `request`, or undefined when it is acceptable.
 * `origins`: where redirects may lead (the server's own origin first, then the sites it sends people to).
 */
export function judge(request: FuzzRequest, result: RawResult, origins: string[]): string | undefined {
  if ("error" in result) return `no answer: ${result.error.replace(/\d+ ms/, "N ms")}`;
  const { answer } = result;
  const status = answer.status;
  if (status >= 500) {
    const code = /"code"\s*:\s*"([^"]+)"/.exec(answer.body.toString("utf8"))?.[1];
    return `${status}${code ? ` ${code}` : ""}`;
  }
  const success = status < 300 || status === 304;
  const redirect = status >= 300 && status < 400;
  if (redirect) {
    const problem = redirectProblem(answer, origins);
    if (problem !== undefined) return `${status} ${problem}`;
  }
  // A path that does not percent-decode, or with a segment over the router's parameter limit
  // (414), is refused before any route is chosen: the envelope.
  const path = request.target.split("?")[0] ?? "";
  const lenient = request.transport || request.offRoute || !decodes(path) || overlong(path);
  // Off its route, the not-found envelope is the right answer whatever the route was, and so is
  // the servers' "page not found" for a browser, which asks for HTML.
  if (request.offRoute && !success && envelopeProblem(answer, request.method) === undefined) return undefined;
  if (request.offRoute && status === 404 && isHtml(answer) && asksForHtml(request)) return undefined;
  // Refused before any route is chosen (framing, header size): the envelope, whatever the route.
  if (request.kind === "oauth" && !success && lenient && envelopeProblem(answer, request.method) === undefined) {
    return undefined;
  }
  if ((request.kind === "api" || request.kind === "oauth") && !success) {
    const problem = (request.kind === "api" ? envelopeProblem : oauthProblem)(answer, request.method);
    return problem === undefined ? undefined : `${status} ${problem}`;
  }
  if (request.kind === "jsonrpc" && !success) {
    if (envelopeProblem(answer, request.method) === undefined) return undefined;
    const problem = jsonRpcProblem(answer, request.method);
    return problem === undefined ? undefined : `${status} neither the envelope nor a JSON-RPC error: ${problem}`;
  }
  if (request.kind === "dual" && !success && !redirect) {
    if (isHtml(answer)) return undefined;
    const problem = envelopeProblem(answer, request.method);
    return problem === undefined ? undefined : `${status} neither HTML nor ${problem}`;
  }
  if (request.kind === "page" && !redirect && status !== 204 && status !== 304) {
    if (isHtml(answer)) return undefined;
    if (lenient && envelopeProblem(answer, request.method) === undefined) return undefined;
    return `${status} not HTML (content-type ${header(answer, "content-type") ?? "none"})`;
  }
  return undefined;
}

/** The servers' router refuses a path parameter longer than this (`maxParamLength`). */
const MAX_PARAM_LENGTH = 2048;

function overlong(path: string): boolean {
  return path.split("/").some((segment) => segment.length > MAX_PARAM_LENGTH);
}

function decodes(path: string): boolean {
  try {
    decodeURIComponent(path);
    return true;
  } catch {
    return false;
  }
}
