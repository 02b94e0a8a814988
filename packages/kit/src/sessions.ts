import { normalizeRecipient, type Recipient, recipientKey } from "@proto/protocol";
import { type CookieOptions, parseCookies, serializeCookie } from "./http.js";
import type { KitStore, SessionRecord } from "./store/types.js";
import { hashToken, randomToken } from "./util.js";

/** A human's session on the service: who they proved to be, and when they last authenticated. */
export interface OwnerSession {
  /** Verified identities, canonical (an `oidc` issuer is the attestor's canonical name). */
  identities: Recipient[];
  /** Milliseconds since the epoch; undefined means "unknown", which is always too stale. */
  authenticatedAt: number | undefined;
  /** The person (canonical issuer + subject) when the session came from a sign-in with an attestor. */
  personId: string | undefined;
  expiresAt: number;
  /** The form token of this session (claim page). */
  csrf: string;
  /** @internal the stored hash of the cookie value. */
  idHash: string;
}

export interface NewOwnerSession {
  /** Identities the service verified (e-mail, phone, oidc, did); normalised here. */
  identities: unknown[];
  /** When the person authenticated (ms). Omit it and owner-binding operations answer `owner_session_too_stale`. */
  authenticatedAt?: number | undefined;
  personId?: string | undefined;
}

export class OwnerSessions {
  constructor(
    private readonly store: KitStore,
    private readonly options: {
      cookieName: string;
      ttlSeconds: number;
      secure: boolean;
      now: () => number;
      canonicalIssuer: (issuer: string) => string | undefined;
    },
  ) {}

  get cookieName(): string {
    return this.options.cookieName;
  }

  cookieOptions(maxAgeSeconds: number): CookieOptions {
    return { maxAgeSeconds, path: "/", secure: this.options.secure };
  }

  /** Canonical form of an identity: normalised, and an attestor's issuer under its canonical name. */
  canonicalIdentity(input: unknown): Recipient {
    const result = normalizeRecipient(input);
    if (!result.ok) throw new TypeError(`invalid identity: ${result.reason}`);
    const recipient = result.recipient;
    if (recipient.type === "oidc") {
      const canonical = this.options.canonicalIssuer(recipient.value.issuer);
      if (canonical !== undefined) return { type: "oidc", value: { issuer: canonical, sub: recipient.value.sub } };
    }
    return recipient;
  }

  async create(input: NewOwnerSession): Promise<{ token: string; setCookie: string; session: OwnerSession }> {
    const identities = input.identities.map((identity) => this.canonicalIdentity(identity));
    const token = randomToken();
    const now = this.options.now();
    const record: SessionRecord = {
      idHash: hashToken(token),
      createdAt: now,
      expiresAt: now + this.options.ttlSeconds * 1000,
      authenticatedAt: input.authenticatedAt,
      identities,
      personId: input.personId,
      csrf: randomToken(),
    };
    await this.store.createSession(record);
    return {
      token,
      setCookie: serializeCookie(this.options.cookieName, token, this.cookieOptions(this.options.ttlSeconds)),
      session: toSession(record),
    };
  }

  async fromHeaders(headers: Headers): Promise<OwnerSession | undefined> {
    const token = parseCookies(headers.get("cookie")).get(this.options.cookieName);
    if (token === undefined || token.length === 0 || token.length > 256) return undefined;
    const record = await this.store.findSession(hashToken(token), this.options.now());
    return record === undefined ? undefined : toSession(record);
  }

  async destroy(session: OwnerSession): Promise<string> {
    await this.store.deleteSession(session.idHash);
    return this.clearCookie();
  }

  clearCookie(): string {
    return serializeCookie(this.options.cookieName, "", this.cookieOptions(0));
  }

  /** True when the session authenticated within the last `windowSeconds`. */
  isFresh(session: OwnerSession, windowSeconds: number): boolean {
    if (session.authenticatedAt === undefined) return false;
    return this.options.now() - session.authenticatedAt <= windowSeconds * 1000;
  }
}

function toSession(record: SessionRecord): OwnerSession {
  return {
    identities: record.identities,
    authenticatedAt: record.authenticatedAt,
    personId: record.personId,
    expiresAt: record.expiresAt,
    csrf: record.csrf,
    idHash: record.idHash,
  };
}

export function identityKeys(session: OwnerSession): Set<string> {
  const keys = new Set<string>();
  for (const identity of session.identities) {
    try {
      keys.add(recipientKey(identity));
    } catch {
      // An identity that no longer normalises matches nothing.
    }
  }
  return keys;
}
