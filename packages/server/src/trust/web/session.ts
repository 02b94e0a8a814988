import type {} from "@fastify/cookie";
import { sameOriginPath } from "@proto/protocol";
import type { FastifyReply, FastifyRequest } from "fastify";
import type { Kysely } from "kysely";
import type { Clock } from "../../platform/clock.js";
import { hashToken, randomToken } from "../../platform/tokens.js";
import type { TrustSchema } from "../migrations.js";

export interface HumanSession {
  humanId: string;
  /** When the person last proved who they are (ms). */
  authAt: number;
  authMethod: string;
  idHash: string;
}

export interface SessionOptions {
  db: Kysely<TrustSchema>;
  clock: Clock;
  /** Secure cookies (everywhere except development over plain http). */
  secure: boolean;
  ttlSeconds: number;
}

const SESSIONS = new WeakMap<FastifyRequest, HumanSession | null>();

/**
 * Browser sessions of people: an opaque random id in an HttpOnly cookie, stored only as its hash.
 * Signing in always issues a new id and revokes the one the browser brought (no fixation), and
 * drops the browser's CSRF secret, so no form token handed out before the sign-in works after it.
 */
export class SessionManager {
  readonly cookieName: string;
  /** The cookie @fastify/csrf-protection keeps its secret in. */
  readonly csrfCookieName: string;
  readonly #options: SessionOptions;

  constructor(options: SessionOptions) {
    this.#options = options;
    this.cookieName = options.secure ? "__Host-proto_session" : "proto_session";
    this.csrfCookieName = options.secure ? "__Host-proto_csrf" : "proto_csrf";
  }

  get secure(): boolean {
    return this.#options.secure;
  }

  async current(request: FastifyRequest): Promise<HumanSession | undefined> {
    const cached = SESSIONS.get(request);
    if (cached !== undefined) return cached ?? undefined;
    const id = request.cookies[this.cookieName];
    let session: HumanSession | undefined;
    if (id !== undefined && id.length <= 128) {
      const idHash = hashToken(id);
      const row = await this.#options.db
        .selectFrom("trust_sessions")
        .selectAll()
        .where("id_hash", "=", idHash)
        .executeTakeFirst();
      if (row !== undefined && row.revoked_at === null && row.expires_at > this.#options.clock.now()) {
        session = { humanId: row.human_id, authAt: row.auth_at, authMethod: row.auth_method, idHash };
      }
    }
    SESSIONS.set(request, session ?? null);
    return session;
  }

  async signIn(request: FastifyRequest, reply: FastifyReply, humanId: string, method: string): Promise<HumanSession> {
    await this.#revokeCookieSession(request);
    const now = this.#options.clock.now();
    const id = randomToken("", 32);
    const session: HumanSession = { humanId, authAt: now, authMethod: method, idHash: hashToken(id) };
    await this.#options.db
      .insertInto("trust_sessions")
      .values({
        id_hash: session.idHash,
        human_id: humanId,
        created_at: now,
        auth_at: now,
        auth_method: method,
        expires_at: now + this.#options.ttlSeconds * 1000,
        revoked_at: null,
      })
      .execute();
    reply.setCookie(this.cookieName, id, {
      path: "/",
      httpOnly: true,
      sameSite: "lax",
      secure: this.#options.secure,
      maxAge: this.#options.ttlSeconds,
    });
    this.#dropCsrfSecret(request, reply);
    SESSIONS.set(request, session);
    return session;
  }

  /**
   * Forgets the CSRF secret: a token someone obtained before the sign-in (a page fetched in this
   * browser, a planted secret) is worthless after it. The next page served creates a new secret.
   */
  #dropCsrfSecret(request: FastifyRequest, reply: FastifyReply): void {
    request.cookies[this.csrfCookieName] = undefined;
    reply.clearCookie(this.csrfCookieName, { path: "/", httpOnly: true, sameSite: "lax", secure: this.secure });
  }

  async signOut(request: FastifyRequest, reply: FastifyReply): Promise<void> {
    await this.#revokeCookieSession(request);
    reply.clearCookie(this.cookieName, { path: "/", httpOnly: true, sameSite: "lax", secure: this.#options.secure });
    SESSIONS.set(request, null);
  }

  async #revokeCookieSession(request: FastifyRequest): Promise<void> {
    const id = request.cookies[this.cookieName];
    if (id === undefined || id.length > 128) return;
    await this.#options.db
      .updateTable("trust_sessions")
      .set({ revoked_at: this.#options.clock.now() })
      .where("id_hash", "=", hashToken(id))
      .where("revoked_at", "is", null)
      .execute();
  }
}

/** Where a sign-in continues: a path on the attestor's own origin, else the account page. */
export function safeNext(value: unknown, publicUrl: string): string {
  return sameOriginPath(value, publicUrl) ?? "/account";
}
