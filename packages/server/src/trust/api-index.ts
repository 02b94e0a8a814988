import { type ApiIndex, apiIndex } from "../platform/api-index.js";
import { APPROVALS_PATH, GRANTS_PATH } from "./authority/agent-routes.js";
import { OAUTH_PATHS } from "./oidc/metadata.js";
import { TOKEN_PATH } from "./token-route.js";

/** The attestor's answer to `curl {trust_url}/`: its API (spec `trust.md`), not its start page. */
export function trustApiIndex(publicUrl: string): ApiIndex {
  return apiIndex({
    name: "proto trust attestor",
    description:
      "Links agents to verified people and mints short-lived attestations. Errors are { error: { code, message } }.",
    publicUrl,
    paths: {
      jwks: "/.well-known/jwks.json",
      openid_configuration: "/.well-known/openid-configuration",
      link_start: "/v1/link/start",
      link_poll: "/v1/link/poll",
      token: TOKEN_PATH,
      binding: "/v1/bindings/{id}",
      grants: GRANTS_PATH,
      approvals: APPROVALS_PATH,
      approval: `${APPROVALS_PATH}/{approval_id}`,
      authorize: OAUTH_PATHS.authorization,
      oidc_token: OAUTH_PATHS.token,
    },
  });
}
