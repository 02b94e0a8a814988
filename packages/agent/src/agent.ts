/**
 * The SDK's entry point: an agent home (key, configuration, caches) and the clients built on it,
 * with URLs resolved the way the CLI resolves them.
 */
import { KEY_DIRECTORY_PATH, type SignatureAgentForm } from "@proto/protocol";
import { AttestorClient } from "./attestor.js";
import { Attestors } from "./attestors.js";
import type { AuthorityError } from "./authority.js";
import { DirectoryClient } from "./directory.js";
import { UsageError } from "./errors.js";
import type { HttpOptions } from "./http.js";
import { normaliseBaseUrl } from "./http.js";
import type { AgentIdentity, WebBotAuthMode, WebBotAuthSigning } from "./identity.js";
import { ServiceClient, type ServiceClientOptions } from "./service.js";
import { AgentStore, type BindingRecord, defaultHome } from "./store.js";

export interface AgentOptions extends HttpOptions {
  /** The agent home; defaults to `PROTO_HOME`, else `~/.proto`. */
  home?: string;
  /** Attestor base URL (or the iss of a linked one); else `PROTO_ATTESTOR_URL`, else the saved configuration. */
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

  /**
   * Opens the home and loads the key (`KeyStoreError` `no_key` or `unsafe_permissions` otherwise).
   * Files of our older layout are migrated to upstream's first.
   */
  static load(options: AgentOptions = {}): Agent {
    const store = new AgentStore(options.home ?? defaultHome(options.env));
    store.migrate();
    return new Agent(store, store.loadIdentity(), options);
  }

  /** Opens the home (migrated as by `load`), generating a key when there is none. */
  static init(options: AgentOptions = {}): { agent: Agent; created: boolean } {
    const store = new AgentStore(options.home ?? defaultHome(options.env));
    store.migrate();
    const { identity, created } = store.initIdentity();
    return { agent: new Agent(store, identity, options), created };
  }

  get did(): string {
    return this.identity.did;
  }

  /**
   * The attestor URL in effect: the argument, the option, `PROTO_ATTESTOR_URL`, the saved
   * configuration, else the first attestor this key is linked to (a home linked by another
   * client). Each may be a URL or the iss of a linked attestor (`unknown_attestor` otherwise).
   */
  attestorUrl(explicit?: string): string | undefined {
    const env = this.#options.env ?? process.env;
    const configured =
      this.#options.attestorUrl ?? nonEmpty(env.PROTO_ATTESTOR_URL) ?? this.store.readConfig().attestor_url;
    const value = explicit ?? configured;
    if (value === undefined) return this.bindings()[0]?.attestor_url;
    if (isUrl(value)) return normaliseBaseUrl(value, "attestor");
    // An iss: the configured attestor when it has it, else an active binding with it.
    const bindings = this.bindings();
    const byIss = bindings.filter((b) => b.iss === value);
    const preferred = configured !== undefined && isUrl(configured) ? normaliseBaseUrl(configured, "attestor") : "";
    const found =
      byIss.find((b) => b.attestor_url === preferred) ?? byIss.find((b) => b.state === "active") ?? byIss[0];
    if (found === undefined) {
      const known = bindings.flatMap((b) => (b.iss === undefined ? [] : [b.iss]));
      throw new UsageError(
        "unknown_attestor",
        `no linked attestor has iss ${JSON.stringify(value)} (${
          known.length === 0 ? "no iss learned yet" : `linked: ${[...new Set(known)].join(", ")}`
        }): give its URL`,
      );
    }
    return found.attestor_url;
  }

