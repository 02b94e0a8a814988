/**
 * The agent's attestors (upstream rule 10): one binding per attestor, and for each service the
 * one whose `iss` the service's `billing.accepted_attestors` lists.
 */
import { type AttestationSource, accepts, notAccepted } from "./accepted.js";
import type { Attestation, AttestorClient } from "./attestor.js";
import { AuthError } from "./errors.js";
import type { AgentIdentity } from "./identity.js";
import type { AgentStore, BindingRecord } from "./store.js";

export interface AttestorsOptions {
  identity: AgentIdentity;
  /** Holds the bindings, read at every choice (a mint may have taught an iss meanwhile). */
  store: AgentStore;
  /** The client of the attestor at a URL (one per URL, sharing the store's binding and token cache). */
  client: (url: string) => AttestorClient;
  /** The attestor tried first among those that fit (the configured one). */
  preferred?: string | undefined;
  /** `--attestor`: this attestor and no other; its tokens still go only to services that accept them. */
  explicit?: string | undefined;
  /** Milliseconds since the epoch: whether a binding has lapsed. */
  now?: () => number;
}

export class Attestors implements AttestationSource {
  readonly identity: AgentIdentity;
  readonly preferred: string | undefined;
  readonly explicit: string | undefined;
  readonly #store: AgentStore;
  readonly #client: (url: string) => AttestorClient;
  readonly #now: () => number;

  constructor(options: AttestorsOptions) {
    this.identity = options.identity;
    this.preferred = options.preferred;
    this.explicit = options.explicit;
    this.#store = options.store;
    this.#client = options.client;
    this.#now = options.now ?? Date.now;
  }

  /**
   * The bindings of the current key, in the order they are tried: usable ones (active, not
   * lapsed) before the others, then the preferred attestor first, then as stored. Bindings of an
   * earlier key are orphaned and never used.
   */
  bindings(): BindingRecord[] {
    const now = this.#now() / 1000;
    const rank = (b: BindingRecord) =>
      (b.state === "active" && (b.binding_expires_at === 0 || b.binding_expires_at > now) ? 0 : 2) +
      (b.attestor_url === this.preferred ? 0 : 1);
    return this.#store
      .listBindings()
      .filter((b) => b.agent_did === this.identity.did)
      .map((binding, index) => ({ binding, index }))
      .sort((a, b) => rank(a.binding) - rank(b.binding) || a.index - b.index)
      .map(({ binding }) => binding);
  }

  /**
   * An attestation for the service `aud`. With `explicit`, from that attestor. Otherwise from the
   * first binding whose learned iss `accepted` lists; failing that, bindings whose iss is not
   * learned yet mint in turn until one's token fits (the others' tokens are not sent). None fits:
   * `attestor_not_accepted`, naming the service's list and the agent's, before any mint when every
   * iss is known. A service that lists nothing takes the first binding's.
   */
  async attestationFor(
    aud: string,
    accepted: readonly string[] | undefined,
    options: { fresh?: boolean; signal?: AbortSignal } = {},
  ): Promise<Attestation> {
    if (this.explicit !== undefined) return this.#client(this.explicit).attestationFor(aud, accepted, options);
    const bindings = this.bindings();
    // Not linked at all: the configured attestor answers for itself (`unauthorized`).
    const unlinked = bindings.length === 0 && this.preferred !== undefined ? [this.preferred] : [];
    if (accepted === undefined) {
      const url = bindings[0]?.attestor_url ?? unlinked[0];
      if (url === undefined) throw noAttestor();
      return this.#client(url).attestationFor(aud, undefined, options);
    }
    const fitting = bindings.find((b) => b.iss !== undefined && accepted.includes(b.iss));
    if (fitting !== undefined) return this.#client(fitting.attestor_url).attestationFor(aud, accepted, options);
    const unknown = [...bindings.filter((b) => b.iss === undefined).map((b) => b.attestor_url), ...unlinked];
    for (const url of unknown) {
      const token = await this.#client(url).token(aud, options);
      if (accepts(accepted, token.iss)) return token;
    }
    if (bindings.length === 0 && unknown.length === 0) throw noAttestor();
    throw notAccepted(aud, accepted, this.bindings());
  }
}

function noAttestor(): AuthError {
  return new AuthError(
    "attestation_unavailable",
    "this agent is linked to no attestor: run `proto trust link --attestor URL`",
  );
}
