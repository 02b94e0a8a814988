/** The `proto` command, built with commander on the SDK. */
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { isDidSyntax } from "@proto/protocol";
import { Command, CommanderError, Option } from "commander";
import { acceptedAttestors, issuerOf } from "../accepted.js";
import { getAccount, inviteOwner, type OwnerRecipient } from "../account.js";
import { Agent } from "../agent.js";
import {
  type Challenge,
  checkDiscoveryUrl,
  DirectoryClient,
  type Listing,
  type ListingFields,
  type ListQuery,
  proofInstructions,
  type SubmitResult,
  writeProofFile,
} from "../directory.js";
import { AuthError, DirectoryError, UsageError } from "../errors.js";
import { normaliseBaseUrl } from "../http.js";
import { AgentStore, type BindingRecord, defaultHome } from "../store.js";
import { TokenCache } from "../token-cache.js";
import { runExplain, runGrants } from "./authority.js";
import { type CallOptions, parsePeriodAmount, runCall } from "./call.js";
import { describeAccount, describeListing } from "./describe.js";
import { attestationDocument, bindingDocument, isoTime, subjectOf } from "./documents.js";
import { runLink } from "./link.js";
import { runMcp } from "./mcp.js";
import { EXIT, exitCodeOf, Interrupted, Output, table } from "./output.js";
import { inline } from "./terminal-text.js";

export interface RunContext {
  argv: string[];
  env: NodeJS.ProcessEnv;
  signal: AbortSignal;
  stdout: NodeJS.WriteStream;
  stderr: NodeJS.WriteStream;
  stdin: NodeJS.ReadStream;
}

interface CommonOptions {
  json?: boolean;
}

const collect = (value: string, previous: string[] = []) => [...previous, value];

/** `--attestor` of the commands that mint: a URL, or the iss of a linked attestor. */
const ATTESTOR_HELP =
  "attestor: its URL, or the iss of a linked one (default: the one each service accepts, else the saved one)";

function version(): string {
  try {
    const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as {
      version?: string;
    };
    return pkg.version ?? "0.0.0";
  } catch {
    return "0.0.0";
  }
}

/**
 * Runs the CLI and resolves to the exit code. Output goes to the context's streams; errors are
 * printed on one line (`proto: code: message`), never with a stack.
 */
export async function run(context: RunContext): Promise<number> {
  let out = new Output(context.argv.includes("--json"), context);
  let exitCode: number = EXIT.ok;
  const program = buildProgram(
    context,
    (json) => {
      out = new Output(json, context);
      return out;
    },
    (code) => {
      exitCode = code;
    },
  );
  try {
    await program.parseAsync(context.argv, { from: "user" });
  } catch (error) {
    if (error instanceof CommanderError) {
      if (error.code === "commander.helpDisplayed" || error.code === "commander.version") return EXIT.ok;
      // Commander has printed its one-line message already (see outputError).
      if (out.json) out.errorDocument(new UsageError("usage", error.message.replace(/^error: /, "")));
      return EXIT.usage;
    }
    out.error(error);
    return exitCodeOf(error);
  }
  return exitCode;
}

