// Launches Debian's Chromium headless through playwright-core (no browser
// download), with a fresh profile that is deleted on close.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

// Flags that keep Chromium quiet and self-contained on a CI box without a
// GPU, a sandbox-capable kernel setup or network access.
const CHROMIUM_ARGS = [
  '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
];

// Profiles of browsers not closed yet: removed if the process exits first
// (Playwright kills the browsers themselves).
const openProfiles = new Set();
process.on('exit', () => {
  for (const dir of openProfiles) rmSync(dir, { recursive: true, force: true });
});

// Starts the browser; `options` are passed to launchPersistentContext
// (viewport, colorScheme, ...). Returns {context, close}. Throws with the
// path when VIGIL_CHROMIUM (default /usr/bin/chromium) cannot be started.
export async function launchBrowser(options = {}) {
  const executablePath = process.env.VIGIL_CHROMIUM || '/usr/bin/chromium';
  const profile = mkdtempSync(join(tmpdir(), 'vigil-chromium-'));
  openProfiles.add(profile);
  let context;
  try {
    context = await chromium.launchPersistentContext(profile, {
      executablePath, headless: true, args: CHROMIUM_ARGS, ...options,
    });
  } catch (e) {
    rmSync(profile, { recursive: true, force: true });
    openProfiles.delete(profile);
    throw new Error(`cannot start ${executablePath}: ${e.message}`);
  }
  return {
    context,
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
      openProfiles.delete(profile);
    },
  };
}
