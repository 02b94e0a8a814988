/**
 * `POST /v1/token` ahead of Fastify's router (see platform/fast-path.ts): the attestor's hot path,
 * where Fastify's per-request machinery costs as much as the mint's own database work. It takes
 * only requests it reads exactly as the Fastify route would: the plain path, a declared length
 * within the body limit, a content type, no `Expect` and no chunked body. Everything else goes to
 * the Fastify route, which answers with the same status, headers and bytes.
 */
import type { IncomingHttpHeaders, IncomingMessage } from "node:http";
import { ProtoError } from "@proto/protocol";
import { ApiError } from "../platform/errors.js";
import type { FastAnswer, FastRoute } from "../platform/fast-path.js";
import { BODY_LIMIT_BYTES } from "../platform/http.js";
import type { MintObserver } from "./metrics.js";
import type { Minted, TrustService } from "./service.js";

export const TOKEN_PATH = "/v1/token";

/** The request as the mint reads it: the body bytes, `null` when there are none. */
export function tokenRequest(headers: IncomingHttpHeaders, body: Buffer | null) {
  return { method: "POST", url: `http://${headers.host ?? "localhost"}${TOKEN_PATH}`, headers, body };
}

export function tokenFastRoute(service: TrustService, mints: MintObserver | undefined): FastRoute {
  return {
    pattern: TOKEN_PATH,
    answer(request, clientIp) {
      if (request.method !== "POST" || request.url !== TOKEN_PATH) return undefined;
      const { headers } = request;
      const length = Number(headers["content-length"]);
      if (
        headers["content-type"] === undefined ||
        headers["transfer-encoding"] !== undefined ||
        headers.expect !== undefined ||
        !Number.isSafeInteger(length) ||
        length < 1 ||
        length > BODY_LIMIT_BYTES
      ) {
        return undefined;
      }
      return readBody(request, length)
        .then((body) => service.mint(tokenRequest(headers, body), clientIp(request)))
        .then(
          (minted) => answer(minted, mints),
          (error: unknown) => {
            // The verifier's errors carry the reserved code and status: the envelope Fastify sends.
            if (error instanceof ProtoError) {
              throw new ApiError(error.status, error.code, error.message, error.details, error.retryAfter);
            }
            throw error;
          },
        );
    },
  };
}

function answer(minted: Minted, mints: MintObserver | undefined): FastAnswer {
  mints?.minted(minted.verification);
  // The keys in the order of the route's response schema, as Fastify's serializer writes them.
  const body = JSON.stringify({
    jwt: minted.jwt,
    expires_at: minted.expires_at,
    verification: minted.verification,
    binding_expires_at: minted.binding_expires_at,
  });
  return { status: 200, headers: { "content-type": "application/json; charset=utf-8" }, body };
}

/** The `length` bytes the client declared; a connection closed before them is a 400. */
function readBody(request: IncomingMessage, length: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let received = 0;
    request.on("data", (chunk: Buffer) => {
      received += chunk.length;
      chunks.push(chunk);
    });
    request.once("end", () => {
      if (received === length) resolve(Buffer.concat(chunks, received));
      else reject(new ApiError(400, "invalid_request", "the request body does not match its Content-Length"));
    });
    request.once("error", () => reject(new ApiError(400, "invalid_request", "the request body was cut short")));
  });
}
