/** `proto-gate check`: the configuration parsed (the caller did that), then the upstream and each attestor probed. */
import type { GateConfig } from "./config-types.js";

const PROBE_MS = 5000;

async function probe(url: string): Promise<string | undefined> {
  try {
    const response = await fetch(url, { method: "GET", redirect: "manual", signal: AbortSignal.timeout(PROBE_MS) });
    await response.body?.cancel();
    return undefined;
  } catch (error) {
    const cause = (error as { cause?: { code?: string; message?: string } }).cause;
    return cause?.code ?? cause?.message ?? (error as Error).message;
  }
}

/** Prints a line per check; true when every one passed. */
export async function checkConfig(config: GateConfig, print: (line: string) => void): Promise<boolean> {
  print(`ok   ${config.file ?? "configuration"}: ${config.routes.length} route(s), ${config.mcp.length} MCP path(s)`);
  let ok = true;
  const upstream = await probe(config.upstream.url);
  if (upstream === undefined) print(`ok   upstream ${config.upstream.url} answers`);
  else {
    ok = false;
    print(`FAIL upstream ${config.upstream.url} does not answer: ${upstream}`);
  }
  for (const [name, attestor] of Object.entries(config.attestors)) {
    const problem = await probe(`${attestor.url.replace(/\/$/, "")}/.well-known/openid-configuration`);
    if (problem === undefined) print(`ok   attestor ${name} (${attestor.url}) answers`);
    else {
      ok = false;
      print(`FAIL attestor ${name} (${attestor.url}) does not answer: ${problem}`);
    }
  }
  return ok;
}
