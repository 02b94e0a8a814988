export type { ParsedAddress } from "./address-policy.js";
export { isPublicAddress, parseAddress } from "./address-policy.js";
export type { ParsedAmount } from "./amounts.js";
export { formatAmount, minorDigits, parseAmount, plainAmount, spendLimitPhrase } from "./amounts.js";
export type {
  AttestationExpectations,
  AttestationVerifier,
  AttestationVerifierOptions,
  VerificationMethod,
  VerifiedAttestation,
} from "./attestation.js";
export {
  ATTESTATION_HEADER,
  ATTESTATION_ISSUER,
  createAttestationVerifier,
  MAX_ATTESTATION_LIFETIME_SECONDS,
  VERIFICATION_METHODS,
} from "./attestation.js";
export type {
  AuthorityErrorCode,
  AuthorityGrant,
  AuthorityRefusalContext,
  GrantClaims,
  SpendLimit,
  SpendPeriod,
  SpendRefusal,
} from "./authority.js";
export {
  AUTHORITY_ERRORS,
  grantClaims,
  insufficientPermission,
  MAX_AMOUNT,
  MAX_AUTHORIZATION_DETAILS,
  MAX_GRANT_ID_LENGTH,
  readGrantClaims,
  readSpendLimit,
  SPEND_LIMIT_TYPE,
  SPEND_PERIODS,
  spendLimitDetail,
  spendLimitExceeded,
  spendLimitProblem,
  spendPeriodEnd,
  spendPeriodKey,
} from "./authority.js";
export { decodeBase64url, encodeBase64url, isBase64url } from "./base64url.js";
export type { Challenge, ProtoChallenge } from "./challenge.js";
export {
  appendChallenge,
  attemptedProtocol,
  CHALLENGE_SCHEME,
  findProtoChallenge,
  formatProtoChallenge,
  parseWwwAuthenticate,
} from "./challenge.js";
export { addressKey } from "./client-key.js";
export type { Dependency } from "./dependency-errors.js";
export { DependencyUnavailable, OUTAGE_RETRY_AFTER_SECONDS, unavailableDependency } from "./dependency-errors.js";
export type { DidParseResult, DidUrlComponent, ParsedDid, ParsedDidKey, ParsedDidWeb } from "./did.js";
export {
  didUrlComponent,
  didWebForHost,
  didWebHost,
  didWebMatchesHost,
  didWebMismatch,
  isDidSyntax,
  MAX_DID_LENGTH,
  parseDid,
} from "./did.js";
export type { DidKeyErrorCode } from "./did-key.js";
export { DidKeyError, decodeDidKey, didKeyToPublicKey, encodeDidKey, isDidKey } from "./did-key.js";
export type {
  AgentCompatibility,
  DiscoveryBilling,
  DiscoveryDocument,
  DiscoveryEndpoints,
  DiscoveryFeature,
  DiscoveryLimits,
  DiscoveryMcp,
  DiscoveryPermission,
  DiscoveryPermissions,
  DiscoveryPermissionsValidationResult,
  DiscoveryRecipientType,
  DiscoveryValidationError,
  DiscoveryValidationResult,
  DiscoveryX402,
  SignatureAlgorithm,
  SignedEndpoint,
  UnclaimedMode,
} from "./discovery.js";
export {
  assertAgentCompatible,
  checkAgentCompatibility,
  DISCOVERY_SCHEMA,
  DISCOVERY_SCHEMA_ID,
  DiscoveryIncompatibleError,
  InvalidEndpointError,
  isPermissionName,
  MAX_PERMISSION_NAME_LENGTH,
  MAX_PERMISSIONS,
  PERMISSION_NAME,
  PROTO_VERSION,
  resolveEndpoint,
  SIGNED_ENDPOINTS,
  validateDiscoveryDocument,
  validateDiscoveryPermissions,
} from "./discovery.js";
export { ED25519_KEY_LENGTH, privateKeyFromSeed, publicKeyFromRaw, rawPublicKey, seedOfPrivateKey } from "./ed25519.js";
export type {
  AttestorErrorCode,
  ErrorEnvelope,
  ProtoErrorOptions,
  ReservedErrorCode,
  ReservedErrorSpec,
} from "./errors.js";
export {
  ATTESTOR_ERRORS,
  errorEnvelope,
  FINAL_MINT_ERRORS,
  invitationNotFound,
  isReservedErrorCode,
  ownerAuthenticationRequired,
  ProtoError,
  parseErrorEnvelope,
  protoError,
  RESERVED_ERRORS,
  rateLimitExceeded,
} from "./errors.js";
export type { ComponentIdentifier, MessageComponents } from "./http-signatures/components.js";
export { buildSignatureBase, ComponentError, normaliseFieldValues } from "./http-signatures/components.js";
export { contentDigest, contentDigestMatches } from "./http-signatures/content-digest.js";
export type { HeaderSource, RawRequest } from "./http-signatures/message.js";
export type { MessageSignature, SignatureHeaders, SignedRequest, SignOptions } from "./http-signatures/sign.js";
export {
  DEFAULT_SIGNATURE_LABEL,
  DEFAULT_SIGNATURE_VALIDITY_SECONDS,
  randomNonce,
  signatureHeaderPair,
  signFetchRequest,
  signMessage,
  signRequest,
  wireMethod,
} from "./http-signatures/sign.js";
export type { SignatureParams } from "./http-signatures/signature-base.js";
export type { TargetUriParts } from "./http-signatures/target-uri.js";
export {
  canonicalTargetUri,
  fetchTargetUri,
  receivedTargetUri,
  requestTargetOf,
  splitTargetUri,
  TargetUriError,
} from "./http-signatures/target-uri.js";
export type {
  FetchVerifyOptions,
  RequestVerifier,
  RequestVerifierOptions,
  VerifiedRequest,
} from "./http-signatures/verify.js";
export {
  createRequestVerifier,
  DEFAULT_SKEW_SECONDS,
  MAX_SIGNATURE_VALIDITY_SECONDS,
} from "./http-signatures/verify.js";
export type { FetchFunction, KeyLookup, RemoteKeySetOptions } from "./key-set.js";
export { KeySetUnavailableError, RemoteKeySet, staticKeySet } from "./key-set.js";
export { isLoopbackHostname, isLoopbackHttpUrl } from "./loopback.js";
export type { MemoryNonceStoreOptions, NonceStore, RedisNonceStoreOptions, RedisSetClient } from "./nonce-store.js";
export { MemoryNonceStore, RedisNonceStore } from "./nonce-store.js";
export type { NormalizeResult, OidcIdentity, Recipient, RecipientType } from "./recipients.js";
export {
  isRecipientType,
  normalizeRecipient,
  RECIPIENT_TYPES,
  RecipientError,
  recipientKey,
  recipientsMatch,
} from "./recipients.js";
export { hasUnsafeUrlCharacter, percentDecodedSpellings, sameOriginPath } from "./redirect.js";
export type {
  ResolvedAddress,
  SafeFetchConfig,
  SafeFetcher,
  SafeFetchFailure,
  SafeFetchOptions,
  SafeResponse,
  SafeResponseHeaders,
} from "./safe-fetch.js";
export { createSafeFetcher, parseResolveOverrides, SafeFetchError } from "./safe-fetch.js";
export type {
  RawSqliteDatabase,
  RawSqliteStatement,
  SqliteRunResult,
  SqliteStatement,
} from "./sqlite-handle.js";
export { SqliteHandle, sqliteHandlesKept } from "./sqlite-handle.js";
export type { TransportError } from "./transport-errors.js";
export {
  parserError,
  refuseBadHost,
  refuseBeforeRouting,
  routerError,
  socketErrorResponder,
} from "./transport-errors.js";
export { acceptSignature } from "./web-bot-auth/accept-signature.js";
export type { KeyDirectoryFailure, KeyDirectoryOptions } from "./web-bot-auth/key-directory.js";
export {
  DIRECTORY_SIGNATURE_TAG,
  directoryUrlFor,
  jwkThumbprint,
  KEY_DIRECTORY_MEDIA_TYPE,
  KEY_DIRECTORY_PATH,
  KeyDirectoryClient,
  KeyDirectoryError,
} from "./web-bot-auth/key-directory.js";
export type { SignatureAgentForm, WebBotAuthHeaders, WebBotAuthSignOptions } from "./web-bot-auth/sign.js";
export { signProtoAndWebBotAuth, signWebBotAuth } from "./web-bot-auth/sign.js";
export type {
  KeyLookupContext,
  SignatureAgentKeys,
  VerifiedSignedAgent,
  WebBotAuthVerifier,
  WebBotAuthVerifierOptions,
} from "./web-bot-auth/verify.js";
export {
  createWebBotAuthVerifier,
  DEFAULT_WEB_BOT_AUTH_MAX_VALIDITY_SECONDS,
  SIGNATURE_AGENT_HEADER,
  signatureProfiles,
  WEB_BOT_AUTH_TAG,
} from "./web-bot-auth/verify.js";
