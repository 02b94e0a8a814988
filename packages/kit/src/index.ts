export type { AttestorConfig, KitAttestation, ResolvedAttestor } from "./attestors.js";
export { AttestorRegistry } from "./attestors.js";
export type { SpendRequest, SpendResult } from "./authority.js";
export { MAX_SPEND_REFERENCE_LENGTH } from "./authority.js";
export { KitConfigError } from "./config-error.js";
export type { BuildDiscoveryOptions, DiscoveryInput } from "./discovery.js";
export {
  assertDiscoveryDocument,
  buildDiscoveryDocument,
  DEFAULT_ENDPOINTS,
  DiscoveryDocumentError,
  endpointPath,
} from "./discovery.js";
export { MAIL_RETRY_AFTER_SECONDS } from "./email.js";
export type { KitErrorUse, KitSpecificErrorCode } from "./errors.js";
export { KIT_ERRORS, KIT_SPECIFIC_ERRORS, kitError } from "./errors.js";
// The Fastify adapter is @proto/kit/fastify, like ./express and ./hono: what this entry declares
// names no optional peer, so a project without Fastify type-checks it with skipLibCheck off.
export type { GuardOutcome, RequireAgentOptions } from "./guard.js";
// The guard every adapter runs, for adapters of other servers (proto-gate).
export { checkGuardOptions, guardRequest } from "./guard.js";
export type { KitRequest, KitResponse } from "./http.js";
export { toFetchResponse, toHeaders } from "./http.js";
export type {
  AgentContext,
  AttestedSessionOptions,
  AuthenticateOptions,
  HandleOptions,
  InvitationEvent,
  KitOptions,
  KitRoute,
  KitWebBotAuthOptions,
} from "./kit.js";
export {
  createKit,
  DEFAULT_EXTENDED_SESSION_SECONDS,
  DEFAULT_INVITATION_TTL_SECONDS,
  DEFAULT_OWNER_FRESHNESS_SECONDS,
  DEFAULT_OWNER_PATH,
  DEFAULT_OWNER_SESSION_TTL_SECONDS,
  Kit,
} from "./kit.js";
export type { KitMail, KitMailer, KitMailOptions, OutboxEntry } from "./mailer.js";
export { DEFAULT_MAILS_PER_RECIPIENT_PER_HOUR, SmtpMailer } from "./mailer.js";
export type {
  AccessTokenClaims,
  BearerAgent,
  BearerContext,
  BearerPerson,
  BearerRequest,
  ProtectedResourceMetadata,
  ProtectedResourceOptions,
} from "./mcp-resource.js";
export {
  BearerError,
  MAX_BEARER_TOKEN_LENGTH,
  PROTECTED_RESOURCE_METADATA_PATH,
  ProtectedResource,
  resourceSubjectAudience,
} from "./mcp-resource.js";
export { protoClientErrors } from "./node-server.js";
export type { RekeyResult, RevocationResult } from "./owner.js";
export type { RateLimitDecision, RateLimiter } from "./rate-limit.js";
export { MemoryRateLimiter, StoreRateLimiter } from "./rate-limit.js";
export type {
  AccountOwner,
  AccountResource,
  AccountState,
  ClaimAnswer,
  KeyRotationAnswer,
  OwnerAccountView,
  SignupAnswer,
} from "./resource.js";
export type { NewOwnerSession, OwnerSession } from "./sessions.js";
export type { SignedAgentIdentity, SignedAgentPolicy } from "./signed-agents.js";
export { SignedAgentChallenge } from "./signed-agents.js";
export type { SignInResult } from "./signin.js";
export { SIGNIN_REQUEST_TTL_SECONDS } from "./signin.js";
export type { GrantSpendsView, SpendView } from "./spend-view.js";
export type { OpenKitStoreOptions } from "./store/kysely-store.js";
export { KyselyKitStore, openKitStore } from "./store/kysely-store.js";
export { KIT_MIGRATION_TABLE } from "./store/migrations.js";
export type { KitDatabase } from "./store/schema.js";
export type {
  AccountRecord,
  AttestationUpdate,
  InvitationRecord,
  InvitationStatus,
  KitStore,
  NewAccount,
  NewSpend,
  PersonRecord,
  RotateOutcome,
  SessionRecord,
  SignInRequestRecord,
  SpendOutcome,
  SpendRecord,
} from "./store/types.js";
