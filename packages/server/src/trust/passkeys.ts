/**
 * Passkeys (WebAuthn) of the people the attestor knows: the registration and authentication
 * ceremonies, with single-use challenges bound to the browser that asked, and the credentials.
 * The relying party is the attestor's public origin: its host is the RP ID, so changing the
 * domain makes every registered passkey unusable (see docs/operations.md).
 */
import {
  type AuthenticationResponseJSON,
  type AuthenticatorTransport,
  generateAuthenticationOptions,
  generateRegistrationOptions,
  type PublicKeyCredentialCreationOptionsJSON,
  type PublicKeyCredentialRequestOptionsJSON,
  type RegistrationResponseJSON,
  verifyAuthenticationResponse,
  verifyRegistrationResponse,
} from "@simplewebauthn/server";
import type { Kysely } from "kysely";
import type { Clock } from "../platform/clock.js";
import { hashToken } from "../platform/tokens.js";
import type { TrustSchema } from "./migrations.js";

/** How long a ceremony may take, from its options to the browser's answer. */
export const PASSKEY_CHALLENGE_TTL_SECONDS = 5 * 60;
/** The most passkeys one person may hold (each is a row and a line on the account page). */
export const MAX_PASSKEYS = 20;
export const MAX_PASSKEY_NAME = 64;
const BACKWARDS = "This passkey's counter went backwards: it may have been copied. Sign in another way.";

export type CeremonyPurpose = "register" | "signin";

export interface PasskeyView {
  id: string;
  name: string;
  createdAt: number;
  lastUsedAt: number | null;
  backedUp: boolean;
}

/** Why a ceremony was refused; each is the person's or the browser's, never the server's. */
export class PasskeyRefused extends Error {
  constructor(
    readonly reason: "challenge" | "unknown_credential" | "verification" | "too_many" | "name",
    message: string,
  ) {
    super(message);
  }
}

export interface PasskeyOptions {
  db: Kysely<TrustSchema>;
  clock: Clock;
  publicUrl: string;
  rpName?: string;
}

export class Passkeys {
  readonly #db: Kysely<TrustSchema>;
  readonly #clock: Clock;
  readonly #origin: string;
  readonly #rpId: string;
  readonly #rpName: string;

  constructor(options: PasskeyOptions) {
    this.#db = options.db;
    this.#clock = options.clock;
    const url = new URL(options.publicUrl);
    this.#origin = url.origin;
    this.#rpId = url.hostname;
    this.#rpName = options.rpName ?? "proto trust";
  }

  /** The name a passkey manager shows for the account: its e-mail address when it has one. */
  async accountLabel(humanId: string): Promise<string> {
    const email = await this.#db
      .selectFrom("trust_verifications")
      .select("subject")
      .where("human_id", "=", humanId)
      .where("method", "=", "email")
      .where("revoked_at", "is", null)
      .executeTakeFirst();
    return email?.subject ?? this.#rpName;
  }

  async list(humanId: string): Promise<PasskeyView[]> {
    const rows = await this.#db
      .selectFrom("trust_passkeys")
      .select(["credential_id", "name", "created_at", "last_used_at", "backed_up"])
      .where("human_id", "=", humanId)
      .orderBy("created_at")
      .execute();
    return rows.map((r) => ({
      id: r.credential_id,
      name: r.name,
      createdAt: r.created_at,
      lastUsedAt: r.last_used_at,
      backedUp: r.backed_up === 1,
    }));
  }

  async remove(humanId: string, credentialId: string): Promise<boolean> {
    const result = await this.#db
      .deleteFrom("trust_passkeys")
      .where("human_id", "=", humanId)
      .where("credential_id", "=", credentialId)
      .executeTakeFirst();
    return Number(result.numDeletedRows) === 1;
  }

