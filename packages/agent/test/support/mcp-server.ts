/**
 * A small MCP server for the agent's tests: the MCP SDK's `McpServer` and
 * `StreamableHTTPServerTransport` (stateless) on node:http behind a TLS front, guarded the way
 * an OAuth-protected MCP server is: a bearer access token verified with jose against the issuing
 * attestor's key set (`typ` at+jwt, `iss` the attestor, `aud` this server's URL), else a 401
 * naming its RFC 9728 metadata, which lists the attestors it takes tokens from. Its discovery
 * document declares `tools` a default permission: the scope an attestor may grant an agent here.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AuthInfo } from "@modelcontextprotocol/sdk/server/auth/types.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { PROTO_VERSION } from "@proto/protocol";
import type { TestCA } from "@proto/testkit";
import { DISCOVERY_PATH, testFetch } from "@proto/testkit";
import { createRemoteJWKSet, customFetch, decodeJwt, type JWTPayload, jwtVerify } from "jose";
import { z } from "zod";
import { startTlsFront } from "./env.js";

export const METADATA_PATH = "/.well-known/oauth-protected-resource/mcp";

export interface TestMcpServer {
  /** `https://127.0.0.1:PORT/mcp`: the resource, the audience its tokens must have. */
  url: string;
  metadataUrl: string;
  /** The attestors its metadata lists (`authorization_servers`), in order; changed by tests. */
  authorizationServers: string[];
  /** False: no RFC 9728 metadata (404), as a server not protected by any attestor would have it. */
  serveMetadata: boolean;
  /** True: every token is refused (401 invalid_token), as by a server that does not trust its attestor. */
  refuseTokens: boolean;
  /** The claims of every access token it accepted, one entry per request. */
  accepted: JWTPayload[];
  close(): Promise<void>;
}

export interface McpServerOptions {
  /** Gives the server its tools (default: echo, whoami and fail). */
  tools?: (server: McpServer) => void;
}

/** The tools of most tests: echo, whoami (the access token's claims) and fail. */
function defaultTools(mcp: McpServer): void {
  mcp.registerTool(
    "echo",
    { description: "Repeats the text it is given", inputSchema: { text: z.string() } },
    async ({ text }) => ({ content: [{ type: "text", text }] }),
  );
  mcp.registerTool(
    "whoami",
    { description: "Who calls: the person's pseudonym and the agent acting for them\n(from the access token)" },
    async (extra) => {
      const seen = extra.authInfo?.extra?.claims as JWTPayload & { act?: { sub?: string }; client_id?: string };
      const who = { sub: seen.sub, act_sub: seen.act?.sub, client_id: seen.client_id, scope: seen.scope };
      return { content: [{ type: "text", text: JSON.stringify(who) }] };
    },
  );
  mcp.registerTool("fail", { description: "Always answers with an error" }, async () => ({
    isError: true,
    content: [{ type: "text", text: "this tool always fails" }],
  }));
}

/** Starts the server; it verifies tokens of the `trusted` attestors (by their key sets). */
export async function startMcpServer(
  ca: TestCA,
  trusted: string[],
  options: McpServerOptions = {},
): Promise<TestMcpServer> {
  let port = 0;
  const front = await startTlsFront(ca, () => port);
  const jwksFetch = testFetch(ca);
  const keySets = new Map(
    trusted.map((url) => [
      url,
      createRemoteJWKSet(new URL(`${url}/.well-known/jwks.json`), {
        [customFetch]: (input, init) => jwksFetch(input, init) as unknown as Promise<Response>,
      }),
    ]),
  );
  const state: TestMcpServer = {
    url: `${front.url}/mcp`,
    metadataUrl: `${front.url}${METADATA_PATH}`,
    authorizationServers: [...trusted],
    serveMetadata: true,
    refuseTokens: false,
    accepted: [],
    close: async () => {
      await new Promise<void>((done) => server.close(() => done()));
      server.closeAllConnections();
      await front.close();
      await jwksFetch.close();
    },
  };

  const verify = async (token: string): Promise<JWTPayload> => {
    if (state.refuseTokens) throw new Error("refused");
    const iss = decodeJwt(token).iss ?? "";
    const keySet = keySets.get(iss);
    if (keySet === undefined) throw new Error(`tokens of ${iss} are not trusted here`);
    const { payload } = await jwtVerify(token, keySet, { typ: "at+jwt", issuer: iss, audience: state.url });
    return payload;
  };

  const json = (res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void => {
    res.writeHead(status, { "content-type": "application/json", ...headers }).end(JSON.stringify(body));
  };

  const handle = async (req: IncomingMessage & { auth?: AuthInfo }, res: ServerResponse): Promise<void> => {
    const path = new URL(req.url ?? "/", front.url).pathname;
    if (path === METADATA_PATH && state.serveMetadata) {
      return json(res, 200, {
        resource: state.url,
        authorization_servers: state.authorizationServers,
        scopes_supported: ["tools"],
        bearer_methods_supported: ["header"],
      });
    }
    if (path === DISCOVERY_PATH) {
      return json(res, 200, {
        proto_version: PROTO_VERSION,
        service_did: `did:web:${new URL(front.url).host.replace(":", "%3A")}`,
        permissions: { tools: { description: "Use the tools", default: true } },
      });
    }
    if (path !== "/mcp") return json(res, 404, { error: "not_found" });
    const challenge = `Bearer resource_metadata="${state.metadataUrl}", scope="tools"`;
    const header = req.headers.authorization ?? "";
    if (!header.startsWith("Bearer ")) {
      return json(res, 401, { error: "invalid_token" }, { "www-authenticate": challenge });
    }
    const token = header.slice("Bearer ".length);
    let claims: JWTPayload;
    try {
      claims = await verify(token);
    } catch {
      return json(res, 401, { error: "invalid_token" }, { "www-authenticate": `${challenge}, error="invalid_token"` });
    }
    state.accepted.push(claims);
    // Stateless: no server-to-client stream.
    if (req.method !== "POST") return json(res, 405, { error: "method_not_allowed" }, { allow: "POST" });

    const mcp = new McpServer({ name: "test-mcp", version: "1.0.0" });
    (options.tools ?? defaultTools)(mcp);
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    res.on("close", () => {
      void transport.close();
      void mcp.close();
    });
    await mcp.connect(transport);
    req.auth = {
      token,
      clientId: String(claims.client_id ?? ""),
      scopes: String(claims.scope ?? "")
        .split(" ")
        .filter((s) => s !== ""),
      ...(claims.exp === undefined ? {} : { expiresAt: claims.exp }),
      extra: { claims },
    };
    await transport.handleRequest(req, res);
  };

  const server = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      if (!res.headersSent) json(res, 500, { error: "server_error", error_description: String(error) });
    });
  });
  await new Promise<void>((ready) => server.listen(0, "127.0.0.1", ready));
  port = (server.address() as { port: number }).port;
  return state;
}