function buildProgram(
  context: RunContext,
  makeOutput: (json: boolean) => Output,
  setExit: (code: number) => void,
): Command {
  const { env } = context;
  const program = new Command("proto")
    .description("The proto agent: its key, its link to a person, attested calls, directory listings.")
    .version(version(), "-V, --version")
    .exitOverride()
    .showSuggestionAfterError(true)
    .configureOutput({
      writeOut: (text) => context.stdout.write(text),
      writeErr: (text) => context.stderr.write(text),
      outputError: (text, write) => write(`proto: usage: ${text.replace(/^error: /, "").trim()}\n`),
    });

  /** A leaf command with `--json`, whose action gets an Output and a loaded (or not) agent. */
  const leaf = (parent: Command, name: string, description: string) =>
    parent.command(name).description(description).option("--json", "print one JSON document on stdout").exitOverride();

  const store = () => new AgentStore(defaultHome(env));
  const agent = () => Agent.load({ env });

  // --- init, whoami, keys ---

  leaf(program, "init", "create the agent key (once) in PROTO_HOME (default ~/.proto)")
    .option("--attestor <url>", "save the attestor URL in the configuration")
    .option("--directory <url>", "save the directory URL in the configuration")
    .action((options: CommonOptions & { attestor?: string; directory?: string }) => {
      const out = makeOutput(options.json === true);
      const home = store();
      home.migrate();
      const { identity, created } = home.initIdentity();
      const patch: { attestor_url?: string; directory_url?: string } = {};
      if (options.attestor) patch.attestor_url = normaliseBaseUrl(options.attestor, "attestor");
      if (options.directory) patch.directory_url = normaliseBaseUrl(options.directory, "directory");
      const config = Object.keys(patch).length > 0 ? home.updateConfig(patch) : home.readConfig();
      out.result(
        { did: identity.did, created, home: home.home, key_file: home.keyPath, ...config },
        created
          ? [`Created the agent key ${identity.did}`, `  key file ${home.keyPath} (0600)`]
          : [`The agent key already exists: ${identity.did}`, `  key file ${home.keyPath}`],
      );
    });

  leaf(program, "whoami", "show the agent DID, its key and configuration").action((options: CommonOptions) => {
    const out = makeOutput(options.json === true);
    const a = agent();
    const attestorUrl = a.attestorUrl();
    const binding = attestorUrl === undefined ? undefined : a.store.getBinding(attestorUrl, a.did);
    const bindings = a.bindings();
    out.result(
      {
        did: a.did,
        public_key_b64: a.identity.publicKeyB64,
        created_at: a.identity.createdAt,
        home: a.store.home,
        key_file: a.store.keyPath,
        attestor_url: attestorUrl ?? null,
        directory_url: a.directoryUrl() ?? null,
        binding: binding === undefined ? null : bindingDocument(binding),
        attestors: bindings.map((b) => ({ attestor_url: b.attestor_url, iss: b.iss ?? null, state: b.state })),
      },
      [
        a.did,
        `  public key  ${a.identity.publicKeyB64}`,
        `  key file    ${a.store.keyPath}`,
        `  attestor    ${attestorUrl ?? "(none)"}`,
        `  directory   ${a.directoryUrl() ?? "(none)"}`,
        `  linked      ${binding ? `${binding.state} (${binding.binding_id ?? "binding"})` : "no"}`,
        ...(bindings.length > 1 ? [`  attestors   ${bindings.length} linked (\`proto trust status\` lists them)`] : []),
      ],
    );
  });

  const keys = program.command("keys").description("export or rotate the agent key");
  leaf(keys, "export", "print the public key (and, with --private, the private key)")
    .option("--private", "include the private key")
    .action((options: CommonOptions & { private?: boolean }) => {
      const out = makeOutput(options.json === true);
      const identity = agent().identity;
      const exported = options.private ? identity.exportPrivate() : identity.exportPublic();
      if (options.private) out.warn("warning: this output contains the agent's private key; keep it secret");
      out.result(exported, JSON.stringify(exported, null, 2));
    });
  leaf(keys, "rotate", "replace the key with a new one; the old key is kept in the archive").action(
    (options: CommonOptions) => {
      const out = makeOutput(options.json === true);
      const result = store().rotateIdentity();
      out.result({ did: result.current.did, previous_did: result.previous.did, archived_to: result.archivedTo }, [
        `New agent key ${result.current.did}`,
        `  the previous key (${result.previous.did}) is archived in ${result.archivedTo}`,
        "Rotation is local: link the new key again with `proto trust link`, and tell services that support key",
        "rotation through their own flow.",
      ]);
    },
  );

  // --- trust ---

  const trust = program.command("trust").description("link the agent to a person and mint attestations");
  leaf(trust, "link", "link this agent to a person through an attestor (one binding per attestor)")
    .option(
      "--attestor <url>",
      "attestor base URL, or the iss of a linked one (else PROTO_ATTESTOR_URL or the saved one)",
    )
    .option("--label <text>", "a name for this agent, shown on the confirmation page (<= 80 characters)")
    .option("--no-browser", "do not open a browser")
    .option("--callback", "finish through a loopback callback instead of polling (browser on this machine)")
    .action(
      async (options: CommonOptions & { attestor?: string; label?: string; browser: boolean; callback?: boolean }) => {
        const out = makeOutput(options.json === true);
        const a = agent();
        const attestor = a.attestor(options.attestor);
        const current = a.store.getBinding(attestor.url, a.did);
        if (current !== undefined && current.state === "active" && !lapsed(current)) {
          out.event({ event: "already_linked", attestor_url: attestor.url, binding_id: current.binding_id }, [
            `This agent is already linked at ${attestor.url} (binding ${current.binding_id ?? "(id unknown)"}).`,
            "Confirming this new request replaces that link: the attestor revokes the current binding and issues a",
            "new one. Only the person it is linked to can confirm; until they do, the current link keeps working",
            "(Ctrl-C keeps it as it is).",
            "",
          ]);
        }
        const binding = await runLink(
          attestor,
          {
            browser: options.browser,
            callback: options.callback === true,
            ...(options.label === undefined ? {} : { label: options.label }),
          },
          out,
          context.signal,
        );
        a.store.updateConfig({ attestor_url: attestor.url });
        const others = a.bindings().filter((b) => b.attestor_url !== attestor.url);
        out.result(
          {
            agent_did: a.did,
            attestor_url: attestor.url,
            binding_id: binding.binding_id,
            binding_expires_at: isoTime(binding.binding_expires_at),
            attestors: others.length + 1,
          },
          [
            `Linked: ${a.did}`,
            `  binding ${binding.binding_id} at ${attestor.url}, lapses ${isoOf(binding.binding_expires_at)} unless used`,
            ...(others.length === 0
              ? []
              : [
                  `  this agent is linked to ${others.length + 1} attestors; each service gets a token from the one it accepts`,
                ]),
          ],
        );
      },
    );

  leaf(trust, "token", "print an attestation token for a service DID (cached while it has > 60 s left)")
    .argument("<service>", "the audience: the service's DID (with --explain, any https URL on the service works too)")
    .option("--attestor <attestor>", "attestor: its URL, or the iss of a linked one (default: the saved one)")
    .option("--fresh", "mint a new token even when a cached one is fresh")
    .option("--explain", "say what the token allows at the service: its permissions and spend limits, in plain words")
    .action(
      async (service: string, options: CommonOptions & { attestor?: string; fresh?: boolean; explain?: boolean }) => {
        const out = makeOutput(options.json === true);
        if (options.explain === true) return runExplain(agent(), service, options, out, context.signal);
        if (!isDidSyntax(service)) {
          throw new UsageError("invalid_aud", `${JSON.stringify(service)} is not a did:web or did:key DID`);
        }
        const attestor = agent().attestor(options.attestor);
        const token = await attestor.token(service, { fresh: options.fresh === true, signal: context.signal });
        out.result(attestationDocument(token), token.jwt);
        out.note(
          `(${token.cached ? "cached" : "minted"} by ${token.iss ?? "?"} at ${token.attestor_url}; expires ${isoOf(token.expires_at)}; verification ${token.verification})`,
        );
      },
    );

  leaf(trust, "status", "list the attestors this agent is linked to and the cached tokens (no network)")
    .option("--attestor <attestor>", "the attestor shown as the default: its URL or iss")
    .action((options: CommonOptions & { attestor?: string }) => {
      const out = makeOutput(options.json === true);
      const a = agent();
      const attestorUrl = a.attestorUrl(options.attestor);
      const now = Date.now() / 1000;
      const stateOf = (b: BindingRecord) =>
        b.agent_did !== a.did ? "orphaned" : b.state === "active" && lapsed(b, now) ? "expired" : b.state;
      const all = a.store.listBindings();
      const bindings = all.map((b) => ({
        attestor_url: b.attestor_url,
        iss: b.iss ?? null,
        binding_id: b.binding_id,
        state: stateOf(b),
        binding_expires_at: b.binding_expires_at,
        verification: b.verification ?? null,
        agent_did: b.agent_did,
        default: b.attestor_url === attestorUrl,
      }));
      const binding = attestorUrl === undefined ? undefined : a.store.getBinding(attestorUrl, a.did);
      const state = binding === undefined ? "not_linked" : stateOf(binding);
      const cache = new TokenCache({ persistence: a.store.tokenPersistence() });
      const tokens = cache
        .list()
        .filter((t) => t.agent_did === a.did && t.expires_at > now)
        .map((t) => ({
          aud: t.aud,
          attestor_url: t.attestor_url,
          iss: issuerOf(t.jwt) ?? null,
          expires_at: t.expires_at,
          verification: t.verification,
          usable: cache.isFresh(t),
        }));
      const lines = [`agent  ${a.did}`, ""];
      if (bindings.length === 0) {
        lines.push("Not linked to any attestor: run `proto trust link --attestor URL`.");
      } else {
        lines.push(
          ...table([
            ["ATTESTOR", "ISS", "BINDING", "STATE", "LAPSES"],
            ...bindings.map((b) => [
              `${b.attestor_url}${b.default ? " *" : ""}`,
              b.iss ?? "(not learned yet)",
              b.binding_id ?? "(id unknown)",
              b.state,
              lapseColumn(b.state, b.binding_expires_at),
            ]),
          ]),
          "",
          `${attestorUrl === undefined ? "No default attestor" : "* the default attestor (`proto trust token`)"}; each service gets a token from an attestor whose iss it accepts.`,
        );
        if (bindings.some((b) => b.state === "orphaned")) {
          lines.push("orphaned: linked with an earlier key of this agent; never used (link again).");
        }
        if (bindings.some((b) => b.state === "revoked")) {
          lines.push("revoked: the person ended this link; `proto trust link --attestor URL` asks them to link again.");
        }
        if (bindings.some((b) => b.state === "expired")) {
          lines.push(
            "expired: the link lapsed unused; `proto trust link --attestor URL` asks the person to link again.",
          );
        }
      }
      if (tokens.length > 0) {
        lines.push(
          "",
          ...table([
            ["TOKEN FOR", "ATTESTOR", "ISS", "EXPIRES"],
            ...tokens.map((t) => [
              t.aud,
              t.attestor_url,
              t.iss ?? "?",
              `${isoOf(t.expires_at)}${t.usable ? "" : " (about to expire)"}`,
            ]),
          ]),
        );
      }
      out.result(
        {
          agent_did: a.did,
          attestor_url: attestorUrl ?? null,
          state,
          binding: binding === undefined ? null : bindingDocument(binding),
          bindings: bindings.map((b) => ({ ...b, binding_expires_at: isoTime(b.binding_expires_at) })),
          tokens: tokens.map((t) => ({ ...t, expires_at: isoTime(t.expires_at) })),
        },
        lines,
      );
    });

  leaf(program, "grants", "list what the person granted this agent, per service: permissions and spend limits")
    .option("--attestor <attestor>", "attestor: its URL, or the iss of a linked one (default: the saved one)")
    .action((options: CommonOptions & { attestor?: string }) =>
      runGrants(agent(), options, makeOutput(options.json === true), context.signal),
    );

  // --- call ---

  leaf(program, "call", "send a signed (and, when the service needs it, attested) request")
    .argument("<url>", "https URL on the service (with --endpoint: any URL on its discovery host)")
    .option("-X, --method <method>", "HTTP method (default GET, or POST with --data)")
    .option("-d, --data <data>", "request body; @file reads a file, @- standard input")
    .option("-H, --header <header>", "extra header 'Name: value' (repeatable)", collect, [])
    .option(
      "-e, --endpoint <name[/path]>",
      "call the endpoint the discovery document names (accounts, owner_invitation, ...), plus /path (accounts/me)",
    )
    .option("--attestor <attestor>", ATTESTOR_HELP)
    .option(
      "--web-bot-auth",
      "sign for Web Bot Auth too: a proto and a Web Bot Auth signature (PROTO_WEB_BOT_AUTH=both)",
    )
    .option(
      "--web-bot-auth-only",
      "one Web Bot Auth signature instead, for verifiers that take one (PROTO_WEB_BOT_AUTH=single)",
    )
    .option(
      "--signature-agent <url>",
      "the key directory named in Signature-Agent (default: your attestor's, where /account publishes the key)",
    )
    .option(
      "--signature-agent-string",
      "send Signature-Agent as the older bare string, covered whole (what deployed verifiers read), not the working group's dictionary",
    )
    .option(
      "--reason <text>",
      "when the service refuses for want of a permission or spend limit, the agent's words to the person asking them (default: the call itself)",
    )
    .option("--no-wait", "after asking the person, print the approval link and exit (code 7) instead of waiting")
    .option(
      "--per-transaction <amount>",
      "the spend limit per transaction to ask for, with a spending permission or a higher limit (20.50)",
    )
    .option(
      "--per-period <amount[/period]>",
      "the spend limit per day, week or month to ask for (100/month)",
      parsePeriodAmount,
    )
    .addHelpText(
      "after",
      [
        "",
        "When the service answers 403 insufficient_permission or spend_limit_exceeded, proto asks the person",
        "(through the attestor) for what is missing, prints the approval link and a QR code, waits for their",
        "answer and, once approved, sends the request once more with a fresh token. Asking for a spending",
        "permission or a higher limit needs --per-transaction or --per-period, in the currency's units.",
      ].join("\n"),
    )
    .action(async (url: string, options: CommonOptions & CallOptions) => {
      const out = makeOutput(options.json === true);
      setExit(await runCall(agent(), url, options, out, context));
    });

  // --- mcp ---

  leaf(program, "mcp", "list an MCP server's tools, or call one, with an access token from the agent's attestor")
    .argument("<url>", "the MCP endpoint's URL, or a service's URL (its discovery document names it)")
    .argument("[tool]", "the tool to call (without it, the tools are listed)")
    .argument("[json-args]", "the tool's arguments: one JSON object (default {})")
    .option(
      "--attestor <attestor>",
      "attestor: its URL, or the iss of a linked one (default: a linked one the server lists)",
    )
    .action(
      async (
        url: string,
        tool: string | undefined,
        args: string | undefined,
        options: CommonOptions & { attestor?: string },
      ) => {
        const out = makeOutput(options.json === true);
        setExit(await runMcp(agent(), { url, tool, args, attestor: options.attestor }, out, context.signal));
      },
    );

  // --- account ---

  const account = program.command("account").description("this agent's account at a service (upstream §6-§7)");
  leaf(account, "show", "show the account (signing up implicitly where the service allows it)")
    .argument("<url>", "the service: any https URL on it")
    .option("--attestor <attestor>", ATTESTOR_HELP)
    .action(async (url: string, options: CommonOptions & { attestor?: string }) => {
      const out = makeOutput(options.json === true);
      const client = await agent().service(url, { attestorUrl: options.attestor, signal: context.signal });
      const acct = await getAccount(client, context.signal);
      out.result(acct, describeAccount(acct));
    });
  leaf(account, "invite", "invite the person who may claim the account (they prove who they are to the service)")
    .argument("<url>", "the service: any https URL on it")
    .option("--email <address>", "an e-mail recipient: the service mails them a link")
    .option("--oidc <issuer> <subject>", "an OpenID recipient: issuer URL and subject, space-separated")
    .option("--redirect-url <url>", "where the service sends the person after the claim (its allow-list decides)")
    .option("--attestor <attestor>", ATTESTOR_HELP)
    .action(
      async (
        url: string,
        options: CommonOptions & { email?: string; oidc?: string; redirectUrl?: string; attestor?: string },
      ) => {
        const out = makeOutput(options.json === true);
        if ((options.email === undefined) === (options.oidc === undefined)) {
          throw new UsageError(
            "invalid_argument",
            "give exactly one recipient: --email ADDRESS or --oidc ISSUER SUBJECT",
          );
        }
        let recipient: OwnerRecipient;
        if (options.email !== undefined) {
          recipient = { email: options.email };
        } else {
          const [issuer, sub, ...rest] = (options.oidc ?? "").trim().split(/\s+/);
          if (issuer === undefined || sub === undefined || rest.length > 0) {
            throw new UsageError("invalid_argument", '--oidc takes "ISSUER SUBJECT" (one argument, quoted)');
          }
          recipient = { recipient: { type: "oidc", value: { issuer, sub } } };
        }
        const client = await agent().service(url, { attestorUrl: options.attestor, signal: context.signal });
        const invitation = await inviteOwner(client, recipient, {
          ...(options.redirectUrl === undefined ? {} : { redirectUrl: options.redirectUrl }),
          signal: context.signal,
        });
        out.result(invitation, [
          `Invitation ${inline(invitation.invitation_id)} staged; the account is ${inline(invitation.state)} until ${inline(invitation.expires_at)}`,
          invitation.claim_url === undefined
            ? "  the service sends the claim link to the recipient itself"
            : `  hand this link to the recipient: ${inline(invitation.claim_url)}`,
        ]);
      },
    );

  // --- owner ---

  const owner = program
    .command("owner")
    .description("invite the person who will own this agent's account at a service");
  leaf(owner, "invite", "send the owner invitation to the endpoint the service's discovery document names")
    .argument("<service-url>", "the service: any https URL on it")
    .option("--email <address>", "invite by e-mail: the service mails them the claim link")
    .option("--oidc", "invite the person this agent is linked to: they sign in at the attestor to claim")
    .option("--redirect-url <url>", "where the service sends the person after the claim (its allow-list decides)")
    .option("--attestor <attestor>", ATTESTOR_HELP)
    .action(
      async (
        url: string,
        options: CommonOptions & { email?: string; oidc?: boolean; redirectUrl?: string; attestor?: string },
      ) => {
        const out = makeOutput(options.json === true);
        if ((options.email === undefined) === (options.oidc !== true)) {
          throw new UsageError("invalid_argument", "give exactly one recipient: --email ADDRESS or --oidc");
        }
        const a = agent();
        const client = await a.service(url, { attestorUrl: options.attestor, signal: context.signal });
        let recipient: OwnerRecipient;
        let person: string;
        if (options.email !== undefined) {
          recipient = { email: options.email };
          person = options.email;
        } else {
          // The attestor names the person to this service by a pairwise pseudonym, the sub_h of the
          // agent's attestations for it; signing in there with that attestor gives the same subject.
          const attestors = a.attestors(options.attestor);
          if (attestors === undefined) {
            throw new UsageError(
              "no_attestor",
              "--oidc needs a linked attestor: run `proto trust link --attestor URL`",
            );
          }
          const token = await attestors.attestationFor(
            client.discovery.did,
            acceptedAttestors(client.discovery.document.billing),
            { signal: context.signal },
          );
          const sub = subjectOf(token.jwt);
          if (sub === null) {
            throw new AuthError(
              "no_subject",
              `the attestation from ${token.attestor_url} names no person (no sub_h): link this agent with \`proto trust link\``,
            );
          }
          recipient = { recipient: { type: "oidc", value: { issuer: token.attestor_url, sub } } };
          person = `the person this agent is linked to at ${token.attestor_url}`;
        }
        const invitation = await inviteOwner(client, recipient, {
          ...(options.redirectUrl === undefined ? {} : { redirectUrl: options.redirectUrl }),
          signal: context.signal,
        });
        out.result(
          {
            ...invitation,
            service_did: client.discovery.did,
            recipient: "recipient" in recipient ? recipient.recipient : { type: "email", value: recipient.email },
          },
          [
            `Invited ${person} to own this agent's account at ${client.discovery.origin}`,
            `  invitation ${inline(invitation.invitation_id)}; the account is ${inline(invitation.state)} until ${inline(invitation.expires_at)}`,
            invitation.claim_url === undefined
              ? "  the service mails the claim link to them itself"
              : `  hand them this link to claim it: ${inline(invitation.claim_url)}`,
          ],
        );
      },
    );

  // --- directory ---

  const directory = program.command("directory").description("list a service in the directory, and read it");
  const directoryOption = () =>
    new Option("--directory <url>", "directory base URL (else PROTO_DIRECTORY_URL or the saved one)");

  leaf(directory, "register", "prove control of a service host and list it")
    .argument("<discovery-url>", "https://{host}/.well-known/proto")
    .option("--title <text>", "listing title (<= 120 characters)")
    .option("--description <text>", "listing description (<= 500 characters)")
    .option("--tag <tag>", "a tag (repeatable, <= 20)", collect)
    .option("--proof-dir <dir>", "write DIR/.well-known/proto-registry-proof (the host's web root) and submit")
    .option("--submit", "submit a challenge saved earlier, once its proof is published")
    .addOption(directoryOption())
    .action(
      async (
        discoveryUrl: string,
        options: CommonOptions & ListingFieldOptions & { proofDir?: string; submit?: boolean; directory?: string },
      ) => {
        const out = makeOutput(options.json === true);
        const client = directoryClient(env, options.directory);
        const home = new AgentStore(defaultHome(env));
        const url = checkDiscoveryUrl(discoveryUrl);
        const next = `proto directory register ${url} --submit`;
        const savePending = (challenge: Challenge, fields: ListingFields) =>
          home.savePendingChallenge({ directory_url: client.url, discovery_url: url, ...challenge, ...fields });
        const submit = async (challenge: Challenge, fields: ListingFields) => {
          const result = await client.submit(
            { discoveryUrl: url, challengeToken: challenge.challenge_token, ...fields },
            context.signal,
          );
          home.deletePendingChallenge(client.url, url);
          return result;
        };
        /**
         * A submit that reached the directory used its challenge up (decisions §2), whatever it
         * answered: the error is printed and a new challenge saved in its place, so the next
         * attempt (Enter, or `--submit`) has a live one for the proof.
         */
        const renewAfter = async (error: unknown, fields: ListingFields): Promise<Challenge> => {
          if (!(error instanceof DirectoryError) || BEFORE_CHALLENGE_USE.has(error.code)) throw error;
          out.error(error);
          const renewed = await client.challenge(url, context.signal);
          savePending(renewed, fields);
          return renewed;
        };

        let result: SubmitResult;
        if (options.submit) {
          const pending = home.getPendingChallenge(client.url, url);
          if (pending === undefined) {
            throw new UsageError(
              "no_pending_challenge",
              `no saved challenge for ${url}: run register without --submit first`,
            );
          }
          const fields = { ...savedFields(pending), ...listingFields(options) };
          try {
            result = await submit(pending, fields);
          } catch (error) {
            const renewed = await renewAfter(error, fields);
            out.result({ pending: true, ...renewed, next }, [
              "That challenge is used up; a new one is saved.",
              "",
              ...proofInstructions(renewed),
              "",
              `Then run: ${next}`,
            ]);
            setExit(exitCodeOf(error));
            return;
          }
        } else {
          const fields = listingFields(options);
          let challenge = await client.challenge(url, context.signal);
          if (options.proofDir !== undefined) {
            const path = writeProofFile(options.proofDir, challenge.challenge_token);
            out.event(
              { event: "proof_written", path, proof_url: challenge.proof_url },
              `Wrote the proof to ${path} (to be served at ${challenge.proof_url})`,
            );
            result = await submit(challenge, fields);
          } else if (out.interactive && context.stdin.isTTY) {
            // Saved before the wait: after Ctrl-C at the prompt, `--submit` finishes the job.
            savePending(challenge, fields);
            out.result(undefined, [...proofInstructions(challenge), ""]);
            await waitForEnter(context, "Press Enter once it is published... ");
            for (;;) {
              try {
                result = await submit(challenge, fields);
                break;
              } catch (error) {
                challenge = await renewAfter(error, fields);
                out.result(undefined, [
                  "",
                  "That challenge is used up; here is a new one, saved (so later, once it is published, `--submit` works too):",
                  "",
                  ...proofInstructions(challenge),
                  "",
                ]);
                await waitForEnter(context, "Press Enter to try again once it is published (Ctrl-C to stop)... ");
              }
            }
          } else {
            savePending(challenge, fields);
            out.result({ pending: true, ...challenge, next }, [
              ...proofInstructions(challenge),
              "",
              `Then run: ${next}`,
            ]);
            return;
          }
        }
        home.updateConfig({ directory_url: client.url });
        out.result(
          {
            service_did: result.session.service_did,
            created: result.created,
            session_expires_at: result.session.expires_at,
            session_file: result.sessionFile ?? null,
          },
          [
            `${result.created ? "Listed" : "Re-registered"} ${result.session.service_did} at ${client.url}`,
            `  session token saved in ${result.sessionFile} (valid until ${result.session.expires_at})`,
          ],
        );
      },
    );

  leaf(directory, "update", "change the title, description or tags of a listing")
    .argument("<service-did>", "the listing's service DID")
    .option("--title <text>", "new title")
    .option("--description <text>", "new description")
    .option("--tag <tag>", "tags (repeatable; replaces the list)", collect)
    .addOption(directoryOption())
    .action(async (did: string, options: CommonOptions & ListingFieldOptions & { directory?: string }) => {
      const out = makeOutput(options.json === true);
      const client = directoryClient(env, options.directory);
      const listing = await client.update(did, listingFields(options), { signal: context.signal });
      out.result(listing, describeListing(listing, true));
    });

  leaf(directory, "withdraw", "withdraw (soft-delete) a listing")
    .argument("<service-did>", "the listing's service DID")
    .addOption(directoryOption())
    .action(async (did: string, options: CommonOptions & { directory?: string }) => {
      const out = makeOutput(options.json === true);
      const client = directoryClient(env, options.directory);
      await client.withdraw(did, { signal: context.signal });
      out.result({ service_did: did, withdrawn: true }, `Withdrew ${did} from ${client.url}`);
    });

  leaf(directory, "list", "list or search listings (follows the cursor)")
    .option("--search <text>", "substring of title or description")
    .option("--tag <tag>", "exact tag")
    .addOption(new Option("--status <status>", "listing status").choices(["active", "stale", "deleted"]))
    .option("--updated-since <time>", "RFC 3339 time")
    .option("--include-deleted", "include withdrawn listings")
    .option("--limit <n>", "at most this many listings (default 50)", positiveInteger, 50)
    .addOption(directoryOption())
    .action(
      async (
        options: CommonOptions & {
          search?: string;
          tag?: string;
          status?: ListQuery["status"];
          updatedSince?: string;
          includeDeleted?: boolean;
          limit: number;
          directory?: string;
        },
      ) => {
        const out = makeOutput(options.json === true);
        const client = directoryClient(env, options.directory);
        const query: ListQuery = { limit: Math.min(100, options.limit) };
        if (options.search !== undefined) query.search = options.search;
        if (options.tag !== undefined) query.tag = options.tag;
        if (options.status !== undefined) query.status = options.status;
        if (options.updatedSince !== undefined) query.updated_since = options.updatedSince;
        if (options.includeDeleted) query.include_deleted = true;
        const listings: Listing[] = [];
        let truncated = false;
        for await (const listing of client.list(query, context.signal)) {
          if (listings.length >= options.limit) {
            truncated = true;
            break;
          }
          listings.push(listing);
        }
        out.result(
          { listings, truncated },
          listings.length === 0
            ? "No listings."
            : [
                ...listings.map((l) => describeListing(l, false)[0] ?? ""),
                ...(truncated ? [`(more listings exist: raise --limit)`] : []),
              ],
        );
      },
    );

  leaf(directory, "show", "show one listing")
    .argument("<service-did>", "the listing's service DID")
    .addOption(directoryOption())
    .action(async (did: string, options: CommonOptions & { directory?: string }) => {
      const out = makeOutput(options.json === true);
      const listing = await directoryClient(env, options.directory).get(did, context.signal);
      out.result(listing, describeListing(listing, true));
    });

  return program;
}