  /** Options for adding a passkey to a signed-in person's account; `boundTo` is their session. */
  async registrationOptions(
    humanId: string,
    label: string,
    boundTo: string,
  ): Promise<PublicKeyCredentialCreationOptionsJSON> {
    const existing = await this.#db
      .selectFrom("trust_passkeys")
      .select(["credential_id", "transports"])
      .where("human_id", "=", humanId)
      .execute();
    if (existing.length >= MAX_PASSKEYS)
      throw new PasskeyRefused("too_many", `An account holds at most ${MAX_PASSKEYS} passkeys. Remove one first.`);
    const options = await generateRegistrationOptions({
      rpName: this.#rpName,
      rpID: this.#rpId,
      userID: Buffer.from(userHandle(humanId), "base64url"),
      userName: label,
      userDisplayName: label,
      attestationType: "none",
      // A second passkey on the same authenticator would only replace the first.
      excludeCredentials: existing.map((c) => ({ id: c.credential_id, transports: transportsOf(c.transports) })),
      authenticatorSelection: { residentKey: "required", userVerification: "required" },
      timeout: PASSKEY_CHALLENGE_TTL_SECONDS * 1000,
    });
    await this.#remember(options.challenge, "register", boundTo, humanId);
    return options;
  }

  /** Verifies a new passkey and stores it under the person bound to the challenge. */
  async register(humanId: string, boundTo: string, name: string, response: RegistrationResponseJSON): Promise<void> {
    const trimmed = name.trim();
    if (trimmed.length === 0 || trimmed.length > MAX_PASSKEY_NAME || /\p{Cc}/u.test(trimmed))
      throw new PasskeyRefused("name", `Give the passkey a name of 1 to ${MAX_PASSKEY_NAME} characters.`);
    const challenge = await this.#consume(response.response?.clientDataJSON, "register", boundTo, humanId);
    let verified: Awaited<ReturnType<typeof verifyRegistrationResponse>>;
    try {
      verified = await verifyRegistrationResponse({
        response,
        expectedChallenge: challenge,
        expectedOrigin: this.#origin,
        expectedRPID: this.#rpId,
        requireUserVerification: true,
      });
    } catch (error) {
      throw new PasskeyRefused("verification", `The passkey could not be verified: ${messageOf(error)}`);
    }
    if (!verified.verified || verified.registrationInfo === undefined)
      throw new PasskeyRefused("verification", "The passkey could not be verified.");
    const info = verified.registrationInfo;
    const inserted = await this.#db
      .insertInto("trust_passkeys")
      .values({
        credential_id: info.credential.id,
        human_id: humanId,
        user_handle: userHandle(humanId),
        public_key: Buffer.from(info.credential.publicKey).toString("base64url"),
        counter: info.credential.counter,
        transports: JSON.stringify(info.credential.transports ?? []),
        device_type: info.credentialDeviceType,
        backed_up: info.credentialBackedUp ? 1 : 0,
        name: trimmed,
        created_at: this.#clock.now(),
        last_used_at: null,
      })
      .onConflict((oc) => oc.column("credential_id").doNothing())
      .executeTakeFirst();
    // The authenticator is told to exclude the person's passkeys; one that offers a registered
    // credential anyway (or another person's) must not be told it was added.
    if (Number(inserted.numInsertedOrUpdatedRows ?? 0) !== 1)
      throw new PasskeyRefused("verification", "This passkey is already registered.");
  }

  /** Options for signing in with any passkey of this site (discoverable credentials). */
  async authenticationOptions(boundTo: string): Promise<PublicKeyCredentialRequestOptionsJSON> {
    const options = await generateAuthenticationOptions({
      rpID: this.#rpId,
      userVerification: "required",
      timeout: PASSKEY_CHALLENGE_TTL_SECONDS * 1000,
    });
    await this.#remember(options.challenge, "signin", boundTo, null);
    return options;
  }

