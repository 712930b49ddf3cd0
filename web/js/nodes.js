// Nodes page (#/nodes): one tile per node with its GPU states, the age of
// its last frame and whether it is cordoned; a client-side name filter.
// #/nodes/NAME (a node's link elsewhere) opens it filtered to NAME, with
// that node's tile marked.
import { api, clearError } from './api.js';
import { duration, esc, num } from './util.js';

const STALE_SECONDS = 60;  // no frame for this long: the node is stale
let filterText = '';

// "cordoned", "lemon", "stale", "degraded" or "ok".
export function nodeState(n) {
  if (n.cordoned) return 'cordoned';
  if (n.lemon) return 'lemon';
  if (!(num(n.age_seconds) <= STALE_SECONDS)) return 'stale';
  const g = n.gpu_state || {};
  const i = n.incidents || {};
  if (g.throttled || g.hot || g.missing || i.P0 || i.P1 || i.P2) return 'degraded';
  return 'ok';
}

function tileHtml(n, selected) {
  const state = nodeState(n);
  const g = n.gpu_state || {};
  const i = n.incidents || {};
  const gpuParts = ['throttled', 'hot', 'missing'].filter((k) => g[k]).map((k) => `${g[k]} ${k}`);
  const open = ['P0', 'P1', 'P2', 'P3'].filter((s) => i[s]).map((s) => `<span class="sev sev-${s}">${s} ${esc(i[s])}</span>`);
  return `<div class="node" data-node="${esc(n.node)}" data-state="${state}" title="${esc(n.node)}: ${state}"` +
    `${n.node === selected ? ' data-selected="true" aria-current="true"' : ''}>` +
    `<div class="node-name"><b>${esc(n.node)}</b> <span class="node-state">${state}</span></div>` +
    `<div class="muted">${esc(n.job || 'no job')}</div>` +
    `<div>GPUs ${esc(g.ok ?? 0)}/${esc(n.gpus ?? 0)} ok${gpuParts.length ? ` · ${esc(gpuParts.join(', '))}` : ''}</div>` +
    `<div>frame <span data-field="age">${Number.isFinite(num(n.age_seconds)) ? `${duration(num(n.age_seconds))} ago` : 'never'}</span>` +
    `${n.cordoned ? ' · <b>cordoned</b>' : ''}</div>${open.length ? `<div>${open.join(' ')}</div>` : ''}` +
    (n.lemon ? `<div class="lemon" data-field="lemon" title="${esc(n.lemon.history)}">repeat offender: ` +
      `<a href="#/incidents/${esc(n.lemon.incident)}">${esc(n.lemon.incident)}</a> · suggested: ${esc(n.lemon.suggested)}</div>` : '') +
    '</div>';
}

export function mount(root, selected = null) {
  root.innerHTML = `
    <h2>Nodes</h2>
    <form class="filters" onsubmit="return false">
      <label class="grow">Filter <input id="filter-node" type="search" placeholder="node or job name" autocomplete="off"></label>
    </form>
    <p class="muted" data-field="count">loading…</p>
    <div id="nodes" class="node-grid"></div>`;
  const grid = root.querySelector('#nodes');
  const input = root.querySelector('#filter-node');
  // A node's link filters to it without replacing the remembered filter.
  let text = selected ?? filterText;
  input.value = text;
  let nodes = [];

  function render() {
    const t = text.toLowerCase();
    const shown = t ? nodes.filter((n) => n.node.toLowerCase().includes(t) || String(n.job || '').toLowerCase().includes(t)) : nodes;
    grid.innerHTML = shown.map((n) => tileHtml(n, selected)).join('');
    const counts = {};
    for (const n of nodes) counts[nodeState(n)] = (counts[nodeState(n)] || 0) + 1;
    root.querySelector('[data-field=count]').textContent = `${shown.length} of ${nodes.length} nodes · ` +
      Object.entries(counts).map(([s, c]) => `${c} ${s}`).join(', ');
  }
  input.addEventListener('input', () => {
    text = filterText = input.value.trim();
    render();
  });

  async function refresh() {
    const data = await api('/api/v1/nodes');
    clearError('page');
    const rank = { lemon: 0, stale: 1, degraded: 2, cordoned: 3, ok: 4 };
    nodes = (data.nodes || []).slice().sort((a, b) =>
      rank[nodeState(a)] - rank[nodeState(b)] || a.node.localeCompare(b.node));
    render();
  }
  return { refresh };
}
