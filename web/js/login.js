// Login page (#/login): exchanges an API token for a session cookie
// (POST /api/v1/session). The token itself is never stored by the page.
import { clearError, login, reportError, restartLive, session } from './api.js';

export function mount(root, _arg, { onSession }) {
  root.innerHTML = `
    <section class="login card">
      <h2>Sign in</h2>
      <p class="muted">Paste your Vigil API token. Signing in sets an HttpOnly session cookie;
        this page does not keep the token. Viewers can look; operators can also act.</p>
      <form id="login-form" autocomplete="off">
        <label>API token <input name="token" type="password" required autocomplete="current-password"></label>
        <button type="submit" class="primary">Sign in</button>
      </form>
      <p class="muted" data-field="current"></p>
    </section>`;
  const form = root.querySelector('#login-form');
  const current = root.querySelector('[data-field=current]');
  current.textContent = session.via === 'session'
    ? `Signed in as ${session.name} (${session.role}); signing in again replaces that session.` : '';
  form.token.focus();
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const button = form.querySelector('button');
    button.disabled = true;
    try {
      await login(form.token.value);
      form.token.value = '';
      clearError('auth');
      clearError('page');
      onSession();
      restartLive();
      location.hash = '#/overview';
    } catch (err) {
      reportError(err);
    } finally {
      button.disabled = false;
    }
  });
  return {};
}
