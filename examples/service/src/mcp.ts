/**
 * The notes service's MCP endpoint (`/mcp`, Streamable HTTP, stateless): the official MCP SDK's
 * server, its tools over the notes the service keeps, behind the kit's bearer check. An agent
 * (JWT-bearer grant) works in its own account, the one its signed requests reach; a person
 * (through an MCP client they allowed at the attestor) works in the accounts they own or that
 * act for them. Each tool needs its permission (`kit.requirePermissions`): an agent holds what its
 * person granted it here (else the service's defaults), a person's client what the person allowed.
 */
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import type { BearerContext, Kit } from "@proto/kit";
import { mcpRoute } from "@proto/kit/fastify";
import { ProtoError } from "@proto/protocol";
import type { FastifyInstance } from "fastify";
import { z } from "zod";
import type { Note, NotesStore } from "./notes-store.js";

export const MCP_PATH = "/mcp";
/**
 * The scope every token of the endpoint carries: a declared permission (`notes:read`), since the
 * attestor grants only scopes the service declares. Each tool checks its own permission.
 */
export const MCP_SCOPE = "notes:read";

type ToolResult = { content: { type: "text"; text: string }[]; isError?: boolean };

const text = (value: unknown): ToolResult => ({
  content: [{ type: "text", text: typeof value === "string" ? value : JSON.stringify(value, null, 2) }],
});
const refusal = (message: string): ToolResult => ({ ...text(message), isError: true });

interface ToolOptions {
  kit: Kit;
  now: () => number;
  parseText: (body: Record<string, unknown>) => string;
}

/**
 * Runs a tool once the caller holds `permissions`; a refusal is the tool's error, the protocol's
 * envelope as its text (`insufficient_permission` names what to ask the person for, and where).
 */
async function permitted(
  kit: Kit,
  caller: BearerContext,
  permissions: string[],
  run: () => Promise<ToolResult>,
): Promise<ToolResult> {
  try {
    kit.requirePermissions(caller, permissions);
  } catch (error) {
    if (error instanceof ProtoError) return { ...text(error.toEnvelope()), isError: true };
    throw error;
  }
  return run();
}

function noteView(note: Note) {
  return {
    id: note.id,
    account_id: note.accountId,
    text: note.text,
    created_at: new Date(note.createdAt).toISOString(),
    pinned: note.pinned,
  };
}

/** The accounts a caller may read and write: an agent's own, or a person's (owned or attested). */
async function accountsOf(caller: BearerContext): Promise<string[]> {
  if (caller.kind === "agent") return [caller.account.account_id];
  return (await caller.accounts()).map((a) => a.account_id);
}

/** An MCP server for one request's caller: its tools close over who is calling. */
export function notesMcpServer(caller: BearerContext, notes: NotesStore, options: ToolOptions): McpServer {
  const { kit } = options;
  const server = new McpServer({ name: "notes", version: "0.1.0" });

  server.registerTool(
    "whoami",
    {
      title: "Who am I here",
      description: "Who the service sees: an agent or a person, and the pseudonymous subject the attestor gave it.",
    },
    async () =>
      text({
        kind: caller.kind,
        issuer: caller.issuer,
        subject: caller.subject,
        agent_did: caller.agentDid ?? null,
        client_id: caller.clientId,
        accounts: await accountsOf(caller),
      }),
  );

  server.registerTool(
    "list_notes",
    {
      title: "List notes",
      description: "The newest notes of the caller's account (an agent) or of every account the person owns.",
      annotations: { readOnlyHint: true },
    },
    () =>
      permitted(kit, caller, ["notes:read"], async () => {
        const lists = await Promise.all((await accountsOf(caller)).map((id) => notes.list(id)));
        return text({ notes: lists.flat().map(noteView) });
      }),
  );

  server.registerTool(
    "add_note",
    {
      title: "Add a note",
      description:
        "Writes a note (at most 2,000 characters). A person with several accounts names one with account_id.",
      inputSchema: { text: z.string(), account_id: z.string().max(64).optional() },
    },
    ({ text: noteText, account_id }) =>
      permitted(kit, caller, ["notes:write"], async () => {
        const accounts = await accountsOf(caller);
        const account = account_id ?? (accounts.length === 1 ? accounts[0] : undefined);
        if (account === undefined) {
          return refusal(
            accounts.length === 0
              ? "no account acts for you here yet: claim an agent's account first"
              : `name the account with account_id, one of: ${accounts.join(", ")}`,
          );
        }
        if (!accounts.includes(account)) return refusal("that account is not yours");
        let parsed: string;
        try {
          parsed = options.parseText({ text: noteText });
        } catch (error) {
          return refusal(error instanceof Error ? error.message : "the note is not acceptable");
        }
        return text(noteView(await notes.add(account, parsed, options.now())));
      }),
  );

  server.registerTool(
    "delete_note",
    {
      title: "Delete a note",
      description:
        "Deletes one note by its id. Needs the notes:delete permission, which the person approves with a passkey.",
      inputSchema: { id: z.string().max(64) },
      annotations: { destructiveHint: true, idempotentHint: true },
    },
    ({ id }) =>
      permitted(kit, caller, ["notes:delete"], async () => {
        for (const account of await accountsOf(caller)) {
          if (await notes.remove(account, id)) return text({ deleted: 1 });
        }
        return refusal("no note of yours has that id");
      }),
  );

  return server;
}

/**
 * Mounts `/mcp` and its RFC 9728 metadata. Stateless: each request gets a server and a
 * transport of its own (no session to keep, so any replica answers any request).
 */
export function mountMcp(app: FastifyInstance, kit: Kit, notes: NotesStore, options: Omit<ToolOptions, "kit">): void {
  mcpRoute(app, kit, { path: MCP_PATH, scopes: [MCP_SCOPE], resourceName: "Notes" }, async (request, reply) => {
    const caller = request.bearer;
    if (caller === undefined || caller === null) throw new Error("the bearer hook did not run");
    const server = notesMcpServer(caller, notes, { ...options, kit });
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    reply.hijack();
    reply.raw.on("close", () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(request.raw, reply.raw, request.body);
  });
}
