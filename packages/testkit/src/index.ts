export {
  addVirtualAuthenticator,
  CHROMIUM_PATH,
  launchChromium,
  lookAt,
  NO_PASSKEY_AUTOFILL,
  VIEWPORTS,
  type VirtualAuthenticator,
} from "./browser.js";
export type { IssuedCert, IssueOptions, TestCA, TestCAOptions } from "./ca.js";
export { createTestCA } from "./ca.js";
export type { TestDatabase } from "./database.js";
export { createTestDatabase, TEST_POSTGRES_URL } from "./database.js";
export { field, link, unescapeHtml } from "./html.js";
export type { TestFetch, TestFetchOptions } from "./http-client.js";
export { createTestAgent, parseResolveEntries, testFetch } from "./http-client.js";
export type {
  HttpsHost,
  HttpsHostOptions,
  MisbehaveOptions,
  Misbehaviour,
  RecordedRequest,
  ResponseSpec,
  RouteHandler,
} from "./https-host.js";
export { DISCOVERY_PATH, PROOF_PATH, startHttpsHost } from "./https-host.js";
export { freePort, quietStream } from "./local.js";
export type { HostileRedirect } from "./redirects.js";
export { hasRawControlCharacter, hostileRedirects } from "./redirects.js";
export type { Sentinel, SentinelOptions } from "./sentinel.js";
export { startSentinel } from "./sentinel.js";
export type { TcpProxy } from "./tcp-proxy.js";
export { startTcpProxy } from "./tcp-proxy.js";
export type { VectorFile, VectorFolder } from "./vectors.js";
export { loadVectorFile, loadVectors, vectorsDir } from "./vectors.js";
