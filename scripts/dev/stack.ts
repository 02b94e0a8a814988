/**
 * The three services of `npm run dev` in one process: the directory and the attestor over plain
 * HTTP on 127.0.0.1 (the `http://localhost` URLs the `proto` command accepts for this machine), and
 * the notes service over HTTPS for `localhost` with a certificate of the development CA (agents
 * reach services over HTTPS only).
 *
 * They are wired to each other as a person would wire them by hand (see examples/service/README.md):
 * the notes service trusts this attestor; the attestor knows the notes service's OpenID client, so
 * owners sign in; the directory may fetch from this machine and trusts the development CA, so it
 * reads the notes service's discovery document and proof. Test hooks are off and mail goes to the
 * development outboxes.
 */
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { DirectoryClient, DirectoryError, writeProofFile } from "@proto/agent";
import {
  buildDirectoryApp,
  buildTrustApp,
  type DirectoryApp,
  readDirectoryConfig,
  readTrustConfig,
} from "@proto/server";
import { buildNotesService, type NotesService } from "../../examples/service/src/app.js";
import type { DevCa } from "./ca.js";
import type { DevSettings } from "./settings.js";

/** Variables of the servers that `npm run dev` decides; the rest of the environment passes through. */
const DROPPED = ["SMTP_URL", "PROTO_FETCH_RESOLVE", "DIRECTORY_MIRROR_OF"] as const;

export interface DevUrls {
  directory: string;
  trust: string;
  notes: string;
  notesDid: string;
  /** The notes service's development outbox (invitation mail). */
  notesOutbox: string;
}

export interface DevStack {
  urls: DevUrls;
  /** Stops every service (in-flight requests are drained) and closes the databases. */
  close(): Promise<void>;
}

type TrustApp = Awaited<ReturnType<typeof buildTrustApp>>;

export class PortInUseError extends Error {}

/** The environment the directory and the attestor read their configuration from. */
function serverEnv(settings: DevSettings, urls: Pick<DevUrls, "directory" | "trust">, oidcClients: unknown[]) {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const name of DROPPED) delete env[name];
  return {
    ...env,
    LOG_LEVEL: settings.logLevel,
    PROTO_TEST_HOOKS: "0",
    // The notes service is on this machine: the directory's fetches may reach loopback.
    PROTO_FETCH_ALLOW_PRIVATE: "1",
    DIRECTORY_PUBLIC_URL: urls.directory,
    DIRECTORY_DATABASE_URL: `sqlite:${join(settings.dataDir, "directory.db")}`,
    TRUST_PUBLIC_URL: urls.trust,
    TRUST_DATABASE_URL: `sqlite:${join(settings.dataDir, "trust.db")}`,
    TRUST_OIDC_CLIENTS: JSON.stringify(oidcClients),
  };
}

async function listen(
  app: { listen(options: { port: number; host: string }): Promise<string> },
  port: number,
  host: string,
  variable: string,
): Promise<void> {
  try {
    await app.listen({ port, host });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "EADDRINUSE") {
      throw new PortInUseError(
        `port ${port} is in use (is \`npm start\` or another \`npm run dev\` running?); stop it or set ${variable}`,
      );
    }
    throw error;
  }
}

export async function startDevStack(settings: DevSettings, ca: DevCa): Promise<DevStack> {
  mkdirSync(settings.dataDir, { recursive: true });
  const urls = {
    directory: `http://localhost:${settings.directoryPort}`,
    trust: `http://localhost:${settings.trustPort}`,
    notes: `https://localhost:${settings.notesPort}`,
  };
  let notes: NotesService | undefined;
  let trust: TrustApp | undefined;
  let directory: DirectoryApp | undefined;
  const close = async () => {
    // The notes service first (its requests call the attestor), then the servers; each drains its requests.
    await notes?.close();
    await Promise.all([directory?.close(), trust?.close()]);
  };
  try {
    // Built before the attestor, whose configuration needs the notes service's OpenID client.
    notes = await buildNotesService({
      publicUrl: urls.notes,
      database: `sqlite:${join(settings.dataDir, "notes.db")}`,
      attestorUrl: urls.trust,
      proofDir: join(settings.dataDir, "notes-webroot"),
      mail: { developmentOutbox: true },
      https: { cert: ca.certPem, key: ca.keyPem },
      logger: { level: settings.logLevel },
      // Web Bot Auth keeps the kit's default: key directories on public HTTPS addresses only.
    });
    const env = serverEnv(settings, urls, [notes.oidcClient]);
    // The attestor reads the notes service's discovery document (its permissions) over the dev CA.
    trust = await buildTrustApp(readTrustConfig(env), { fetchCa: ca.caCertPem });
    await listen(trust.app, settings.trustPort, "127.0.0.1", "PROTO_DEV_TRUST_PORT");
    directory = await buildDirectoryApp(readDirectoryConfig(env), { fetchCa: ca.caCertPem });
    await listen(directory.app, settings.directoryPort, "127.0.0.1", "PROTO_DEV_DIRECTORY_PORT");
    // `localhost`: both 127.0.0.1 and ::1, whichever the client's resolver gives first.
    await listen(notes.app, settings.notesPort, "localhost", "PROTO_DEV_NOTES_PORT");
    return {
      urls: {
        ...urls,
        notesDid: notes.serviceDid,
        notesOutbox: `${urls.notes}${notes.kit.ownerPath}/dev/outbox`,
      },
      close,
    };
  } catch (error) {
    await close();
    throw error;
  }
}

/**
 * Lists the notes service in the directory (unless it is listed already), as its operator would
 * with `proto directory register`, so `proto directory list` has something to show. The session
 * token is not kept: this is a demonstration listing.
 */
export async function listNotesService(stack: DevStack, dataDir: string): Promise<"listed" | "already listed"> {
  const directory = new DirectoryClient({ url: stack.urls.directory });
  try {
    const listing = await directory.get(stack.urls.notesDid);
    if (listing.status === "active") return "already listed";
  } catch (error) {
    if (!(error instanceof DirectoryError && error.status === 404)) throw error;
  }
  const proofDir = join(dataDir, "notes-webroot");
  await directory.register({
    discoveryUrl: `${stack.urls.notes}/.well-known/proto`,
    title: "Notes (example service)",
    description: "Write and read notes as an agent; the person behind the agent reads them on /owner.",
    tags: ["notes", "example"],
    publish: (challenge) => {
      writeProofFile(proofDir, challenge.challenge_token);
    },
  });
  return "listed";
}
