/**
 * Rules every route's input follows, checked in one place before any handler reads it, so a
 * client's mistake is a 400 and never reaches a database or a handler that assumes one string:
 *
 * - A query parameter or form field given more than once is refused (`?req=a&req=b`): no route
 *   takes lists that way, and OAuth forbids repeats (RFC 6749 §3.1).
 * - Query parameters and path parameters are identifiers or single-line values: no C0 control
 *   character or DEL.
 * - No body carries NUL in any string (PostgreSQL cannot store it, SQLite FTS5 cannot search it).
 *   Single-line JSON fields also refuse the other controls, through `SINGLE_LINE` in their schema;
 *   free text (descriptions) keeps tabs and line breaks (`FREE_TEXT`).
 */
import type { FastifyInstance, FastifyRequest } from "fastify";
import { ApiError } from "./errors.js";

/** Schema pattern of identifiers and single-line text: no C0 control character, no DEL. */
export const SINGLE_LINE = "^[^\\u0000-\\u001f\\u007f]*$";
/** Schema pattern of free text: tab, line feed and carriage return allowed, other controls not. */
export const FREE_TEXT = "^[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f]*$";

/** The validation message for a value one of the patterns above refused, else undefined. */
export function controlPatternMessage(pattern: unknown): string | undefined {
  if (pattern === SINGLE_LINE) return "must not contain control characters";
  if (pattern === FREE_TEXT) return "must not contain control characters other than tabs and line breaks";
  return undefined;
}

/** Query and path parameters follow the single-line rule of the schemas. */
const singleLine = new RegExp(SINGLE_LINE, "u");

/** Whether a value holds no C0 control character and no DEL (the `SINGLE_LINE` rule). */
export function isSingleLine(value: string): boolean {
  return singleLine.test(value);
}

/** A client input the rules refuse: `invalid_request`, with a message a person can act on. */
export class InputRuleError extends ApiError {
  constructor(message: string) {
    super(400, "invalid_request", message);
  }
}

function isForm(request: FastifyRequest): boolean {
  return (request.headers["content-type"] ?? "").toLowerCase().startsWith("application/x-www-form-urlencoded");
}

function checkFields(fields: unknown, where: string): void {
  if (typeof fields !== "object" || fields === null) return;
  for (const [name, value] of Object.entries(fields)) {
    if (Array.isArray(value)) throw new InputRuleError(`the ${where} "${name}" is given more than once`);
    if (typeof value === "string" && !singleLine.test(value)) {
      throw new InputRuleError(`the ${where} "${name}" contains a control character`);
    }
  }
}

function containsNul(value: unknown, depth = 0): boolean {
  if (typeof value === "string") return value.includes("\u0000");
  if (typeof value !== "object" || value === null || Buffer.isBuffer(value) || depth > 64) return false;
  for (const [key, item] of Object.entries(value)) {
    if (key.includes("\u0000") || containsNul(item, depth + 1)) return true;
  }
  return false;
}

async function checkQueryAndParams(request: FastifyRequest): Promise<void> {
  checkFields(request.query, "query parameter");
  checkFields(request.params, "path parameter");
}

async function checkBody(request: FastifyRequest): Promise<void> {
  if (isForm(request)) checkFields(request.body, "form field");
  else if (containsNul(request.body)) throw new InputRuleError("the body contains a NUL character");
}

/**
 * Adds the rules to every route of `app` and its not-found handler, after the routes' own
 * `onRequest` hooks (rate limits), so refused input still spends a request: query and path
 * before the body is read, the body once it is parsed and validated, so a route that judges
 * credentials before its body (`preValidation`) keeps doing so.
 */
export function registerInputRules(app: FastifyInstance): void {
  app.addHook("preParsing", checkQueryAndParams);
  app.addHook("preHandler", checkBody);
}
