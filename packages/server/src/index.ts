export type { DirectoryApp, DirectoryAppOptions } from "./directory/app.js";
export { buildDirectoryApp } from "./directory/app.js";
export type { DirectoryConfig } from "./directory/config.js";
export { readDirectoryConfig } from "./directory/config.js";
export { ConfigError } from "./platform/env.js";
export { buildTrustApp } from "./trust/app.js";
export { readTrustConfig } from "./trust/config.js";
