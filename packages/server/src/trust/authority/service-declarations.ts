/**
 * What a service declares about its permissions, read from its discovery document: the attestor
 * needs the descriptions to show people, the defaults to know what a grant starts from, and which
 * permissions need a passkey. Fetched SSRF-safe and bounded like client metadata documents.
 */

import type { SafeFetcher } from "@proto/protocol";
import { type DiscoveryPermissions, didWebHost, PROTO_VERSION, validateDiscoveryPermissions } from "@proto/protocol";
import type { Clock } from "../../platform/clock.js";
import { BoundedFetches, type FetchBounds, type Fetched } from "../oidc/bounded-fetches.js";
import { cacheSeconds } from "../oidc/client-registry.js";

export const MAX_DISCOVERY_DOCUMENT_BYTES = 64 * 1024;
export const DISCOVERY_FETCH_TIMEOUT_MS = 3000;
const DECLARATION_CACHE_ENTRIES = 1000;

/** A service's declaration, as the attestor keeps it. */
export interface ServiceDeclaration {
  /** The origin the document was read from. */
  serviceUrl: string;
  serviceDid: string;
  /** The declared permissions ({} when the service declares none). */
  permissions: DiscoveryPermissions;
}

/** The service's document could not be had or is not acceptable; the message says why. */
export class DeclarationProblem extends Error {}

/** The document names another service than the one asked about: the asker's mistake, not an outage. */
export class AudienceMismatch extends DeclarationProblem {}

/** The declared default permissions, in declaration order. */
export function defaultPermissions(declaration: ServiceDeclaration): string[] {
  return Object.entries(declaration.permissions)
    .filter(([, permission]) => permission.default === true)
    .map(([name]) => name);
}

/**
 * The origin whose `/.well-known/proto` describes `aud`: `serviceUrl` when given (an https origin,
 * or http on a loopback host outside production), else https plus the did:web's host. Undefined
 * when there is none (a did:key service names no place).
 */
export function serviceOrigin(aud: string, serviceUrl: string | undefined, production: boolean): string | undefined {
  if (serviceUrl === undefined) {
    const host = didWebHost(aud);
    return host === undefined ? undefined : `https://${host}`;
  }
  let url: URL;
  try {
    url = new URL(serviceUrl);
  } catch {
    return undefined;
  }
  if (url.username !== "" || url.password !== "" || url.search !== "" || url.hash !== "") return undefined;
  if (url.pathname !== "/" && url.pathname !== "") return undefined;
  const loopback = ["localhost", "127.0.0.1", "[::1]"].includes(url.hostname);
  if (url.protocol === "https:" || (url.protocol === "http:" && (loopback || !production))) return url.origin;
  return undefined;
}

export interface ServiceDeclarationsOptions {
  clock: Clock;
  fetcher: SafeFetcher;
  bounds: Omit<FetchBounds, "busyRetryAfterSeconds">;
}

/** Services' declarations by origin, kept for their cache lifetime, failures briefly. */
export class ServiceDeclarations {
  readonly #documents: BoundedFetches<ServiceDeclaration>;
  readonly #fetcher: SafeFetcher;

  constructor(options: ServiceDeclarationsOptions) {
    this.#fetcher = options.fetcher;
    this.#documents = new BoundedFetches({
      clock: options.clock,
      bounds: { ...options.bounds, busyRetryAfterSeconds: Math.ceil(DISCOVERY_FETCH_TIMEOUT_MS / 1000) },
      maxEntries: DECLARATION_CACHE_ENTRIES,
      load: (url) => this.#load(url),
    });
  }

  /**
   * The declaration of the service at `origin`, which must call itself `aud`. Throws
   * DeclarationProblem, or FetchRefused when fetching now would exceed the bounds.
   */
  async of(origin: string, aud: string, address: string): Promise<ServiceDeclaration> {
    const declaration = await this.#documents.get(`${origin}/.well-known/proto`, address);
    if (declaration.serviceDid !== aud) {
      throw new AudienceMismatch(`the service at ${origin} calls itself ${declaration.serviceDid}, not ${aud}`);
    }
    return declaration;
  }

  async #load(url: string): Promise<Fetched<ServiceDeclaration>> {
    let response: Awaited<ReturnType<SafeFetcher["get"]>>;
    try {
      response = await this.#fetcher.get(url, { accept: "application/json" });
    } catch {
      throw new DeclarationProblem("the service's discovery document could not be fetched");
    }
    if (response.status !== 200) {
      throw new DeclarationProblem(`the service's discovery document answered ${response.status}`);
    }
    let document: unknown;
    try {
      document = JSON.parse(response.body.toString("utf8"));
    } catch {
      throw new DeclarationProblem("the service's discovery document is not JSON");
    }
    if (typeof document !== "object" || document === null || Array.isArray(document)) {
      throw new DeclarationProblem("the service's discovery document is not a JSON object");
    }
    const { service_did: serviceDid, proto_version: version, permissions } = document as Record<string, unknown>;
    if (typeof serviceDid !== "string" || serviceDid.length > 2048) {
      throw new DeclarationProblem("the service's discovery document names no service_did");
    }
    if (version !== PROTO_VERSION)
      throw new DeclarationProblem("the service's discovery document is of another version");
    let declared: DiscoveryPermissions = {};
    if (permissions !== undefined) {
      const checked = validateDiscoveryPermissions(permissions);
      if (!checked.valid) {
        const first = checked.errors[0];
        throw new DeclarationProblem(`the service's permissions are invalid: ${first?.message ?? "unreadable"}`);
      }
      declared = checked.permissions;
    }
    const value: ServiceDeclaration = { serviceUrl: new URL(url).origin, serviceDid, permissions: declared };
    return { value, keepSeconds: cacheSeconds(response.headers["cache-control"]) };
  }
}
