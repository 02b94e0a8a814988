/**
 * The SDK's entry point: an agent home (key, configuration, caches) and the clients built on it,
 * with URLs resolved the way the CLI resolves them.
 */
import { AttestorClient } from "./attestor.js";
import { DirectoryClient } from "./directory.js";
import { UsageError } from "./errors.js";
import type { HttpOptions } from "./http.js";
import { normaliseBaseUrl } from "./http.js";
import type { AgentIdentity } from "./identity.js";
import { ServiceClient, type ServiceClientOptions } from "./service.js";
import { AgentStore, defaultHome } from "./store.js";

export interface AgentOptions extends HttpOptions {
  /** The agent home; defaults to `PROTO_HOME`, else `~/.proto`. */
  home?: string;
  /** Attestor base URL; else `PROTO_ATTESTOR_URL`, else the saved configuration. */
  attestorUrl?: string;
  /** Directory base URL; else `PROTO_DIRECTORY_URL`, else the saved configuration. */
  directoryUrl?: string;
  /** Environment to read `PROTO_*` from (default `process.env`). */
  env?: NodeJS.ProcessEnv;
  /** Milliseconds since the epoch: signatures and the token cache. */
  now?: () => number;
}

export class Agent {
  readonly store: AgentStore;
  readonly identity: AgentIdentity;
  readonly #options: AgentOptions;
  readonly #attestors = new Map<string, AttestorClient>();

  private constructor(store: AgentStore, identity: AgentIdentity, options: AgentOptions) {
    this.store = store;
    this.identity = identity;
    this.#options = options;
  }

  /** Opens the home and loads the key (`KeyStoreError` `no_key` or `unsafe_permissions` otherwise). */
  static load(options: AgentOptions = {}): Agent {
    const store = new AgentStore(options.home ?? defaultHome(options.env));
    return new Agent(store, store.loadIdentity(), options);
  }

  /** Opens the home, generating a key when there is none. */
  static init(options: AgentOptions = {}): { agent: Agent; created: boolean } {
    const store = new AgentStore(options.home ?? defaultHome(options.env));
    const { identity, created } = store.initIdentity();
    return { agent: new Agent(store, identity, options), created };
  }

  get did(): string {
    return this.identity.did;
  }

  /** The attestor URL in effect: the argument, the option, `PROTO_ATTESTOR_URL`, the saved configuration. */
  attestorUrl(explicit?: string): string | undefined {
    const env = this.#options.env ?? process.env;
    const value =
      explicit ?? this.#options.attestorUrl ?? nonEmpty(env.PROTO_ATTESTOR_URL) ?? this.store.readConfig().attestor_url;
    return value === undefined ? undefined : normaliseBaseUrl(value, "attestor");
  }

  /** The directory URL in effect (same order, `PROTO_DIRECTORY_URL`). */
  directoryUrl(explicit?: string): string | undefined {
    const env = this.#options.env ?? process.env;
    const value =
      explicit ??
      this.#options.directoryUrl ??
      nonEmpty(env.PROTO_DIRECTORY_URL) ??
      this.store.readConfig().directory_url;
    return value === undefined ? undefined : normaliseBaseUrl(value, "directory");
  }

  /** The attestor client (one per URL, sharing the home's binding record and token cache). */
  attestor(explicit?: string): AttestorClient {
    const url = this.attestorUrl(explicit);
    if (url === undefined) {
      throw new UsageError(
        "no_attestor",
        "no attestor URL: pass --attestor URL, set PROTO_ATTESTOR_URL, or link once with `proto trust link --attestor URL`",
      );
    }
    let client = this.#attestors.get(url);
    if (client === undefined) {
      client = new AttestorClient({ ...this.#http(), url, identity: this.identity, store: this.store });
      this.#attestors.set(url, client);
    }
    return client;
  }

  directory(explicit?: string): DirectoryClient {
    const url = this.directoryUrl(explicit);
    if (url === undefined) {
      throw new UsageError("no_directory", "no directory URL: pass --directory URL or set PROTO_DIRECTORY_URL");
    }
    return new DirectoryClient({ ...this.#http(), url, store: this.store });
  }

  /**
   * Discovers the service at `url` and returns its signing client, with the configured attestor
   * attached (when there is one) for `attested_only` services.
   */
  async service(
    url: string | URL,
    options: { attestorUrl?: string; signal?: AbortSignal } = {},
  ): Promise<ServiceClient> {
    const attestorUrl = this.attestorUrl(options.attestorUrl);
    const clientOptions: ServiceClientOptions = {
      ...this.#http(),
      identity: this.identity,
      ...(attestorUrl === undefined ? {} : { attestor: this.attestor(attestorUrl) }),
    };
    return ServiceClient.connect(url, { ...clientOptions, ...(options.signal ? { signal: options.signal } : {}) });
  }

  #http(): HttpOptions & { now?: () => number } {
    const { fetch, timeoutMs, maxResponseBytes, now } = this.#options;
    return {
      ...(fetch ? { fetch } : {}),
      ...(timeoutMs ? { timeoutMs } : {}),
      ...(maxResponseBytes ? { maxResponseBytes } : {}),
      ...(now ? { now } : {}),
    };
  }
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value === "" ? undefined : value;
}
