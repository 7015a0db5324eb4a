// The sluice dashboard: polls /_sluice/dashboard/data once a second and renders it. Rates are
// computed here from the polls of the last RATE_WINDOW_MS, so the node keeps no per-viewer
// state. A poll that fails or goes unanswered is shown as an error with the age of the figures
// still on the page, which are greyed until an answer comes.
"use strict";

const POLL_MS = 1000;
// A poll unanswered this long is given up and shown as an error: a node that stops answering
// (hung, or stopped with SIGSTOP) otherwise leaves a fetch pending for good and the page showing
// old figures as current. Three polls' time: the data took at most 660 ms to answer with 100
// groups on a loaded machine (an outside trial), so a node that answers at all is well within it.
const FETCH_TIMEOUT_MS = 3000;
// The data's address built from the page's origin, not relative to the page: a page opened as
// http://user:pw@host/... has credentials in its base URL, and Chromium refuses to build a
// request from a URL that holds them; the origin has none.
const DATA_URL = new URL("/_sluice/dashboard/data", location.origin).href;
// Rates are averaged over this long: a heavy search takes seconds, so a one-second rate would
// flicker between 0 and a burst.
const RATE_WINDOW_MS = 10000;
const COUNTERS = ["completions", "throttled", "rejections", "cancellations", "queued",
  "would_throttle", "would_queue", "would_reject", "would_cancel"];
let history = [];   // [{ at, groups: Map(id -> counters) }], oldest first, within the window
let sortKey = "name";
let last = null;    // { data, at, updated }: the last answer, rendered again when a control changes

function esc(s) {
  return String(s).replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", "\"": "&quot;", "'": "&#39;" }[c]));
}

function pct(x) {
  if (x == null) return "–";
  const p = x * 100;
  return (p === 0 ? "0" : p < 0.1 ? p.toFixed(2) : p < 10 ? p.toFixed(1) : p.toFixed(0)) + "%";
}

function bar(value, limit) {
  if (limit == null) return "";
  const scale = Math.max(limit || 0, value, 0.0001);
  const fill = Math.min(100, value / scale * 100);
  const mark = limit ? `<b style="left:${Math.min(100, limit / scale * 100)}%"></b>` : "";
  return `<span class="bar"><i class="${limit && value > limit ? "over" : ""}" style="width:${fill}%"></i>${mark}</span>`;
}

// The per-second rate of counter `key` of group `g` since the oldest poll of the window that
// knew the group.
function rate(g, key, at) {
  const oldest = history.find(h => h.groups.has(g.id));
  if (!oldest || at <= oldest.at) return 0;
  return Math.max(0, g.counters[key] - oldest.groups.get(g.id)[key]) / ((at - oldest.at) / 1000);
}

function fmtRate(r) { return r === 0 ? "0" : r < 10 ? r.toFixed(1) : r.toFixed(0); }

function fmtMillis(ms) {
  if (ms < 1000) return ms + " ms";
  if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
  return (ms / 60000).toFixed(1) + " min";
}

function renderNode(n) {
  document.getElementById("node-name").textContent = `${n.name} (${n.id}) · cluster ${n.cluster_name}`;
  const card = (label, value, cls = "") =>
    `<div class="card ${cls}"><div class="label">${esc(label)}</div><div class="value">${value}</div></div>`;
  document.getElementById("node").innerHTML = [
    card("wlm mode", esc(n.mode)),
    card("node duress", n.in_duress ? "IN DURESS" : "no", n.in_duress ? "duress" : ""),
    card("cpu", `${pct(n.usage.cpu)}${n.duress.cpu ? " · duress" : ""}`, n.duress.cpu ? "duress" : ""),
    card("memory", `${pct(n.usage.memory)}${n.duress.memory ? " · duress" : ""}`, n.duress.memory ? "duress" : ""),
    // A gateway runs no search itself: its searches are in flight upstream.
    ...(n.search_pool
      ? [card("search pool", `${n.search_pool.active}/${n.search_pool.threads} active · ${n.search_pool.queued} queued`),
        card("pool rejected", n.search_pool.rejected)]
      : [card("searches upstream", n.upstream.search_threads == null
        ? `${n.upstream.searches_in_flight} in flight`
        : `${n.upstream.searches_in_flight} in flight / ${n.upstream.search_threads} search threads`)]),
    card("tasks running", n.tasks_running),
  ].join("");
}

