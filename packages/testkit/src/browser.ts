import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { type Browser, type CDPSession, chromium, type Page } from "playwright-core";

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

/** The widths people read pages at: a desktop window and a phone. */
export const VIEWPORTS = [
  { name: "desktop", width: 1280, height: 800 },
  { name: "phone", width: 390, height: 844 },
] as const;

/**
 * What a picky person checks first on a page, at each width of `VIEWPORTS`: nothing wider than the
 * screen. A full-page screenshot of each goes to `SCREENSHOT_DIR/<name>-<viewport>.png` when
 * `SCREENSHOT_DIR` is set, for a person to look at. The page keeps the last (phone) size.
 */
export async function lookAt(page: Page, name: string): Promise<void> {
  const dir = process.env.SCREENSHOT_DIR;
  for (const viewport of VIEWPORTS) {
    await page.setViewportSize({ width: viewport.width, height: viewport.height });
    const overflow = Number(await page.evaluate("document.documentElement.scrollWidth - window.innerWidth"));
    if (overflow > 0) throw new Error(`${name} is ${overflow}px wider than a ${viewport.name} screen`);
    if (dir !== undefined) {
      mkdirSync(dir, { recursive: true });
      await page.screenshot({ path: join(dir, `${name}-${viewport.name}.png`), fullPage: true });
    }
  }
}

/** A passkey device in Chromium: a virtual authenticator of the DevTools protocol. */
export interface VirtualAuthenticator {
  cdp: CDPSession;
  id: string;
}

/**
 * Adds to `page` a platform authenticator (resident keys, user verification) that answers every
 * WebAuthn prompt by itself, as a person with a phone or laptop would. Chromium allows one such
 * authenticator per browser context at a time.
 */
export async function addVirtualAuthenticator(page: Page): Promise<VirtualAuthenticator> {
  const cdp = await page.context().newCDPSession(page);
  await cdp.send("WebAuthn.enable");
  const { authenticatorId } = await cdp.send("WebAuthn.addVirtualAuthenticator", {
    options: {
      protocol: "ctap2",
      transport: "internal",
      hasResidentKey: true,
      hasUserVerification: true,
      isUserVerified: true,
      automaticPresenceSimulation: true,
    },
  });
  return { cdp, id: authenticatorId };
}

/**
 * A browser without passkey autofill (conditional mediation), as an init script: Chromium's
 * virtual authenticator answers an autofill request at once, before a test could press anything.
 */
export const NO_PASSKEY_AUTOFILL = "PublicKeyCredential.isConditionalMediationAvailable = async () => false;";
