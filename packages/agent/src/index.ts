export type { AttestationSource } from "./accepted.js";
export { acceptedAttestors, claimsOf, issuerOf } from "./accepted.js";
export type { Account, AccountState, Invitation, OwnerRecipient, SignedUpAccount } from "./account.js";
export { getAccount, inviteOwner, signUp } from "./account.js";
export type { AgentOptions } from "./agent.js";
export { Agent } from "./agent.js";
export type { Approval, ApprovalRequestOptions, ApprovalStatus, HeldGrant } from "./approvals.js";
export { MAX_REASON_LENGTH } from "./approvals.js";
export type {
  Attestation,
  AttestorClientOptions,
  LinkPhase,
  LinkPollOptions,
  LinkPollResult,
  LinkRequest,
  LinkStartOptions,
  WaitForApprovalOptions,
} from "./attestor.js";
export { AttestorClient } from "./attestor.js";
export type { AttestorsOptions } from "./attestors.js";
export { Attestors } from "./attestors.js";
export type { AuthorityRefusal, SpendShortfall, TokenExplanation } from "./authority.js";
export { AuthorityError, authorityRefusal, explainToken } from "./authority.js";
export type {
  Challenge,
  DirectoryClientOptions,
  Listing,
  ListingFields,
  ListingPage,
  ListingStatus,
  ListQuery,
  RegisterOptions,
  Session,
  SubmitResult,
} from "./directory.js";
export {
  checkDiscoveryUrl,
  checkListingFields,
  DirectoryClient,
  PROOF_PATH,
  proofInstructions,
  writeProofFile,
} from "./directory.js";
export type { ErrorKind, ServerErrorInit } from "./errors.js";
export {
  AgentError,
  AttestorError,
  AuthError,
  DirectoryError,
  DiscoveryError,
  KeyStoreError,
  NetworkError,
  ServerError,
  UsageError,
} from "./errors.js";
export type { KeyFile, RawBinding, TrustFile } from "./home-layout.js";
export type { FetchFunction, HttpOptions, HttpRequest, HttpResponse } from "./http.js";
export {
  DEFAULT_MAX_RESPONSE_BYTES,
  DEFAULT_TIMEOUT_MS,
  DISCOVERY_MAX_BYTES,
  HttpClient,
  normaliseBaseUrl,
} from "./http.js";
export type {
  PrivateKeyExport,
  PublicKeyExport,
  RequestSignOptions,
  WebBotAuthMode,
  WebBotAuthSigning,
} from "./identity.js";
export { AgentIdentity } from "./identity.js";
export type { ConnectMcpOptions } from "./mcp.js";
export { checkMcpUrl, connectMcp, mcpError } from "./mcp.js";
export type { McpAuthProviderOptions } from "./mcp-auth.js";
export {
  AgentMcpAuthProvider,
  ASSERTION_LIFETIME_SECONDS,
  createMcpAuthProvider,
  JWT_BEARER_GRANT,
} from "./mcp-auth.js";
export type { McpTarget } from "./mcp-endpoint.js";
export { findMcpEndpoint } from "./mcp-endpoint.js";
export type {
  ResolvedEndpoints,
  SendOptions,
  ServiceClientOptions,
  ServiceDiscovery,
  ServiceResponse,
} from "./service.js";
export { DISCOVERY_PATH, discoverService, ServiceClient, serviceOrigin } from "./service.js";
export type {
  AgentConfig,
  BindingRecord,
  PendingChallenge,
  RotationResult,
  StoredSession,
} from "./store.js";
export { AgentStore, assertPrivateFile, defaultHome } from "./store.js";
export type { CachedToken, TokenCacheOptions, TokenCachePersistence } from "./token-cache.js";
export { TOKEN_REFRESH_MARGIN_SECONDS, TokenCache } from "./token-cache.js";
