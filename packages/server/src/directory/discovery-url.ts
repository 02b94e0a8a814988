import { invalidRequest } from "../platform/errors.js";

export const DISCOVERY_PATH = "/.well-known/proto";
export const PROOF_PATH = "/.well-known/proto-registry-proof";
const MAX_URL_LENGTH = 2048;

export interface DiscoveryLocation {
  /** `https://{host}/.well-known/proto`, host lowercase, default port dropped. */
  url: string;
  /** `host[:port]`, lowercase: the unit of authority over a listing. */
  host: string;
  proofUrl: string;
}

/**
 * A discovery URL is exactly `https://{host[:port]}/.well-known/proto`: no credentials, query,
 * fragment or other path (decisions §1).
 */
export function parseDiscoveryUrl(value: string): DiscoveryLocation {
  if (value.length > MAX_URL_LENGTH) throw invalidRequest("discovery_url is too long");
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw invalidRequest("discovery_url must be an absolute https URL");
  }
  if (url.protocol !== "https:") throw invalidRequest("discovery_url must use https");
  if (url.username !== "" || url.password !== "") throw invalidRequest("discovery_url must not carry credentials");
  if (value.includes("?") || value.includes("#")) {
    throw invalidRequest("discovery_url must not have a query or fragment");
  }
  if (url.pathname !== DISCOVERY_PATH) {
    throw invalidRequest(`discovery_url must be https://{host}${DISCOVERY_PATH}`);
  }
  const host = url.host.toLowerCase();
  return { url: `https://${host}${DISCOVERY_PATH}`, host, proofUrl: `https://${host}${PROOF_PATH}` };
}
