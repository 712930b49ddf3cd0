// Entry point: reads the session, renders the header, routes hash URLs
// (#/overview, the landing page, also for an empty or unknown hash;
// #/incidents, #/incidents/ID, #/jobs, #/jobs/NAME, #/nodes, #/nodes/NAME,
// #/silences, #/audit, #/login) to page modules and keeps the page live
// (SSE events debounced to one refresh per 300 ms, or polling every 5 s).
//
// A page module exports mount(root, arg) → {refresh(), wants?(ids)}:
// it renders into `root`, refresh() reloads its data and reports errors,
// wants(ids) says whether incident changes `ids` concern it.
import { clearError, clearErrorsExcept, loadSession, logout, reportError, restartLive, session,
  setUnauthorizedHandler, showError, startLive } from './api.js';
import { debounce, refreshAges } from './util.js';
import * as audit from './audit.js';
import * as incident from './incident.js';
import * as incidents from './incidents.js';
import * as job from './job.js';
import * as jobs from './jobs.js';
import * as loginPage from './login.js';
import * as nodes from './nodes.js';
import * as overview from './overview.js';
import * as silences from './silences.js';

const PAGES = {
  overview: [overview], incidents: [incidents, incident], jobs: [jobs, job], nodes: [nodes],
  silences: [silences], audit: [audit], login: [loginPage],
};

let current = null;  // {view}: the mounted page

function parseHash() {
  const m = /^#\/([a-z]+)(?:\/(.+))?$/.exec(location.hash);
  const page = m && PAGES[m[1]] ? m[1] : 'overview';
  return { page, arg: m && m[2] ? decodeURIComponent(m[2]) : null };
}

function renderHeader() {
  document.getElementById('whoami').textContent = `${session.name} (${session.role})`;
  const viaSession = session.via === 'session';
  document.getElementById('login-link').hidden = viaSession;
  document.getElementById('logout').hidden = !viaSession;
}

function route() {
  const { page, arg } = parseHash();
  clearErrorsExcept('network', 'session', 'auth');
  for (const a of document.querySelectorAll('nav a[data-page]')) {
    if (a.dataset.page === page) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  const main = document.getElementById('main');
  const root = document.createElement('div');
  root.className = `page page-${page}`;
  main.replaceChildren(root);
  const mod = PAGES[page][arg != null && PAGES[page][1] ? 1 : 0];
  current = { view: mod.mount(root, arg, { onSession: renderHeader }) };
  document.title = `Vigil — ${arg ?? page}`;
  refresh();
}

// One refresh at a time; a request during one runs once more after it.
let busy = false, again = false;
async function refresh() {
  if (!current?.view?.refresh) return;
  if (busy) { again = true; return; }
  busy = true;
  const view = current.view;
  try {
    await view.refresh();
  } catch (e) {
    reportError(e);
  } finally {
    busy = false;
    if (again) { again = false; refresh(); }
  }
}

const changed = new Set();
const refreshForEvents = debounce(() => {
  const ids = [...changed];
  changed.clear();
  if (!current?.view?.wants || current.view.wants(ids)) refresh();
}, 300);

function setupTheme() {
  document.getElementById('theme-toggle').addEventListener('click', () => {
    const html = document.documentElement;
    html.dataset.theme = html.dataset.theme === 'dark' ? 'light' : 'dark';
    try { localStorage.setItem('vigil-theme', html.dataset.theme); } catch { /* private mode */ }
    route();  // charts read their colours from the theme when drawn
  });
}

async function start() {
  setupTheme();
  setUnauthorizedHandler((message) => {
    // On the sign-in page a background refresh's 401 says nothing new and
    // would hide the answer to the sign-in itself.
    if (location.hash.startsWith('#/login')) return;
    showError('auth', message);
    renderHeader();
    if (!location.hash.startsWith('#/login')) location.hash = '#/login';
  });
  document.getElementById('logout').addEventListener('click', async () => {
    try {
      await logout();
      clearError('auth');
    } catch (e) {
      reportError(e, 'auth');
    }
    renderHeader();
    restartLive();
    route();
  });
  const known = await loadSession();
  renderHeader();
  window.addEventListener('hashchange', route);
  if (!known && !location.hash.startsWith('#/login')) {
    showError('auth', 'sign in to continue: this server does not allow anonymous reads');
    location.hash = '#/login';  // hashchange routes
  } else {
    route();
  }
  // Relative ages ("3 m ago") keep counting between refreshes.
  setInterval(() => refreshAges(document.getElementById('main')), 15000);
  // Not signed in and no anonymous reads: the stream opens after login.
  startLive((event) => {
    if (event.id) changed.add(event.id);
    refreshForEvents();
  }, refresh, known);
}

start();
