import { randomUUID } from "node:crypto";
import type { SafeFetcher } from "@proto/protocol";
import type { Clock } from "../../platform/clock.js";
import { isSingleLine } from "../../platform/input-rules.js";
import type { Db } from "../store.js";
import { BoundedFetches, type FetchBounds, type Fetched } from "./bounded-fetches.js";
import type { OidcClient } from "./clients.js";

/**
 * An OAuth client as the provider knows it, wherever it came from: registered by the operator
 * (`TRUST_OIDC_CLIENTS`), registered by itself (RFC 7591), or named by the URL of its metadata
 * document (Client ID Metadata Documents, MCP 2025-11-25 and later).
 */
export interface OAuthClient {
  client_id: string;
  /** What the consent page and the account page call it. */
  client_name: string;
  redirect_uris: string[];
  /** Operator-registered relying parties: the `aud` of their id_tokens and their pairwise audience. */
  service_did?: string;
  source: "registered" | "dynamic" | "metadata_document";
}

export class ClientProblem extends Error {}

export const MAX_REDIRECT_URIS = 10;
const MAX_NAME_LENGTH = 100;
const MAX_URI_LENGTH = 2048;
/** CIMD documents are small; MCP suggests 5 KB as the most a server should read. */
export const MAX_METADATA_DOCUMENT_BYTES = 5 * 1024;
/** The longest a metadata document fetch may take. */
export const METADATA_FETCH_TIMEOUT_MS = 3000;
const METADATA_CACHE_ENTRIES = 1000;
const METADATA_CACHE_MIN_SECONDS = 60;
const METADATA_CACHE_DEFAULT_SECONDS = 300;
const METADATA_CACHE_MAX_SECONDS = 86400;
/** A dynamically registered client that nobody used for this long is forgotten. */
export const DYNAMIC_CLIENT_IDLE_SECONDS = 90 * 86400;

function isLoopbackHost(hostname: string): boolean {
  return hostname === "127.0.0.1" || hostname === "localhost" || hostname === "[::1]";
}

/** Whether every redirect URI is on the client's own machine (the consent page warns then). */
export function redirectsOnlyToLoopback(client: OAuthClient): boolean {
  return client.redirect_uris.every((uri) => isLoopbackHost(new URL(uri).hostname));
}

/**
 * A redirect URI a client may register: absolute, no fragment, no userinfo; https, a loopback
 * http address (native apps, RFC 8252 §7.3), or a private-use scheme such as `com.example.app:`
 * (RFC 8252 §7.1). Undefined when acceptable, else what is wrong.
 */
function redirectUriProblem(value: unknown): string | undefined {
  if (typeof value !== "string" || value.length === 0 || value.length > MAX_URI_LENGTH || !isSingleLine(value)) {
    return "each redirect URI must be a string of at most 2048 characters";
  }
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return `${JSON.stringify(value)} is not an absolute URI`;
  }
  if (url.hash !== "" || value.includes("#")) return "a redirect URI must not have a fragment";
  if (url.username !== "" || url.password !== "") return "a redirect URI must not carry credentials";
  if (url.protocol === "https:") return undefined;
  if (url.protocol === "http:") {
    return isLoopbackHost(url.hostname) ? undefined : "an http redirect URI must be a loopback address";
  }
  if (/^[a-z][a-z0-9+.-]*\.[a-z0-9+.-]+:$/.test(url.protocol)) return undefined;
  return `the scheme of ${JSON.stringify(value)} is not accepted (https, loopback http, or a reverse-DNS private scheme)`;
}

function clientName(value: unknown, fallback: string): string {
  if (typeof value !== "string") return fallback;
  const name = value.trim();
  if (name.length === 0 || name.length > MAX_NAME_LENGTH || !isSingleLine(name)) return fallback;
  return name;
}

