/**
 * Where the kit finds a Web Bot Auth caller's key by default: the key directory its
 * `Signature-Agent` names, fetched through the SSRF-safe fetch and cached (`KeyDirectoryClient`).
 * Each first look-up of a directory is an outbound request a stranger chose, so new directories
 * are admitted at a bounded rate, per client and for the process (`DirectoryBudget`); known ones are
 * served from the client's cache. The verifier checks a signature's structure before it gets here.
 */
import {
  createSafeFetcher,
  directoryUrlFor,
  KeyDirectoryClient,
  KeyDirectoryError,
  type KeyDirectoryOptions,
  type SafeFetchConfig,
  type SignatureAgentKeys,
} from "@proto/protocol";
import { DirectoryBudget } from "./directory-budget.js";

export interface KeyDirectorySourceOptions {
  /** The fetch's settings: `allowPrivate` and `resolve` for development and tests, extra `ca`s. */
  fetch?: Partial<SafeFetchConfig>;
  /** Cache and size bounds of the directory client. */
  directory?: Omit<KeyDirectoryOptions, "fetcher" | "now">;
  /** Directories never seen before that may be fetched per minute, whoever asks (default 60). */
  newDirectoriesPerMinute?: number;
  /** Of those, how many one client may make the kit fetch per minute (default 10). */
  newDirectoriesPerClientPerMinute?: number;
  now: () => number;
}

const KNOWN_DIRECTORIES = 10_000;

/**
 * An attestor's directory lists every agent its people published (our attestor: up to 1,000 by
 * default, ~140 bytes each), so directories may be large; fewer of them are kept to bound memory
 * (200 x 1,000 keys at worst, when strangers serve full directories).
 */
const DIRECTORY_DEFAULTS = { maxKeys: 1000, maxBytes: 256 * 1024, maxEntries: 200 } as const;

export function keyDirectorySource(options: KeyDirectorySourceOptions): SignatureAgentKeys {
  const fetcher = createSafeFetcher({
    allowPrivate: false,
    resolve: new Map(),
    maxBytes: options.directory?.maxBytes ?? DIRECTORY_DEFAULTS.maxBytes,
    userAgent: "proto-kit/0.1 (Web Bot Auth key directory)",
    ...options.fetch,
  });
  const client = new KeyDirectoryClient({ ...DIRECTORY_DEFAULTS, ...options.directory, fetcher, now: options.now });
  const budget = new DirectoryBudget({
    now: options.now,
    ...(options.newDirectoriesPerMinute === undefined ? {} : { perMinute: options.newDirectoriesPerMinute }),
    ...(options.newDirectoriesPerClientPerMinute === undefined
      ? {}
      : { perClientPerMinute: options.newDirectoriesPerClientPerMinute }),
  });
  const known = new Map<string, true>();

  function admit(url: string, client: string | undefined): void {
    if (known.has(url)) return;
    budget.charge(client);
    known.set(url, true);
    // Oldest first: a Map keeps insertion order.
    if (known.size > KNOWN_DIRECTORIES) known.delete(known.keys().next().value as string);
  }

  return {
    async lookup(signatureAgent, thumbprint, context) {
      let url: string;
      try {
        url = directoryUrlFor(signatureAgent);
      } catch (error) {
        if (error instanceof KeyDirectoryError) throw error;
        throw new KeyDirectoryError("malformed", "the Signature-Agent is not a usable https URL");
      }
      admit(url, context?.client);
      return client.lookup(url, thumbprint);
    },
  };
}
