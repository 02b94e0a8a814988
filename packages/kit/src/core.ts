import type {
  DiscoveryDocument,
  Recipient,
  UnclaimedMode,
  VerifiedRequest,
  VerifiedSignedAgent,
} from "@proto/protocol";
import type { AttestorRegistry, KitAttestation } from "./attestors.js";
import type { InvitationMailer } from "./email.js";
import type { KitRequest, KitResponse } from "./http.js";
import type { AccountResource } from "./resource.js";
import type { OwnerSessions } from "./sessions.js";
import type { AttestorSignIn } from "./signin.js";
import type { AccountRecord, KitStore } from "./store/types.js";

/** The kit's options once checked and defaulted. */
export interface ResolvedOptions {
  implicitSignup: boolean;
  mode: UnclaimedMode;
  attestedSession: { mode: "strict" | "extended"; seconds: number } | undefined;
  invitationTtlSeconds: number;
  freshnessSeconds: number;
  unclaimedLimit: number | undefined;
  claimedLimit: number | undefined;
  ttlSeconds: number | undefined;
  recipientTypes: readonly string[];
  maxBodyBytes: number;
  /** Origins an invitation's `redirect_url` may point to (the kit's own origin included). */
  redirectOrigins: readonly string[];
  /** The service in words, on the kit's pages and mails. */
  serviceName: string;
  /** The service's page where owners see their agents (a path or URL on its origin), if it has one. */
  ownerPage: string | undefined;
}

export interface InvitationEvent {
  account: AccountResource;
  recipient: Recipient;
  claimUrl: string;
  token: string;
  expiresAt: string;
  /** True when the kit mailed the claim link itself (an `email` recipient with `mail` configured). */
  mailed: boolean;
}

/** What a verified agent request carries. */
export interface AgentContext {
  did: string;
  account: AccountResource;
  record: AccountRecord;
  /** True when this request created the account (implicit or explicit signup). */
  created: boolean;
  attestation: KitAttestation | undefined;
  signature: VerifiedRequest;
  /** Set when the request was signed with Web Bot Auth (and an attestation made it the account's). */
  signedAgent: VerifiedSignedAgent | undefined;
  /** The verified body bytes (undefined without a body). */
  body: Uint8Array | undefined;
  /** The body as a JSON object; throws `malformed_request`. */
  json(): Record<string, unknown>;
}

/** What every endpoint module works with: the kit's parts, shared, and nothing of the framework. */
export interface KitCore {
  readonly discovery: DiscoveryDocument;
  /** The public origin (`https://api.example.com`). */
  readonly origin: string;
  readonly ownerPath: string;
  readonly store: KitStore;
  readonly attestors: AttestorRegistry;
  readonly sessions: OwnerSessions;
  readonly signIn: AttestorSignIn;
  readonly options: ResolvedOptions;
  now(): number;
  /** Unexpected errors (answered 500 `internal_error`). */
  onError(error: unknown): void;
  onInvitation: ((event: InvitationEvent) => void | Promise<void>) | undefined;
  /** Mails the links of `email` invitations (option `mail`); undefined when the service delivers them. */
  mail: InvitationMailer | undefined;
  /** Verifies an agent request and resolves (or creates) its account. */
  authenticate(request: KitRequest, route: string, explicitSignup?: boolean): Promise<AgentContext>;
  accountResource(record: AccountRecord): AccountResource;
  /** The error envelope, with the `Proto` challenge on a 401 (see `Kit.errorResponse`). */
  errorResponse(error: unknown, request: KitRequest): KitResponse;
  /** The same error as an HTML page, for form posts. */
  errorPage(error: unknown, request: KitRequest): KitResponse;
}

export type Handler = (request: KitRequest) => Promise<KitResponse>;