/** Redirect URIs and a name out of client metadata (RFC 7591 §2), or a ClientProblem. */
function readMetadata(metadata: Record<string, unknown>, fallbackName: string) {
  const uris = metadata.redirect_uris;
  if (!Array.isArray(uris) || uris.length === 0 || uris.length > MAX_REDIRECT_URIS) {
    throw new ClientProblem(`redirect_uris must be a list of 1 to ${MAX_REDIRECT_URIS} URIs`);
  }
  for (const uri of uris) {
    const problem = redirectUriProblem(uri);
    if (problem !== undefined) throw new ClientProblem(problem);
  }
  const method = metadata.token_endpoint_auth_method;
  if (method !== undefined && method !== "none") {
    throw new ClientProblem("token_endpoint_auth_method must be none: this provider has public clients only");
  }
  const grants = metadata.grant_types;
  if (
    grants !== undefined &&
    (!Array.isArray(grants) || grants.some((g) => g !== "authorization_code" && g !== "refresh_token"))
  ) {
    throw new ClientProblem("grant_types may hold authorization_code and refresh_token only");
  }
  const responses = metadata.response_types;
  if (responses !== undefined && (!Array.isArray(responses) || responses.some((r) => r !== "code"))) {
    throw new ClientProblem("response_types may hold code only");
  }
  return { redirect_uris: uris as string[], client_name: clientName(metadata.client_name, fallbackName) };
}

/** Whether a client_id names a metadata document: an https URL with a path (CIMD §3). */
export function isMetadataDocumentId(clientId: string): boolean {
  if (!clientId.startsWith("https://") || clientId.length > MAX_URI_LENGTH) return false;
  try {
    const url = new URL(clientId);
    return (
      url.pathname !== "/" && url.hash === "" && url.username === "" && url.password === "" && !clientId.includes("#")
    );
  } catch {
    return false;
  }
}

/** How long a fetched document may be kept, from its Cache-Control (bounded either way). */
export function cacheSeconds(cacheControl: string | undefined): number {
  if (cacheControl === undefined) return METADATA_CACHE_DEFAULT_SECONDS;
  if (/(^|,)\s*(no-store|no-cache)\s*(,|$)/i.test(cacheControl)) return METADATA_CACHE_MIN_SECONDS;
  const maxAge = /(?:^|,)\s*max-age\s*=\s*(\d{1,9})\s*(?:,|$)/i.exec(cacheControl);
  const seconds = maxAge === null ? METADATA_CACHE_DEFAULT_SECONDS : Number(maxAge[1]);
  return Math.min(METADATA_CACHE_MAX_SECONDS, Math.max(METADATA_CACHE_MIN_SECONDS, seconds));
}

export interface ClientRegistryOptions {
  db: Db;
  clock: Clock;
  registered: OidcClient[];
  /** Fetches metadata documents: public addresses only, no redirects, bounded. */
  fetcher: SafeFetcher;
  /** What the metadata documents that requests name may cost (the fetcher's timeout is the busy Retry-After). */
  bounds: Omit<FetchBounds, "busyRetryAfterSeconds">;
}

/** Finds the client a request names, and registers new ones. */
export class ClientRegistry {
  readonly #options: ClientRegistryOptions;
  readonly #registered: Map<string, OAuthClient>;
  /** Metadata documents by URL: kept for their cache lifetime, failures briefly, fetches bounded. */
  readonly #documents: BoundedFetches<OAuthClient>;

