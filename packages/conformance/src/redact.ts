/**
 * Reports end up in CI logs: a token in a body shows as its header and claims (its signature
 * removed, so it cannot be used), and a credential header as its length.
 */
import type { HttpResponse } from "./http.js";

const JWT_SIGNATURE = /(eyJ[\w-]*\.[\w-]*)\.[\w-]+/g;
const CREDENTIAL_HEADERS = new Set(["proto-attestation", "authorization"]);

const withoutSignatures = (text: string): string => text.replace(JWT_SIGNATURE, "$1.<signature removed>");

/** The response with its exchange fit for a report. */
export function redacted(response: HttpResponse): HttpResponse {
  const { exchange } = response;
  const requestHeaders = Object.fromEntries(
    Object.entries(exchange.requestHeaders).map(([name, value]) => [
      name,
      CREDENTIAL_HEADERS.has(name.toLowerCase()) ? `<${value.length} characters>` : value,
    ]),
  );
  return {
    ...response,
    exchange: {
      ...exchange,
      requestHeaders,
      ...(exchange.requestBody === undefined ? {} : { requestBody: withoutSignatures(exchange.requestBody) }),
      bodyExcerpt: withoutSignatures(exchange.bodyExcerpt),
    },
  };
}
