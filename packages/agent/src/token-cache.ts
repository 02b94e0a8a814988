/** Attestation tokens per audience, handed out only while they have more than a minute to live. */

export interface CachedToken {
  /** `{trust_url}` of the attestor that minted it. */
  attestor_url: string;
  /** The agent DID (`sub`). */
  agent_did: string;
  /** The audience service DID. */
  aud: string;
  jwt: string;
  /** Unix seconds. */
  expires_at: number;
  verification: string;
  /** Unix seconds, by the agent's clock. */
  minted_at: number;
}

/** A cached token is not handed out within this many seconds of its `exp`. */
export const TOKEN_REFRESH_MARGIN_SECONDS = 60;

export interface TokenCachePersistence {
  load(): CachedToken[];
  save(tokens: CachedToken[]): void;
}

export interface TokenCacheOptions {
  /** Milliseconds since the epoch; an injectable clock. */
  now?: () => number;
  /** Defaults to TOKEN_REFRESH_MARGIN_SECONDS (60); lower values are refused. */
  marginSeconds?: number;
  /** Where tokens survive the process (the agent store's `tokens.json`); memory only without it. */
  persistence?: TokenCachePersistence;
}

const keyOf = (attestorUrl: string, agentDid: string, aud: string) => `${attestorUrl}\n${agentDid}\n${aud}`;

export class TokenCache {
  readonly #now: () => number;
  readonly #margin: number;
  readonly #persistence: TokenCachePersistence | undefined;
  #tokens: Map<string, CachedToken> | undefined;

  constructor(options: TokenCacheOptions = {}) {
    const margin = options.marginSeconds ?? TOKEN_REFRESH_MARGIN_SECONDS;
    if (!(margin >= TOKEN_REFRESH_MARGIN_SECONDS)) {
      throw new RangeError(`marginSeconds must be at least ${TOKEN_REFRESH_MARGIN_SECONDS}`);
    }
    this.#now = options.now ?? Date.now;
    this.#margin = margin;
    this.#persistence = options.persistence;
  }

  /** True while the token has more than the margin left before its `exp`. */
  isFresh(token: Pick<CachedToken, "expires_at">): boolean {
    return token.expires_at * 1000 - this.#now() > this.#margin * 1000;
  }

  /** The cached token for this audience, or undefined when none is fresh. */
  get(attestorUrl: string, agentDid: string, aud: string): CachedToken | undefined {
    const token = this.#map().get(keyOf(attestorUrl, agentDid, aud));
    return token !== undefined && this.isFresh(token) ? token : undefined;
  }

  set(token: CachedToken): void {
    const map = this.#map();
    map.set(keyOf(token.attestor_url, token.agent_did, token.aud), token);
    // Expired tokens are worthless: drop them whenever the cache is written.
    const nowSeconds = this.#now() / 1000;
    for (const [key, entry] of map) if (entry.expires_at <= nowSeconds) map.delete(key);
    this.#save();
  }

  /** Forgets the tokens of one agent at one attestor (all audiences, or one). */
  delete(attestorUrl: string, agentDid: string, aud?: string): void {
    const map = this.#map();
    let changed = false;
    for (const [key, entry] of map) {
      if (
        entry.attestor_url === attestorUrl &&
        entry.agent_did === agentDid &&
        (aud === undefined || entry.aud === aud)
      ) {
        map.delete(key);
        changed = true;
      }
    }
    if (changed) this.#save();
  }

  /** Every entry, fresh or not (for status displays). */
  list(): CachedToken[] {
    return [...this.#map().values()];
  }

  #map(): Map<string, CachedToken> {
    if (this.#tokens === undefined) {
      const loaded = this.#persistence?.load() ?? [];
      this.#tokens = new Map(loaded.map((t) => [keyOf(t.attestor_url, t.agent_did, t.aud), t]));
    }
    return this.#tokens;
  }

  #save(): void {
    this.#persistence?.save([...this.#map().values()]);
  }
}