// A group's name, with its id when another group has the same name: a group may be named
// DEFAULT_WORKLOAD_GROUP, as OpenSearch allows, beside the DEFAULT group itself.
function labeller(groups) {
  const seen = new Map();
  for (const g of groups) seen.set(g.name, (seen.get(g.name) || 0) + 1);
  return g => seen.get(g.name) > 1
    ? `${esc(g.name)} <small class="id">id ${esc(g.id)}</small>`
    : esc(g.name);
}

function renderGroups(groups, at) {
  const label = labeller(groups);
  const filter = document.getElementById("filter").value.trim().toLowerCase();
  const onlyActive = document.getElementById("only-active").checked;
  const rows = groups.map(g => {
    const r = {};
    for (const k of COUNTERS) r[k] = rate(g, k, at);
    return { g, r };
  }).filter(({ g, r }) =>
    (!filter || g.id.toLowerCase().includes(filter) || g.name.toLowerCase().includes(filter)) &&
    (!onlyActive || g.in_flight > 0 || g.queue_depth > 0 || COUNTERS.some(k => r[k] > 0)));
  const key = sortKey;
  rows.sort((a, b) => {
    if (key === "name") return a.g.name.localeCompare(b.g.name);
    if (key === "in_flight" || key === "queue_depth") return b.g[key] - a.g[key];
    return b.r[key] - a.r[key] || a.g.name.localeCompare(b.g.name);
  });
  // A group's request limit: its node_limit, and the cluster-wide shared_limit beyond it.
  const limitText = (g) => g.shared_limit == null
    ? `${g.node_limit ?? "–"}`
    : `${g.node_limit ?? 0} + ${g.shared_limit} shared`;
  const inFlightTitle = (g) => g.shared_limit == null
    ? "requests running on this node / its node_limit"
    : `requests running on this node / its node_limit, then up to ${g.shared_limit} more across the cluster (shared_limit)`;
  const cell = (g, r, k, cls) =>
    `<td class="${cls} ${k}${r[k] > 0 && k !== "completions" ? " hot" : ""}" title="${fmtRate(r[k])} per second over the last ${RATE_WINDOW_MS / 1000} s, ${g.counters[k]} since the node started" data-total="${g.counters[k]}">${fmtRate(r[k])}<small>${g.counters[k]}</small></td>`;
  document.querySelector("#groups tbody").innerHTML = rows.map(({ g, r }) => `
    <tr data-group-id="${esc(g.id)}">
      <td class="name" title="${esc(g.id)}">${label(g)}${g.warning ? ` <span class="muted" title="${esc(g.warning)}">⚠</span>` : ""}</td>
      <td>${esc(g.resiliency_mode || "–")}</td>
      <td class="in_flight" title="${inFlightTitle(g)}">${bar(g.in_flight, (g.node_limit ?? 0) + (g.shared_limit ?? 0) || null)}${g.in_flight} / ${limitText(g)}</td>
      <td class="queue_depth">${g.queue_depth}</td>
      <td>${bar(g.usage.cpu, g.limits.cpu)}${pct(g.usage.cpu)} / ${pct(g.limits.cpu)}</td>
      <td>${bar(g.usage.memory, g.limits.memory)}${pct(g.usage.memory)} / ${pct(g.limits.memory)}</td>
      ${cell(g, r, "completions", "actual")}${cell(g, r, "throttled", "actual")}${cell(g, r, "rejections", "actual")}${cell(g, r, "cancellations", "actual")}${cell(g, r, "queued", "actual")}
      ${cell(g, r, "would_throttle", "dry")}${cell(g, r, "would_queue", "dry")}
      <td class="dry would_wait" title="estimated from the group's drain rate">${g.counters.would_queue ? fmtMillis(Math.round(g.would_queue_wait_millis / g.counters.would_queue)) + " avg" : "–"}</td>
      ${cell(g, r, "would_reject", "dry")}${cell(g, r, "would_cancel", "dry")}
    </tr>`).join("");
  document.getElementById("group-count").textContent = `(${rows.length} of ${groups.length})`;
}

