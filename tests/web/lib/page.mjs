// Page helpers for the browser tests: signing in through the login form,
// collecting the page's script errors, screenshots at desktop and phone
// size.
import { mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';

export const DESKTOP = { width: 1280, height: 800 };
export const PHONE = { width: 390, height: 844 };

// Where screenshots go: $VIGIL_SCREENSHOTS, or null (no screenshots).
export const SHOT_DIR = process.env.VIGIL_SCREENSHOTS ? resolve(process.env.VIGIL_SCREENSHOTS) : null;

// Starts recording the page's uncaught exceptions and console errors;
// `assertNoErrors` reports them.
export function watchErrors(page) {
  page.vigilErrors = [];
  page.on('pageerror', (e) => page.vigilErrors.push(`uncaught: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error') {
      const where = m.location()?.url ? ` (${m.location().url})` : '';
      page.vigilErrors.push(`console.error: ${m.text()}${where}`);
    }
  });
}

// Throws listing the errors recorded since the last call, except those
// matching one of `allowed` (regexps: e.g. the browser's own "Failed to
// load resource ... 403" line for a request that is meant to be refused).
// Clears the record.
export function assertNoErrors(page, what, allowed = []) {
  const errors = page.vigilErrors.filter((e) => !allowed.some((re) => re.test(e)));
  page.vigilErrors = [];
  if (errors.length) throw new Error(`${what}: ${errors.length} script error(s):\n  ${errors.join('\n  ')}`);
}

// The line Chromium logs for an HTTP error answer (status `code`).
export const httpErrorLine = (code) => new RegExp(`Failed to load resource: .*status of ${code}\\b`);

// Resolves after the browser painted twice (layout after a resize or a
// re-render has happened).
export async function painted(page) {
  await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
}

// Signs in through #/login with `token`; waits until #whoami reads
// "NAME (ROLE)".
export async function signIn(page, baseUrl, user) {
  await page.goto(`${baseUrl}/#/login`);
  const form = page.locator('form#login-form');
  await form.waitFor();
  await form.locator('input[name=token]').fill(user.token);
  await form.locator('button[type=submit], input[type=submit]').first().click();
  await page.locator('#whoami', { hasText: `${user.name} (${user.role})` }).waitFor({ timeout: 10_000 });
}

// Saves the page at desktop and phone size as DIR/NAME-desktop.png and
// DIR/NAME-phone.png (NAME-desktop-SUFFIX.png with `suffix`, desktop only
// with `desktopOnly`), when SHOT_DIR is set. The viewport is back at
// desktop size afterwards. `ready` (optional) is awaited after each
// resize, before the shot.
export async function screenshots(page, name, { suffix = '', desktopOnly = false, fullPage = false, ready } = {}) {
  if (!SHOT_DIR) return;
  mkdirSync(SHOT_DIR, { recursive: true });
  await page.evaluate(() => document.activeElement?.blur());  // no focus ring in the pictures
  const sizes = desktopOnly ? [['desktop', DESKTOP]] : [['desktop', DESKTOP], ['phone', PHONE]];
  for (const [kind, size] of sizes) {
    await page.setViewportSize(size);
    if (ready) await ready();
    await painted(page);
    const file = join(SHOT_DIR, `${name}-${kind}${suffix ? `-${suffix}` : ''}.png`);
    await page.screenshot({ path: file, fullPage, animations: 'disabled', caret: 'hide' });
  }
  await page.setViewportSize(DESKTOP);
  await painted(page);
}
