import { isDidSyntax } from "@proto/protocol";

/** A relying party registered out of band (`TRUST_OIDC_CLIENTS`). */
export interface OidcClient {
  client_id: string;
  /** The `aud` of its id_tokens and the input of its pairwise `sub` (= its attestation audience). */
  service_did: string;
  redirect_uris: string[];
}

/**
 * Parses `TRUST_OIDC_CLIENTS`: a JSON list of `{client_id, service_did, redirect_uris}`. Every
 * problem is reported, since a wrong `service_did` silently lands people in empty accounts.
 */
export function parseOidcClients(
  value: string | undefined,
  production: boolean,
): { clients: OidcClient[]; problems: string[] } {
  if (value === undefined) return { clients: [], problems: [] };
  const problems: string[] = [];
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch {
    return {
      clients: [],
      problems: ["TRUST_OIDC_CLIENTS must be JSON: a list of {client_id, service_did, redirect_uris}"],
    };
  }
  if (!Array.isArray(parsed)) {
    return { clients: [], problems: ["TRUST_OIDC_CLIENTS must be a JSON list"] };
  }
  const clients: OidcClient[] = [];
  const seen = new Set<string>();
  parsed.forEach((entry: unknown, index) => {
    const where = `TRUST_OIDC_CLIENTS[${index}]`;
    if (typeof entry !== "object" || entry === null) {
      problems.push(`${where} must be an object`);
      return;
    }
    const { client_id, service_did, redirect_uris } = entry as Record<string, unknown>;
    if (typeof client_id !== "string" || client_id.length === 0 || client_id.length > 512) {
      problems.push(`${where}.client_id must be a non-empty string`);
      return;
    }
    if (seen.has(client_id)) problems.push(`${where}.client_id ${client_id} is registered twice`);
    seen.add(client_id);
    if (typeof service_did !== "string" || !/^did:(web|key):.+/.test(service_did) || !isDidSyntax(service_did)) {
      problems.push(`${where}.service_did must be the service's did:web or did:key`);
      return;
    }
    if (!Array.isArray(redirect_uris) || redirect_uris.length === 0) {
      problems.push(`${where}.redirect_uris must be a non-empty list`);
      return;
    }
    const uris: string[] = [];
    for (const uri of redirect_uris) {
      let url: URL | undefined;
      try {
        url = typeof uri === "string" ? new URL(uri) : undefined;
      } catch {
        url = undefined;
      }
      const loopback = url !== undefined && (url.hostname === "127.0.0.1" || url.hostname === "localhost");
      if (
        url === undefined ||
        url.hash !== "" ||
        !(url.protocol === "https:" || (url.protocol === "http:" && (loopback || !production)))
      ) {
        problems.push(
          `${where}.redirect_uris: ${JSON.stringify(uri)} must be an absolute https URL without a fragment`,
        );
        continue;
      }
      uris.push(uri as string);
    }
    clients.push({ client_id, service_did, redirect_uris: uris });
  });
  return { clients, problems };
}
