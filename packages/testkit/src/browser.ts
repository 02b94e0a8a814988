import { existsSync } from "node:fs";
import { type Browser, chromium } from "playwright-core";

/** Debian's Chromium (`apt-get install chromium`); `CHROMIUM_PATH` points elsewhere. */
export const CHROMIUM_PATH = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";

/** The flags this machine's closed network needs (see DEVELOPERS.md). */
const CHROMIUM_ARGS = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-background-networking",
  "--disable-component-update",
  "--no-first-run",
  "--disable-sync",
];

/**
 * A headless Chromium, or the reason browser tests are skipped. Where CI installed Chromium, a
 * browser that exists but does not start is a failure, never a skip.
 */
export async function launchChromium(extraArgs: string[] = []): Promise<{ browser?: Browser; skip?: string }> {
  if (!existsSync(CHROMIUM_PATH)) {
    return { skip: `Chromium not found at ${CHROMIUM_PATH} (apt-get install chromium)` };
  }
  try {
    return {
      browser: await chromium.launch({ executablePath: CHROMIUM_PATH, args: [...CHROMIUM_ARGS, ...extraArgs] }),
    };
  } catch (error) {
    if (process.env.CI) throw error;
    return { skip: `Chromium at ${CHROMIUM_PATH} did not start: ${(error as Error).message.split("\n")[0]}` };
  }
}
