/**
 * URLs as logs may carry them. Query strings hold secrets (`/signin/email/verify?token=ml_…`,
 * OAuth codes and states, link request ids), so a logged URL keeps its path and its parameter
 * names, never their values.
 */
/** `/a?token=x&next=y` → `/a?token=[redacted]&next=[redacted]`; a URL without a query unchanged. */
export function redactUrl(url: string | undefined): string | undefined {
  if (url === undefined) return undefined;
  const start = url.indexOf("?");
  if (start === -1) return url;
  const names = url
    .slice(start + 1)
    .split("&")
    .filter((pair) => pair.length > 0)
    .map((pair) => `${pair.split("=", 1)[0]?.slice(0, 64) ?? ""}=[redacted]`);
  return `${url.slice(0, start)}?${names.join("&")}`;
}

interface LoggedRequest {
  method?: string | undefined;
  url?: string | undefined;
  host?: string | undefined;
  ip?: string | undefined;
  socket?: { remotePort?: number | undefined } | undefined;
}

/** Fastify's request serializer (the `req` of request logs) with the URL redacted and no headers. */
export function serializeRequest(request: LoggedRequest): Record<string, unknown> {
  return {
    method: request.method,
    url: redactUrl(request.url),
    host: request.host,
    remoteAddress: request.ip,
    remotePort: request.socket?.remotePort,
  };
}
