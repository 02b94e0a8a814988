/** `proto mcp <url> [tool] [json-args]`: an MCP server's tools, listed or called with the agent's token. */
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import type { Tool } from "@modelcontextprotocol/sdk/types.js";
import type { Agent } from "../agent.js";
import { UsageError } from "../errors.js";
import { connectMcp, mcpError } from "../mcp.js";
import { findMcpEndpoint } from "../mcp-endpoint.js";
import { EXIT, errorLine, type Output, table } from "./output.js";
import { inline } from "./terminal-text.js";

export interface McpCommand {
  url: string;
  tool?: string | undefined;
  args?: string | undefined;
  attestor?: string | undefined;
}

type CallResult = Awaited<ReturnType<Client["callTool"]>>;

/** Runs the command and resolves to its exit code; failures throw (the CLI prints them on one line). */
export async function runMcp(agent: Agent, command: McpCommand, out: Output, signal: AbortSignal): Promise<number> {
  // Bad arguments are found before anything is sent.
  const args = command.tool === undefined ? undefined : parseArguments(command.args);
  let url = command.url;
  let client: Client | undefined;
  try {
    // A service's URL stands for its MCP endpoint, which its discovery document names.
    url = (await findMcpEndpoint(command.url, { ...agent.httpOptions(), signal })).url;
    client = await connectMcp(agent, url, {
      ...(command.attestor === undefined ? {} : { attestor: command.attestor }),
      signal,
    });
    const tools = await listTools(client, signal);
    if (command.tool === undefined) {
      printTools(out, { endpoint: url, given: command.url }, client, tools);
      return EXIT.ok;
    }
    const name = command.tool;
    if (!tools.some((tool) => tool.name === name)) {
      throw new UsageError(
        "unknown_tool",
        `${url} has no tool ${JSON.stringify(name)}; its tools: ${tools.map((t) => t.name).join(", ") || "none"}`,
      );
    }
    const result = await client.callTool({ name, arguments: args ?? {} }, undefined, { signal });
    out.result(result, describeResult(result));
    if (result.isError === true) {
      out.warn(errorLine({ code: "tool_error", message: `the tool ${name} answered with an error` }));
      return EXIT.server;
    }
    return EXIT.ok;
  } catch (error) {
    if (signal.aborted) throw signal.reason;
    throw mcpError(error, url);
  } finally {
    await client?.close().catch(() => {});
  }
}

/** The tool's arguments: one JSON object (`{}` when none are given). */
function parseArguments(text: string | undefined): Record<string, unknown> {
  if (text === undefined) return {};
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new UsageError("invalid_json", `the tool's arguments are not JSON: ${(error as Error).message}`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new UsageError("invalid_json", `the tool's arguments must be a JSON object, like '{"text": "hello"}'`);
  }
  return value as Record<string, unknown>;
}

/** Every page of `tools/list`. */
async function listTools(client: Client, signal: AbortSignal): Promise<Tool[]> {
  const tools: Tool[] = [];
  let cursor: string | undefined;
  do {
    const page = await client.listTools(cursor === undefined ? {} : { cursor }, { signal });
    tools.push(...page.tools);
    cursor = page.nextCursor;
  } while (cursor !== undefined);
  return tools;
}

/** `endpoint`: the MCP endpoint; `given`: the URL on the command line, to call a tool with. */
function printTools(out: Output, urls: { endpoint: string; given: string }, client: Client, tools: Tool[]): void {
  const url = urls.endpoint;
  if (tools.length === 0) {
    out.result({ url, server: client.getServerVersion() ?? null, tools }, `${url} offers no tools.`);
    return;
  }
  // On a terminal each tool keeps to one line; piped, the first line of each description is whole.
  const width = out.interactive ? (out.stdout.columns ?? 0) : 0;
  // Measured as printed: a server's control characters take the room of their visible escapes.
  const nameWidth = Math.max(4, ...tools.map((t) => inline(t.name).length));
  const room = width > 0 ? Math.max(20, width - nameWidth - 2) : Number.POSITIVE_INFINITY;
  const rows = tools.map((tool) => [tool.name, clip(inline(firstLine(tool.description ?? "")), room)]);
  out.result({ url, server: client.getServerVersion() ?? null, tools }, table([["TOOL", "DESCRIPTION"], ...rows]));
  out.note(`Call one with: proto mcp ${urls.given} TOOL '{"name": "value"}'`);
}

/** A tool result for a person: its text as text, other content named in brackets. */
function describeResult(result: CallResult): string[] {
  const content = Array.isArray(result.content) ? result.content : [];
  const lines = content.map((block) => {
    switch (block.type) {
      case "text":
        return block.text;
      case "image":
      case "audio":
        return `[${block.type} ${inline(block.mimeType)}, ${Math.floor((block.data.length * 3) / 4)} bytes]`;
      case "resource":
        return "text" in block.resource
          ? block.resource.text
          : `[resource ${inline(block.resource.uri)}${block.resource.mimeType ? ` ${inline(block.resource.mimeType)}` : ""}]`;
      case "resource_link":
        return `[resource link ${inline(block.uri)}${block.name ? ` (${inline(block.name)})` : ""}]`;
      default:
        return `[${inline((block as { type: string }).type)} content]`;
    }
  });
  if (lines.length === 0 && result.structuredContent !== undefined) {
    return [JSON.stringify(result.structuredContent, null, 2)];
  }
  return lines.map((line) => line.replace(/\n$/, ""));
}

function firstLine(text: string): string {
  return text.trim().split("\n")[0]?.trim() ?? "";
}

function clip(text: string, room: number): string {
  return text.length <= room ? text : `${text.slice(0, Math.max(0, room - 1))}…`;
}
