import fs from 'node:fs';
import { type Browser, chromium } from 'playwright-core';

/** Debian's Chromium (CI installs it); CHROMIUM_PATH points elsewhere. */
export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

/**
 * Headless Chromium through playwright-core. A missing browser fails the
 * test with the fix, rather than skipping it: the console's pages are only
 * proven in a real browser.
 */
export async function launchChromium(): Promise<Browser> {
  if (!fs.existsSync(CHROMIUM)) {
    throw new Error(
      `Chromium not found at ${CHROMIUM}: the console's browser tests need it. Install it (Debian: apt-get install chromium) or set CHROMIUM_PATH.`,
    );
  }
  return chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
}