  /** Verifies a sign-in assertion; the person whose passkey signed it. */
  async authenticate(boundTo: string, response: AuthenticationResponseJSON): Promise<string> {
    const challenge = await this.#consume(response.response?.clientDataJSON, "signin", boundTo, null);
    const id = typeof response.id === "string" && response.id.length <= 1024 ? response.id : "";
    const row = await this.#db
      .selectFrom("trust_passkeys")
      .selectAll()
      .where("credential_id", "=", id)
      .executeTakeFirst();
    if (row === undefined)
      throw new PasskeyRefused("unknown_credential", "This passkey is not registered here, or it was removed.");
    let verified: Awaited<ReturnType<typeof verifyAuthenticationResponse>>;
    try {
      verified = await verifyAuthenticationResponse({
        response,
        expectedChallenge: challenge,
        expectedOrigin: this.#origin,
        expectedRPID: this.#rpId,
        requireUserVerification: true,
        credential: {
          id: row.credential_id,
          publicKey: new Uint8Array(Buffer.from(row.public_key, "base64url")),
          counter: row.counter,
          transports: transportsOf(row.transports),
        },
      });
    } catch (error) {
      // The library refuses a counter that did not move forward before we get to.
      if (/counter/i.test(messageOf(error))) throw new PasskeyRefused("verification", BACKWARDS);
      throw new PasskeyRefused("verification", `The passkey could not be verified: ${messageOf(error)}`);
    }
    if (!verified.verified) throw new PasskeyRefused("verification", "The passkey could not be verified.");
    const { newCounter, credentialBackedUp } = verified.authenticationInfo;
    // Only forwards: of two sign-ins racing with the same counter, one moves it and the other is
    // refused as a clone would be. A counter that stays 0 is an authenticator that keeps none.
    const moved = await this.#db
      .updateTable("trust_passkeys")
      .set({ counter: newCounter, backed_up: credentialBackedUp ? 1 : 0, last_used_at: this.#clock.now() })
      .where("credential_id", "=", row.credential_id)
      .where((eb) => (newCounter === 0 && row.counter === 0 ? eb("counter", "=", 0) : eb("counter", "<", newCounter)))
      .executeTakeFirst();
    if (Number(moved.numUpdatedRows) !== 1) throw new PasskeyRefused("verification", BACKWARDS);
    return row.human_id;
  }

  async #remember(challenge: string, purpose: CeremonyPurpose, boundTo: string, humanId: string | null): Promise<void> {
    const now = this.#clock.now();
    // Expired ceremonies are only dead weight; each new one clears a few.
    await this.#db.deleteFrom("trust_webauthn_challenges").where("expires_at", "<", now).execute();
    await this.#db
      .insertInto("trust_webauthn_challenges")
      .values({
        challenge_hash: hashToken(challenge),
        purpose,
        bound_to: hashToken(boundTo),
        human_id: humanId,
        created_at: now,
        expires_at: now + PASSKEY_CHALLENGE_TTL_SECONDS * 1000,
        used_at: null,
      })
      .execute();
  }

  /**
   * The challenge the browser signed (read from its client data), used up by one atomic update
   * that also checks purpose, binding, person and lifetime: a replayed answer finds it used.
   */
  async #consume(
    clientDataJSON: unknown,
    purpose: CeremonyPurpose,
    boundTo: string,
    humanId: string | null,
  ): Promise<string> {
    const challenge = challengeOf(clientDataJSON);
    if (challenge === undefined) throw new PasskeyRefused("challenge", "The browser's answer is not well formed.");
    const now = this.#clock.now();
    let update = this.#db
      .updateTable("trust_webauthn_challenges")
      .set({ used_at: now })
      .where("challenge_hash", "=", hashToken(challenge))
      .where("purpose", "=", purpose)
      .where("bound_to", "=", hashToken(boundTo))
      .where("used_at", "is", null)
      .where("expires_at", ">", now);
    update = humanId === null ? update.where("human_id", "is", null) : update.where("human_id", "=", humanId);
    const used = await update.executeTakeFirst();
    if (Number(used.numUpdatedRows) !== 1)
      throw new PasskeyRefused("challenge", "This request expired or was already used. Try again.");
    return challenge;
  }
}

function transportsOf(json: string): AuthenticatorTransport[] {
  try {
    const value: unknown = JSON.parse(json);
    return Array.isArray(value) ? value.filter((t): t is AuthenticatorTransport => typeof t === "string") : [];
  } catch {
    return [];
  }
}

function challengeOf(clientDataJSON: unknown): string | undefined {
  if (typeof clientDataJSON !== "string" || clientDataJSON.length > 8192) return undefined;
  try {
    const data: unknown = JSON.parse(Buffer.from(clientDataJSON, "base64url").toString("utf8"));
    const challenge = (data as { challenge?: unknown } | null)?.challenge;
    return typeof challenge === "string" && challenge.length > 0 && challenge.length <= 512 ? challenge : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The WebAuthn user handle of a person: the same for all their passkeys (an authenticator keeps
 * one passkey per handle and site), opaque, and derived so that nothing more is stored.
 */
function userHandle(humanId: string): string {
  return hashToken(`webauthn-user:${humanId}`);
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
