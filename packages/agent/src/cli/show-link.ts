/**
 * A link a person opens (to link the agent, to approve a request): the URL on its own line, a QR
 * code for a phone, and a word when only this machine can open it.
 */
import type { Output } from "./output.js";
import { inline } from "./terminal-text.js";

/** A link URL only this machine can open (the attestor runs here, in development). */
export function isLoopback(url: string): boolean {
  const host = new URL(url).hostname;
  return host === "localhost" || host.endsWith(".localhost") || host === "[::1]" || /^127\.\d+\.\d+\.\d+$/.test(host);
}

/**
 * Prints `heading`, the link and its QR code (human output), or `event` as a JSON line on stderr
 * (`--json`: a script shows the link from there).
 */
export async function showLink(
  out: Output,
  url: string,
  heading: string,
  event: Record<string, unknown>,
): Promise<void> {
  // Loaded here, not at startup: every other command stays quicker without it.
  const qr = out.json ? "" : await (await import("qrcode")).default.toString(url, { type: "terminal", small: true });
  out.event(event, [heading, "", `  ${inline(url)}`, ""]);
  // The QR code's colours are escape sequences of our own: written apart from the attestor's text.
  out.drawing(qr.trimEnd());
  out.print([
    ...(isLoopback(url)
      ? [
          "This link points to this machine: a phone that scans the QR code cannot open it.",
          "Open it in a browser here.",
        ]
      : []),
    "",
  ]);
}
