export { checkConfig } from "./check.js";
export { GateConfigError, loadConfigFile, parseConfig } from "./config.js";
export type { GateConfig, GateMcpPath, GateRoute, RouteAccess } from "./config-types.js";
export { UPSTREAM_RETRY_AFTER_SECONDS } from "./errors.js";
export type { Gate, GateOptions } from "./gate.js";
export { createGate } from "./gate.js";
export { IDENTITY_HEADERS, IDENTITY_PREFIX, signIdentity } from "./identity.js";
export { initTemplate } from "./init-template.js";