/**
 * Submit refusals that leave the challenge unused: the body is checked, and the rate limit
 * applied, before the directory consumes it (decisions §2).
 */
const BEFORE_CHALLENGE_USE = new Set(["invalid_request", "rate_limited"]);

interface ListingFieldOptions {
  title?: string;
  description?: string;
  tag?: string[];
}

function listingFields(options: ListingFieldOptions): ListingFields {
  const fields: ListingFields = {};
  if (options.title !== undefined) fields.title = options.title;
  if (options.description !== undefined) fields.description = options.description;
  if (options.tag !== undefined) fields.tags = options.tag;
  return fields;
}

function savedFields(pending: ListingFields): ListingFields {
  const options: ListingFieldOptions = {};
  if (pending.title !== undefined) options.title = pending.title;
  if (pending.description !== undefined) options.description = pending.description;
  if (pending.tags !== undefined) options.tag = pending.tags;
  return listingFields(options);
}

/**
 * The directory client for the URL in effect (flag, PROTO_DIRECTORY_URL, saved configuration),
 * with the agent home for session tokens. The directory never needs the agent key.
 */
function directoryClient(env: NodeJS.ProcessEnv, explicit: string | undefined): DirectoryClient {
  const store = new AgentStore(defaultHome(env));
  const value = explicit ?? (env.PROTO_DIRECTORY_URL || undefined) ?? store.readConfig().directory_url;
  if (value === undefined) {
    throw new UsageError("no_directory", "no directory URL: pass --directory URL or set PROTO_DIRECTORY_URL");
  }
  return new DirectoryClient({ url: value, store });
}