  /** The bindings of this key, one per attestor, as stored (bindings of earlier keys left out). */
  bindings(): BindingRecord[] {
    return this.store.listBindings().filter((b) => b.agent_did === this.did);
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

  /**
   * The attestor to ask for more authority after a service's refusal: the one the refusal names
   * when this agent is linked there, else `fallback` (the attestor whose token was refused), else
   * the default one. A service's word alone never sends the agent's signed requests to an
   * attestor it is not linked to.
   */
  attestorFor(refusal: Pick<AuthorityError, "attestor">, fallback?: string): AttestorClient {
    const named = refusal.attestor;
    const linked = (url: string) => this.bindings().some((b) => b.attestor_url === url && b.state === "active");
    if (named !== undefined && linked(named)) return this.attestor(named);
    return this.attestor(fallback);
  }

  directory(explicit?: string): DirectoryClient {
    const url = this.directoryUrl(explicit);
    if (url === undefined) {
      throw new UsageError("no_directory", "no directory URL: pass --directory URL or set PROTO_DIRECTORY_URL");
    }
    return new DirectoryClient({ ...this.#http(), url, store: this.store });
  }

  /**
   * Web Bot Auth signing in effect: `mode` (else `PROTO_WEB_BOT_AUTH`: `both`, `single` or `off`,
   * default off), naming `signatureAgent` (else `PROTO_SIGNATURE_AGENT`, else the key directory of
   * the attestor in effect, where the person publishes the agent's key from `/account`), in the
   * `Signature-Agent` form given (default the working group's dictionary).
   */
  webBotAuth(
    mode?: WebBotAuthMode | "off",
    explicitAttestor?: string,
    signatureAgent?: string,
    form?: SignatureAgentForm,
  ): WebBotAuthSigning | undefined {
    const env = this.#options.env ?? process.env;
    const chosen = mode ?? nonEmpty(env.PROTO_WEB_BOT_AUTH) ?? "off";
    if (chosen === "off") return undefined;
    if (chosen !== "both" && chosen !== "single") {
      throw new UsageError(
        "invalid_argument",
        `Web Bot Auth mode must be both, single or off, got ${JSON.stringify(chosen)}`,
      );
    }
    const agentUrl = signatureAgent ?? nonEmpty(env.PROTO_SIGNATURE_AGENT);
    if (agentUrl !== undefined) {
      if (!isUrl(agentUrl) || new URL(agentUrl).protocol !== "https:") {
        throw new UsageError(
          "invalid_argument",
          `the Signature-Agent must be an https URL, got ${JSON.stringify(agentUrl)}`,
        );
      }
      return { signatureAgent: agentUrl, mode: chosen, ...(form === undefined ? {} : { signatureAgentForm: form }) };
    }
    const attestor = this.attestorUrl(explicitAttestor);
    if (attestor === undefined) {
      throw new UsageError(
        "attestation_unavailable",
        "Web Bot Auth names a key directory: link an attestor first (`proto trust link`) or give --signature-agent",
      );
    }
    if (!attestor.startsWith("https://")) {
      throw new UsageError(
        "invalid_argument",
        `Web Bot Auth verifiers fetch key directories over https only, and the attestor is ${attestor}: give --signature-agent`,
      );
    }
    return {
      signatureAgent: `${attestor}${KEY_DIRECTORY_PATH}`,
      mode: chosen,
      ...(form === undefined ? {} : { signatureAgentForm: form }),
    };
  }

  /**
   * The agent's attestors, choosing per service the one it accepts (`explicit`, a URL or the iss
   * of a linked attestor, overrides); undefined when there is no attestor at all.
   */
  attestors(explicit?: string): Attestors | undefined {
    const explicitUrl = explicit === undefined ? undefined : this.attestorUrl(explicit);
    const preferred = this.attestorUrl();
    if (explicitUrl === undefined && preferred === undefined) return undefined;
    return new Attestors({
      identity: this.identity,
      store: this.store,
      client: (url) => this.attestor(url),
      preferred,
      explicit: explicitUrl,
      ...(this.#options.now ? { now: this.#options.now } : {}),
    });
  }

  /**
   * Discovers the service at `url` and returns its signing client, with the agent's attestors
   * attached (when there are any) for `attested_only` services: each service gets a token from the
   * attestor it accepts, or from `attestorUrl` (a URL or an iss) when given.
   */
  async service(
    url: string | URL,
    options: { attestorUrl?: string; signal?: AbortSignal; webBotAuth?: WebBotAuthSigning } = {},
  ): Promise<ServiceClient> {
    const attestors = this.attestors(options.attestorUrl);
    const webBotAuth = options.webBotAuth ?? this.webBotAuth(undefined, options.attestorUrl);
    const clientOptions: ServiceClientOptions = {
      ...this.#http(),
      identity: this.identity,
      ...(attestors === undefined ? {} : { attestor: attestors }),
      ...(webBotAuth === undefined ? {} : { webBotAuth }),
    };
    return ServiceClient.connect(url, { ...clientOptions, ...(options.signal ? { signal: options.signal } : {}) });
  }

  /**
   * The HTTP options the agent was opened with (`fetch`, `timeoutMs`, `maxResponseBytes`, `now`),
   * for clients built beside it (the MCP transport) to reach the same hosts the same way.
   */
  httpOptions(): HttpOptions & { now?: () => number } {
    return this.#http();
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

const isUrl = (value: string) => /^[a-z][a-z0-9+.-]*:\/\//i.test(value);

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value === "" ? undefined : value;
}
