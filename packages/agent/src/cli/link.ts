/**
 * `proto trust link`: start a link request, show the link (URL, QR code, browser), then wait for
 * the person: by polling (spinner on a terminal), or through a one-shot loopback callback.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { AttestorClient, LinkPhase } from "../attestor.js";
import { AuthError } from "../errors.js";
import type { BindingRecord } from "../store.js";
import { type Output, Spinner } from "./output.js";
import { showLink } from "./show-link.js";

export interface LinkCommandOptions {
  label?: string;
  /** `--no-browser` sets it false. */
  browser: boolean;
  callback: boolean;
}

const PHASE_TEXT: Record<LinkPhase, string> = {
  awaiting_signin: "waiting for the person to sign in and confirm",
  awaiting_confirm: "link page opened; waiting for confirmation",
};

/** A browser is opened only for a person at a terminal with a display, never in CI or tests. */
export function canOpenBrowser(wanted: boolean, out: Output, env: NodeJS.ProcessEnv = process.env): boolean {
  if (!wanted || !out.interactive) return false;
  if (env.CI !== undefined && env.CI !== "" && env.CI !== "0" && env.CI !== "false") return false;
  if (process.platform === "linux" && !env.DISPLAY && !env.WAYLAND_DISPLAY) return false;
  return true;
}

export async function runLink(
  attestor: AttestorClient,
  options: LinkCommandOptions,
  out: Output,
  signal: AbortSignal,
): Promise<BindingRecord> {
  const callback = options.callback ? await startCallbackServer() : undefined;
  try {
    const request = await attestor.linkStart({
      ...(options.label === undefined ? {} : { label: options.label }),
      ...(callback === undefined ? {} : { callbackUrl: callback.url }),
      signal,
    });
    await showLink(
      out,
      request.link_url,
      `Open this link to confirm this agent (it expires in ${Math.round(request.expires_in / 60)} minutes):`,
      {
        event: "link_started",
        req_id: request.req_id,
        link_url: request.link_url,
        expires_in: request.expires_in,
        ...(callback === undefined ? {} : { callback_url: callback.url }),
      },
    );
    if (canOpenBrowser(options.browser, out)) {
      try {
        const { default: open } = await import("open");
        await open(request.link_url, { wait: false });
      } catch {
        out.note("(could not open a browser; open the link yourself)");
      }
    }
    const deadline = Date.now() + request.expires_in * 1000;
    if (callback !== undefined) {
      out.event(
        { event: "waiting", via: "callback" },
        `Waiting for the confirmation to come back to ${callback.url} (confirm in a browser on this machine)...`,
      );
      const arrived = await callback.wait(request.req_id, deadline, signal);
      // One poll delivers the binding; a pending answer (a stray or early request) falls back to polling.
      const result = await attestor.pollOnce(request.req_id, signal);
      if (result.state === "confirmed") return attestor.binding() as BindingRecord;
      if (!arrived) throw new AuthError("link_request_expired", "the link request expired before it was confirmed");
    }
    return await pollWithProgress(attestor, request.req_id, out, signal);
  } finally {
    await callback?.close();
  }
}

async function pollWithProgress(
  attestor: AttestorClient,
  reqId: string,
  out: Output,
  signal: AbortSignal,
): Promise<BindingRecord> {
  const spinner = out.interactive ? new Spinner(out.stdout) : undefined;
  let lastPhase: LinkPhase | undefined | null = null;
  if (spinner) spinner.start(PHASE_TEXT.awaiting_signin);
  else out.event({ event: "waiting", via: "poll" }, "Waiting for confirmation...");
  try {
    return await attestor.linkPoll(reqId, {
      signal,
      onPending: ({ phase }) => {
        if (phase === lastPhase) return;
        lastPhase = phase;
        const text = PHASE_TEXT[phase ?? "awaiting_signin"];
        if (spinner) spinner.update(text);
        else out.event({ event: "pending", phase: phase ?? null }, `... ${text}`);
      },
    });
  } finally {
    spinner?.stop();
  }
}

interface CallbackServer {
  url: string;
  /** Resolves true on a matching confirmation, false at the deadline. */
  wait(reqId: string, deadline: number, signal: AbortSignal): Promise<boolean>;
  close(): Promise<void>;
}

const PAGE = (title: string, text: string) =>
  `<!doctype html><meta charset="utf-8"><title>${title}</title><body style="font-family:system-ui;margin:3rem"><h1>${title}</h1><p>${text}</p></body>`;

/** A one-shot HTTP server on 127.0.0.1 that receives `?req_id&state=confirmed&binding_id`. */
async function startCallbackServer(): Promise<CallbackServer> {
  let expected: string | undefined;
  let notify: (() => void) | undefined;
  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://127.0.0.1");
    const matches =
      req.method === "GET" &&
      url.pathname === "/callback" &&
      expected !== undefined &&
      url.searchParams.get("req_id") === expected &&
      url.searchParams.get("state") === "confirmed";
    res.setHeader("content-type", "text/html; charset=utf-8");
    res.setHeader("cache-control", "no-store");
    if (!matches) {
      res.statusCode = 400;
      res.end(PAGE("Not this link request", "This address only receives the confirmation of one link request."));
      return;
    }
    res.end(PAGE("Agent linked", "You can close this tab and return to your terminal."));
    notify?.();
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/callback`,
    wait(reqId, deadline, signal) {
      expected = reqId;
      return new Promise<boolean>((resolve, reject) => {
        const finish = (outcome: boolean | Error) => {
          clearTimeout(timer);
          signal.removeEventListener("abort", onAbort);
          notify = undefined;
          if (outcome instanceof Error) reject(outcome);
          else resolve(outcome);
        };
        const onAbort = () => finish(signal.reason instanceof Error ? signal.reason : new Error("aborted"));
        const timer = setTimeout(() => finish(false), Math.max(0, deadline - Date.now()));
        notify = () => finish(true);
        if (signal.aborted) onAbort();
        else signal.addEventListener("abort", onAbort, { once: true });
      });
    },
    close() {
      return new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}
