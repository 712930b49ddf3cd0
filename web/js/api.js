// Talking to vigil-server: fetch wrapper (CSRF header, error mapping),
// the signed-in session (csrf kept in memory only), the #error banner,
// and live updates over server-sent events with a 5 s polling fallback.

// Who is signed in; re-read from GET /api/v1/session on load.
export const session = { name: 'anonymous', role: 'viewer', csrf: null, via: 'anonymous' };

// True when the session's role may act (operator or admin).
export const canAct = () => session.role === 'operator' || session.role === 'admin';
export const cannotActTitle = () => `your role (${session.role}) cannot act`;

// A failed API call: HTTP status (0: unreachable) and a plain message.
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// --- #error banner: one message per source, shown together. ---
const errors = new Map();
function renderErrors() {
  const el = document.getElementById('error');
  const text = [...errors.values()].join(' · ');
  el.textContent = text;
  el.hidden = text === '';
}
// Shows `message` in #error under `key` (replacing that key's message).
export function showError(key, message) {
  errors.set(key, message);
  renderErrors();
}
// Removes `key`'s message from #error.
export function clearError(key) {
  if (errors.delete(key)) renderErrors();
}
// Removes every message except those of `keep`.
export function clearErrorsExcept(...keep) {
  for (const k of [...errors.keys()]) if (!keep.includes(k)) errors.delete(k);
  renderErrors();
}

// Shows a failed call's message under `key`; unreachable-server errors
// are already shown once under "network".
export function reportError(error, key = 'page') {
  if (error instanceof ApiError && error.status === 0) return;
  showError(key, error instanceof ApiError ? error.message : `unexpected error: ${error.message}`);
  if (!(error instanceof ApiError)) console.error(error);
}

// --- live indicator ---
let reachable = true;
let sseOpen = false;
function renderLive() {
  const el = document.getElementById('live');
  const state = !reachable ? 'offline' : sseOpen ? 'live' : 'polling';
  el.dataset.state = state;
  el.textContent = state;
  el.title = { live: 'live updates (server-sent events)', polling: 'refreshing every 5 s',
    offline: 'server unreachable' }[state];
}
function setReachable(ok) {
  if (ok === reachable) return;
  reachable = ok;
  if (ok) clearError('network');
  else showError('network', 'server unreachable — retrying');
  renderLive();
}

// Called with the message when a request gets 401 (session gone).
let onUnauthorized = () => {};
export function setUnauthorizedHandler(fn) { onUnauthorized = fn; }

function describe(status, message, method, path) {
  if (status === 401) return `not signed in: ${message}`;
  if (status === 403) return `permission denied: ${message}`;
  if (status === 404) return `not found: ${message}`;
  if (status === 409) return `conflict: ${message}`;
  if (status >= 400 && status < 500) return `rejected (${status}): ${message}`;
  return `server error (${status}) on ${method} ${path}: ${message}`;
}

// Calls the API. Resolves to the parsed JSON body (null when empty);
// rejects with ApiError carrying a message fit for #error. A 401 also
// calls the unauthorized handler unless `opts.login` is set.
export async function api(path, { method = 'GET', body, login = false } = {}) {
  const headers = { Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (method !== 'GET' && session.csrf) headers['X-CSRF-Token'] = session.csrf;
  let res;
  try {
    res = await fetch(path, {
      method, headers, credentials: 'same-origin',
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch {
    setReachable(false);
    throw new ApiError(0, 'server unreachable — retrying');
  }
  setReachable(true);
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { /* not JSON */ }
  if (res.ok) return data;
  const serverMessage = (data && data.error) || text.trim().slice(0, 200) ||
    `${res.status} ${res.statusText} for ${method} ${path.split('?')[0]}`;
  const error = new ApiError(res.status, describe(res.status, serverMessage, method, path.split('?')[0]));
  if (res.status === 401 && !login) {
    // The cookie is no longer valid: forget who we were.
    Object.assign(session, { name: 'anonymous', role: 'viewer', csrf: null, via: 'anonymous' });
    onUnauthorized(method === 'GET'
      ? `sign in to continue: ${serverMessage}`
      : `your session has expired — sign in again (${serverMessage})`);
  }
  throw error;
}

// Re-reads the session. Resolves to true when known (signed in or
// anonymous reads allowed), false on 401.
export async function loadSession() {
  try {
    const s = await api('/api/v1/session', { login: true });
    Object.assign(session, { name: s.name, role: s.role, csrf: s.csrf ?? null, via: s.via || 'session' });
    clearError('session');
    return true;
  } catch (e) {
    Object.assign(session, { name: 'anonymous', role: 'viewer', csrf: null, via: 'anonymous' });
    if (e.status === 401) return false;
    showError('session', `cannot read the session: ${e.message}`);
    return true;
  }
}

// Signs in with an API token; the cookie is set by the server.
export async function login(token) {
  const s = await api('/api/v1/session', { method: 'POST', body: { token }, login: true });
  Object.assign(session, { name: s.name, role: s.role, csrf: s.csrf ?? null, via: 'session' });
}

// Signs out (clears the cookie) and forgets the csrf value.
export async function logout() {
  await api('/api/v1/session', { method: 'DELETE', login: true });
  Object.assign(session, { name: 'anonymous', role: 'viewer', csrf: null, via: 'anonymous' });
}

// Live updates: `onIncident(event)` for every SSE incident event,
// `onTick()` every 5 s while the stream is down (polling), and once
// whenever it reconnects so that nothing missed in between is lost.
let handlers = null;
let source = null;       // the current EventSource
let pollTimer = null;
let retryTimer = null;

function startPolling() {
  if (!pollTimer) pollTimer = setInterval(() => handlers.onTick(), 5000);
}
function stopPolling() {
  clearInterval(pollTimer);
  pollTimer = null;
}

function connect() {
  source?.close();
  clearTimeout(retryTimer);
  sseOpen = false;
  renderLive();
  if (typeof EventSource === 'undefined') return startPolling();
  const es = source = new EventSource('/api/v1/events');
  let wasDown = false;
  es.addEventListener('hello', () => {
    if (es !== source) return;
    sseOpen = true;
    setReachable(true);
    renderLive();
    stopPolling();
    if (wasDown) handlers.onTick();
    wasDown = false;
  });
  es.addEventListener('incident', (e) => {
    let data = null;
    try { data = JSON.parse(e.data); } catch { /* ignore malformed */ }
    if (data && es === source) handlers.onIncident(data);
  });
  es.onerror = () => {
    if (es !== source) return;
    sseOpen = false;
    wasDown = true;
    renderLive();
    startPolling();
    // CLOSED: the server refused the stream (503 when too many are open,
    // 401...) and EventSource gives up: poll, and try again in a minute.
    if (es.readyState === EventSource.CLOSED) retryTimer = setTimeout(connect, 60000);
  };
}

// Sets the live-update callbacks and connects the stream; with
// `connectNow` false (not signed in yet) polls until restartLive().
export function startLive(onIncident, onTick, connectNow = true) {
  handlers = { onIncident, onTick };
  if (connectNow) return connect();
  renderLive();
  startPolling();
}

// Reopens the event stream (after signing in or out: new identity).
export function restartLive() {
  if (handlers) connect();
}
