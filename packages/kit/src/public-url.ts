import { isLoopbackHostname } from "@proto/protocol";
import { KitConfigError } from "./config-error.js";

/**
 * How a developer gets https on this machine, in every refusal of an http URL: the development CA
 * of `npm run dev` certifies localhost, and agents trust it through NODE_EXTRA_CA_CERTS.
 */
export const LOCAL_HTTPS_RECIPE =
  "for local development, listen with https on localhost using the certificate that `npm run dev` (in the proto repository) keeps in data/dev-ca/ (localhost.pem and localhost-key.pem), set publicUrl to https://localhost:PORT, and run agents with NODE_EXTRA_CA_CERTS=data/dev-ca/ca.pem (that folder's CA)";

/**
 * The kit's `publicUrl`, refused unless an agent can call it. proto agents (the SDK and `proto
 * call`) reach services over https only and answer anything else with `insecure_url`, so a kit on
 * plain http would start, and every agent call would fail. `allowHttp` lets plain http through on
 * this machine only, for browsers and tests.
 */
export function checkPublicUrl(value: unknown, allowHttp: boolean): URL {
  let url: URL;
  try {
    url = new URL(String(value));
  } catch {
    throw new KitConfigError(
      "publicUrl",
      `publicUrl ${JSON.stringify(value)} is not an absolute URL: give the https origin agents sign (https://api.example.com)`,
    );
  }
  if (url.protocol === "https:") return url;
  const refusal = `publicUrl ${url.origin} must be https: proto agents reach services over https only (the SDK and \`proto call\` refuse ${url.protocol}// with insecure_url), so no agent could call this kit`;
  if (url.protocol !== "http:") throw new KitConfigError("publicUrl", `${refusal}. Use an https URL.`);
  if (!isLoopbackHostname(url.hostname)) {
    const note = allowHttp ? " (allowHttp accepts http on localhost, 127.0.0.0/8 and [::1] only)" : "";
    throw new KitConfigError(
      "publicUrl",
      `${refusal}. Use the https origin agents reach (behind a TLS proxy, the proxy's); ${LOCAL_HTTPS_RECIPE}${note}.`,
    );
  }
  if (allowHttp) return url;
  throw new KitConfigError(
    "publicUrl",
    `${refusal}. Use an https URL; ${LOCAL_HTTPS_RECIPE}. (Plain http on this machine, for browsers and tests only, needs allowHttp: true in createKit's options; agents still cannot call it.)`,
  );
}