function renderTasks(tasks, groups) {
  const label = labeller(groups);
  const names = new Map(groups.map(g => [g.id, label(g)]));
  document.querySelector("#tasks tbody").innerHTML = tasks.length === 0
    ? `<tr><td colspan="5" class="muted">no task running</td></tr>`
    : tasks.map(t => `<tr><td>${esc(t.id)}${t.state === "queued" ? " (queued)" : ""}${t.cancelled ? " (cancelled)" : ""}</td><td title="${esc(t.group || "")}">${names.get(t.group) || esc(t.group || "–")}</td>
      <td>${esc(t.action)}</td><td>${fmtMillis(t.running_millis)}</td><td>${esc(t.description).slice(0, 160)}</td></tr>`).join("");
}

// Renders the last answer: at each poll, and at once when the filter, "only active" or the
// sort changes.
function render() {
  if (!last) return;
  renderNode(last.data.node);
  renderGroups(last.data.groups, last.at);
  renderTasks(last.data.longest_tasks, last.data.groups);
}

// Why a poll failed, in words: a refusal's reason (an OpenSearch error's `reason`, such as the
// role a 403 says the data needs), a timeout, or the browser's message.
async function failure(e, resp) {
  if (e.name === "AbortError") return `no answer within ${FETCH_TIMEOUT_MS / 1000} s`;
  if (!resp) return e.message;
  const text = await resp.text().catch(() => "");
  let reason = text.slice(0, 300);
  try { reason = JSON.parse(text).error.reason || reason; } catch (_) { /* not OpenSearch's JSON */ }
  return `HTTP ${resp.status}: ${reason}`;
}

async function poll() {
  const status = document.getElementById("status");
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), FETCH_TIMEOUT_MS);
  let resp = null;
  try {
    resp = await fetch(DATA_URL, { cache: "no-store", signal: abort.signal });
    if (!resp.ok) throw new Error("refused");
    const data = await resp.json();
    const at = performance.now();
    history = history.filter(h => at - h.at <= RATE_WINDOW_MS);
    last = { data, at, updated: new Date() };
    render();
    history.push({ at, groups: new Map(data.groups.map(g => [g.id, g.counters])) });
    status.className = "status";
    status.textContent = `updated ${last.updated.toLocaleTimeString()}`;
    document.body.classList.remove("stale");
    document.body.dataset.polls = String(Number(document.body.dataset.polls || 0) + 1);
  } catch (e) {
    const why = await failure(e, resp && !resp.ok ? resp : null);
    const age = last
      ? ` · the figures shown are from ${last.updated.toLocaleTimeString()}, ${Math.round((Date.now() - last.updated) / 1000)} s old`
      : "";
    status.className = "status error";
    status.textContent = `cannot load the data: ${why}${age}`;
    document.body.classList.add("stale");
  } finally {
    clearTimeout(timer);
    setTimeout(poll, POLL_MS);
  }
}

document.querySelectorAll("#groups th[data-sort]").forEach(th => th.addEventListener("click", () => {
  sortKey = th.dataset.sort;
  document.querySelectorAll("#groups th").forEach(x => x.classList.toggle("sorted", x === th));
  render();
}));
document.getElementById("filter").addEventListener("input", render);
document.getElementById("only-active").addEventListener("change", render);
poll();
