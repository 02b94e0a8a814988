/**
 * What a TLS failure means for the person running the agent, on one line. A certificate that
 * does not chain to a trusted authority is, in development, nearly always a local CA that Node was
 * not told about: the message says which variable fixes it.
 */

/** Node's (OpenSSL's) codes for "the certificate does not chain to a CA this process trusts". */
const UNTRUSTED = new Set([
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "CERT_UNTRUSTED",
]);

/** Where `npm run dev` keeps its development CA, relative to the repository. */
export const DEV_CA_PATH = "data/dev-ca/ca.pem";

const TLS_CODE = /^(CERT_|ERR_TLS_|UNABLE_TO_|DEPTH_ZERO_|SELF_SIGNED_|ERR_SSL_|HOSTNAME_MISMATCH)/;

/** Whether an error code is a TLS certificate or handshake failure. */
export function isTlsCode(code: string): boolean {
  return TLS_CODE.test(code);
}

/** Why the certificate was refused, and what to do about it when that is known. */
export function tlsReason(code: string): string {
  if (UNTRUSTED.has(code)) {
    return `the server's TLS certificate is not trusted (${code}); if it comes from a development CA, point NODE_EXTRA_CA_CERTS at its PEM (npm run dev: ${DEV_CA_PATH})`;
  }
  if (code === "CERT_HAS_EXPIRED") return `the server's TLS certificate has expired (${code})`;
  if (code === "CERT_NOT_YET_VALID") return `the server's TLS certificate is not valid yet (${code})`;
  if (code === "ERR_TLS_CERT_ALTNAME_INVALID" || code === "HOSTNAME_MISMATCH") {
    return `the server's TLS certificate does not name this host (${code})`;
  }
  return `TLS certificate not accepted (${code})`;
}