function positiveInteger(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1)
    throw new UsageError("invalid_argument", `${JSON.stringify(value)} is not a positive integer`);
  return n;
}

/** Waits for Enter on a terminal; Ctrl-C or end of input interrupts. */
function waitForEnter(context: RunContext, prompt: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const rl = createInterface({ input: context.stdin, output: context.stdout });
    let answered = false;
    rl.once("SIGINT", () => rl.close());
    rl.once("close", () => (answered ? resolve() : reject(new Interrupted())));
    rl.question(prompt, () => {
      answered = true;
      rl.close();
    });
  });
}

/** Whether an active binding's inactivity deadline has passed (0: the deadline is not known). */
function lapsed(binding: BindingRecord, now = Date.now() / 1000): boolean {
  return binding.binding_expires_at !== 0 && binding.binding_expires_at <= now;
}

/** The LAPSES column: a deadline only where one still applies; a revoked link lapses no more. */
function lapseColumn(state: string, expiresAt: number): string {
  if (expiresAt === 0 || state === "revoked") return "-";
  return state === "expired" ? `lapsed ${isoOf(expiresAt)}` : `${isoOf(expiresAt)} unless used`;
}

function isoOf(unixSeconds: number): string {
  return new Date(unixSeconds * 1000).toISOString();
}