  constructor(options: ClientRegistryOptions) {
    this.#options = options;
    this.#documents = new BoundedFetches({
      clock: options.clock,
      bounds: { ...options.bounds, busyRetryAfterSeconds: Math.ceil(METADATA_FETCH_TIMEOUT_MS / 1000) },
      maxEntries: METADATA_CACHE_ENTRIES,
      load: (url) => this.#load(url),
    });
    this.#registered = new Map(
      options.registered.map((c) => [
        c.client_id,
        {
          client_id: c.client_id,
          client_name: c.service_did,
          redirect_uris: c.redirect_uris,
          service_did: c.service_did,
          source: "registered" as const,
        },
      ]),
    );
  }

  /**
   * The client `clientId` names: registered, dynamic, or a metadata document fetched (and kept
   * for its cache lifetime within bounds) on behalf of the request from `address`. Undefined for
   * an unknown id; a ClientProblem when a metadata document cannot be had or is not acceptable;
   * FetchRefused when fetching it now would exceed the bounds.
   */
  async find(clientId: string, address: string): Promise<OAuthClient | undefined> {
    const registered = this.#registered.get(clientId);
    if (registered !== undefined) return registered;
    if (isMetadataDocumentId(clientId)) return this.#documents.get(clientId, address);
    if (!clientId.startsWith("dyn_") || clientId.length > 64) return undefined;
    const row = await this.#options.db
      .selectFrom("trust_oauth_clients")
      .selectAll()
      .where("client_id", "=", clientId)
      .executeTakeFirst();
    const now = this.#options.clock.now();
    if (row === undefined || Number(row.last_used_at) + DYNAMIC_CLIENT_IDLE_SECONDS * 1000 <= now) return undefined;
    return {
      client_id: row.client_id,
      client_name: row.client_name,
      redirect_uris: JSON.parse(row.redirect_uris) as string[],
      source: "dynamic",
    };
  }

  /** Notes that a dynamic client was used (it is forgotten after a long idle time). */
  async touch(client: OAuthClient): Promise<void> {
    if (client.source !== "dynamic") return;
    await this.#options.db
      .updateTable("trust_oauth_clients")
      .set({ last_used_at: this.#options.clock.now() })
      .where("client_id", "=", client.client_id)
      .execute();
  }

  /** Forgets dynamically registered clients nobody used for DYNAMIC_CLIENT_IDLE_SECONDS. */
  async purgeIdle(): Promise<void> {
    const before = this.#options.clock.now() - DYNAMIC_CLIENT_IDLE_SECONDS * 1000;
    await this.#options.db.deleteFrom("trust_oauth_clients").where("last_used_at", "<", before).execute();
  }

  /** RFC 7591 registration: a public client with exact redirect URIs. Throws ClientProblem. */
  async register(metadata: Record<string, unknown>): Promise<OAuthClient & { issuedAt: number }> {
    const read = readMetadata(metadata, "An application");
    const clientId = `dyn_${randomUUID().replaceAll("-", "")}`;
    const now = this.#options.clock.now();
    await this.#options.db
      .insertInto("trust_oauth_clients")
      .values({
        client_id: clientId,
        client_name: read.client_name,
        redirect_uris: JSON.stringify(read.redirect_uris),
        created_at: now,
        last_used_at: now,
      })
      .execute();
    return { client_id: clientId, ...read, source: "dynamic", issuedAt: Math.floor(now / 1000) };
  }

  async #load(url: string): Promise<Fetched<OAuthClient>> {
    let response: Awaited<ReturnType<SafeFetcher["get"]>>;
    try {
      response = await this.#options.fetcher.get(url, { accept: "application/json" });
    } catch {
      throw new ClientProblem("the client's metadata document could not be fetched");
    }
    if (response.status !== 200) {
      throw new ClientProblem(`the client's metadata document answered ${response.status}`);
    }
    if (response.body.length > MAX_METADATA_DOCUMENT_BYTES) {
      throw new ClientProblem("the client's metadata document is larger than 5 KB");
    }
    let metadata: unknown;
    try {
      metadata = JSON.parse(response.body.toString("utf8"));
    } catch {
      throw new ClientProblem("the client's metadata document is not JSON");
    }
    if (typeof metadata !== "object" || metadata === null || Array.isArray(metadata)) {
      throw new ClientProblem("the client's metadata document is not a JSON object");
    }
    const document = metadata as Record<string, unknown>;
    // CIMD §4.1: the document names itself; anything else may be a copy of another client's.
    if (document.client_id !== url) {
      throw new ClientProblem("the client's metadata document has a client_id other than its own URL");
    }
    if (document.client_secret !== undefined) throw new ClientProblem("a metadata document must not hold a secret");
    const read = readMetadata(document, new URL(url).host);
    const client: OAuthClient = { client_id: url, ...read, source: "metadata_document" };
    return { value: client, keepSeconds: cacheSeconds(response.headers["cache-control"]) };
  }
}
