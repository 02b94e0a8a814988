import { type ApiIndex, apiIndex } from "../platform/api-index.js";
import { DISCOVERY_SCHEMA_PATH } from "./routes.js";

/** The directory's answer to `curl {directory_url}/`: its API (spec `directory.md`), not its browse page. */
export function directoryApiIndex(publicUrl: string): ApiIndex {
  return apiIndex({
    name: "proto listing directory",
    description:
      "Services prove control of their host and list themselves; anyone reads and mirrors the listings. Errors are { error: { code, message } }.",
    publicUrl,
    paths: {
      listings: "/v1/listings",
      listing: "/v1/listings/{service_did}",
      challenge: "/v1/listings/challenge",
      sitemap: "/sitemap.xml",
      discovery_schema: DISCOVERY_SCHEMA_PATH,
    },
  });
}
