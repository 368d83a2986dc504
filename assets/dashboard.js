// dashboard.js — fills the page from GET /api/snapshot, then follows GET /api/stream (one
// stats event per second): header, tiles, charts, recent requests, peer and config.
"use strict";

const store = { t: [] };  // column arrays keyed like the server's points, plus derived ones
const requests = new Map();  // id -> record
const dash = { lastSeq: 0, events: 0, snapshots: 0, history: 300, server: null, charts: [], live: null };
window.sparkdDash = dash;  // for tests and the curious: counters and the charts

const $ = (id) => document.getElementById(id);
const KEYS = ["prompt_tps", "generation_tps", "running", "waiting", "kv_usage", "prefix_hit_rate", "spec_acceptance_rate",
  "ttft_p50", "ttft_p95", "tpot_p50", "tpot_p95", "mem_weights", "mem_kv", "mem_state", "mem_other", "mem_free"];

function derive(p) {
  return Object.assign({}, p, { kv_usage: p.kv_blocks_total ? p.kv_blocks_used / p.kv_blocks_total : null });
}

function pushPoint(p) {
  const d = derive(p);
  store.t.push(d.t);
  for (const k of KEYS) (store[k] = store[k] || []).push(d[k] == null ? null : d[k]);
  const extra = store.t.length - dash.history;
  if (extra > 0) for (const k of ["t"].concat(KEYS)) store[k].splice(0, extra);
}

function loadSeries(cols) {
  store.t = [];
  for (const k of KEYS) store[k] = [];
  const n = (cols.t || []).length;
  for (let i = 0; i < n; i++) {
    const p = {};
    for (const k in cols) if (Array.isArray(cols[k])) p[k] = cols[k][i];
    pushPoint(p);
  }
}

function setupCharts() {
  const pct = (v) => (v * 100).toFixed(0) + "%";
  const make = (id, series, opts) => dash.charts.push(new LineChart($(id), store, Object.assign({ series }, opts)));
  make("c-tps", [{ key: "generation_tps", label: "generated", color: "--s1" },
                 { key: "prompt_tps", label: "prompt", color: "--s3" }], { format: (v) => fmt.num(v) });
  make("c-reqs", [{ key: "running", label: "running", color: "--s2" },
                  { key: "waiting", label: "waiting", color: "--s5" }], { format: (v) => fmt.num(v) });
  make("c-kv", [{ key: "kv_usage", label: "used", color: "--s4" }], { max: 1, format: pct });
  make("c-hit", [{ key: "prefix_hit_rate", label: "hit rate", color: "--s2" }], { max: 1, format: pct });
  make("c-spec", [{ key: "spec_acceptance_rate", label: "accepted", color: "--s4" }], { max: 1, format: pct });
  make("c-ttft", [{ key: "ttft_p50", label: "p50", color: "--s1" },
                  { key: "ttft_p95", label: "p95", color: "--s3" }], { format: fmt.dur, emptyMax: 0.1 });
  make("c-tpot", [{ key: "tpot_p50", label: "p50", color: "--s1" },
                  { key: "tpot_p95", label: "p95", color: "--s3" }], { format: fmt.dur, emptyMax: 0.1 });
  make("c-mem", [{ key: "mem_weights", label: "weights", color: "--s1" },
                 { key: "mem_kv", label: "KV", color: "--s4" },
                 { key: "mem_state", label: "state", color: "--s3" },
                 { key: "mem_other", label: "others", color: "--s5" },
                 { key: "mem_free", label: "free", color: "--s2" }], { format: fmt.bytes, emptyMax: 1 << 30, stacked: true, binary: true });
}

function drawCharts() { for (const c of dash.charts) c.draw(); }

// ---- header ----
function renderHeader() {
  const s = dash.server;
  if (!s) return;
  $("hdr-model").textContent = s.model || "—";
  document.title = (s.model ? s.model + " · " : "") + "sparkd";
  $("hdr-backend").textContent = s.device ? s.backend + " · " + s.device : s.backend;
  $("hdr-version").textContent = "v" + s.version;
  $("hdr-version").title = s.build;
  // Each served model's share of the memory chart (several models in one sparkd).
  const models = s.models || [];
  $("mem-models").textContent = models.length > 1
    ? models.map((m) => `${m.name} (${m.role}): weights ${fmt.bytes(m.weights_bytes)}, KV ${fmt.bytes(m.kv_bytes)}` +
        (m.state_bytes ? `, state ${fmt.bytes(m.state_bytes)}` : "")).join(" · ")
    : "";
}

function renderLive(live) {
  if (!live) return;
  dash.live = live;
  const h = live.health || {};
  const chip = $("hdr-health");
  chip.dataset.state = h.status || "unknown";
  chip.querySelector("span").textContent = h.status || "unknown";
  chip.title = h.reason || "serving";
  $("hdr-uptime").textContent = "up " + fmt.uptime(live.uptime_s);
  renderPeer(live.peer);
  renderModels(live.models);
}

// Several models in one sparkd: each engine's work (the tiles and charts follow the first).
function renderModels(models) {
  const card = $("models-card");
  card.hidden = !models || models.length < 2;
  if (card.hidden) return;
  $("models-note").textContent = "the charts follow " + models[0].name;
  const body = $("models-rows");
  body.replaceChildren();
  for (const m of models) {
    const tr = document.createElement("tr");
    const cells = [m.name, m.role, m.running, m.waiting, m.finished, m.prompt_tokens, m.generation_tokens];
    cells.forEach((v, i) => {
      const td = document.createElement("td");
      td.textContent = i < 2 ? v : v == null ? "—" : fmt.int(v);
      tr.appendChild(td);
    });
    body.appendChild(tr);
  }
}

function renderPeer(p) {
  if (!p) return;
  const chip = $("hdr-peer");
  const state = p.enabled ? (p.link_state || "not reported") : "disabled";
  chip.textContent = p.enabled ? "peer " + p.role + " · " + state : "peer disabled";
  chip.dataset.state = p.link_state === "up" ? "up" : p.link_state === "down" ? "down" : "";
  const rows = [
    ["Role", p.enabled ? p.role : "—"],
    ["Address", p.address || "—"],
    ["Transport", p.transport || "—"],
    ["Link", state],
    ["Worker", p.worker || "—"],
    ["Data path", p.link || "—"],
    ["Round trip", p.rtt_ms == null ? "—" : fmt.dur(p.rtt_ms / 1000)],
    ["Bandwidth", p.link_bytes_per_s == null ? "—" : fmt.bytes(p.link_bytes_per_s) + "/s"],
    ["Sent", p.tx_bytes == null ? "—" : fmt.bytes(p.tx_bytes)],
    ["Received", p.rx_bytes == null ? "—" : fmt.bytes(p.rx_bytes)],
    ["Last error", p.last_error || "none"],
  ];
  fillKv($("peer-fields"), rows);
}

function fillKv(dl, rows) {
  dl.replaceChildren();
  for (const [k, v] of rows) {
    const dt = document.createElement("dt");
    dt.textContent = k;
    const dd = document.createElement("dd");
    dd.textContent = v;
    if (/redacted/.test(v)) dd.className = "redacted";
    dl.append(dt, dd);
  }
}

// ---- tiles ----
function setTile(id, value, unit, sub) {
  const el = $(id);
  el.replaceChildren(document.createTextNode(value));
  if (unit) {
    const u = document.createElement("span");
    u.className = "unit";
    u.textContent = unit;
    el.appendChild(u);
  }
  if (sub != null) $(id + "-sub").textContent = sub;
}

function last(key) {
  const v = store[key];
  return v && v.length ? v[v.length - 1] : null;
}

// The most recent non-null value within the kept history (percentiles are null when idle).
function lastKnown(key) {
  const v = store[key] || [];
  for (let i = v.length - 1; i >= 0; i--) if (v[i] != null) return v[i];
  return null;
}

function renderTiles(totals) {
  totals = totals || {};
  const s = dash.server || {};
  setTile("t-gen", fmt.num(last("generation_tps") || 0), "tok/s", fmt.compact(totals.generation_tokens) + " tokens in total");
  setTile("t-prompt", fmt.num(last("prompt_tps") || 0), "tok/s", fmt.compact(totals.prompt_tokens) + " tokens in total");
  setTile("t-reqs", fmt.int(last("running") || 0), "running",
          fmt.int(last("waiting") || 0) + " waiting · max " + fmt.int(s.max_num_seqs));
  const p = dash.lastPoint || {};
  const kv = p.kv_blocks_total ? p.kv_blocks_used / p.kv_blocks_total : null;
  setTile("t-kv", kv == null ? "—" : (kv * 100).toFixed(kv < 0.1 && kv > 0 ? 1 : 0), kv == null ? "" : "%",
          p.kv_blocks_total ? fmt.int(p.kv_blocks_used) + " / " + fmt.int(p.kv_blocks_total) + " blocks" : "no engine yet");
  $("t-kv-bar").style.width = ((kv || 0) * 100).toFixed(1) + "%";
  const q = totals.prefix_cache_queries, hits = totals.prefix_cache_hits;
  const life = q ? hits / q : null;
  setTile("t-hit", life == null ? "—" : (life * 100).toFixed(1), life == null ? "" : "%",
          s.prefix_caching === false ? "prefix caching is off"
            : q ? fmt.compact(hits) + " / " + fmt.compact(q) + " tokens" : "no lookups yet");
  const ttft = lastKnown("ttft_p50"), ttft95 = lastKnown("ttft_p95");
  setTile("t-ttft", fmt.dur(ttft), "", ttft == null ? "p50 · no requests yet" : "p50 · p95 " + fmt.dur(ttft95));
  const tpot = lastKnown("tpot_p50"), tpot95 = lastKnown("tpot_p95");
  setTile("t-tpot", fmt.dur(tpot), "",
          tpot == null ? "p50 · no requests yet" : "p50 · p95 " + fmt.dur(tpot95));
  const f = totals.requests_finished || {};
  const done = (f.stop || 0) + (f.length || 0) + (f.abort || 0) + (f.error || 0);
  setTile("t-done", fmt.int(done), "requests", fmt.int(f.abort || 0) + " aborted · " + fmt.int(f.error || 0) + " failed");
  renderStructured(totals.structured_output);
}

// ---- structured outputs ----
// Lifetime figures from the server's histograms (p99 and p50 are good to a bucket's width).
function renderStructured(so) {
  if (!so) return;
  $("so-requests").textContent = fmt.int(so.requests);
  const kinds = Object.entries(so.by_kind || {}).map(([k, n]) => k + " " + fmt.int(n));
  $("so-kinds").textContent = kinds.length ? kinds.join(" · ") : "—";
  $("so-refused").textContent = fmt.int(so.refused);
  $("so-masks").textContent = fmt.compact(so.masks);
  $("so-mask-time").textContent = so.mask_mean_s == null ? "no masks yet"
    : "mean " + fmt.dur(so.mask_mean_s) + " · p99 " + fmt.dur(so.mask_p99_s);
  $("so-compile-time").textContent = so.compile_p50_s == null ? "no compiles yet"
    : "p50 " + fmt.dur(so.compile_p50_s) + " · p99 " + fmt.dur(so.compile_p99_s) + " · " + fmt.int(so.compiles) + " compiled";
  $("so-cache-hits").textContent = fmt.int(so.cache_hits);
}

// ---- requests ----
function mergeRequests(list) {
  for (const r of list) {
    const old = requests.get(r.id);
    if (!old || old.version <= r.version) requests.set(r.id, r);
  }
  if (requests.size > 300) {
    const sorted = [...requests.values()].sort((a, b) => a.started - b.started);
    for (const r of sorted.slice(0, requests.size - 300)) requests.delete(r.id);
  }
}

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

function renderRequests() {
  const rows = [...requests.values()].sort((a, b) => b.started - a.started || b.version - a.version).slice(0, 100);
  const body = $("req-rows");
  body.replaceChildren();
  if (!rows.length) {
    const tr = document.createElement("tr");
    tr.className = "empty";
    const td = cell(tr, "No requests yet. Try the playground below.");
    td.colSpan = 11;
    body.appendChild(tr);
  }
  for (const r of rows) {
    const tr = document.createElement("tr");
    tr.dataset.id = r.id;
    cell(tr, r.id, "mono");
    const st = document.createElement("span");
    st.className = "pill " + r.status;
    st.textContent = r.status;
    cell(tr, "").appendChild(st);
    cell(tr, fmt.time(r.started));
    cell(tr, fmt.int(r.prompt_tokens), "num");
    cell(tr, fmt.int(r.cached_tokens), "num");
    cell(tr, fmt.int(r.generated_tokens), "num");
    cell(tr, fmt.dur(r.ttft_s), "num");
    cell(tr, fmt.dur(r.tpot_s), "num");
    cell(tr, fmt.dur(r.e2e_s), "num");
    cell(tr, r.finish_reason || "—", r.finish_reason ? "finish-" + r.finish_reason : "");
    const err = cell(tr, r.error || "", "err");
    if (r.error) err.title = r.error;
    body.appendChild(tr);
  }
  const live = rows.filter((r) => r.status === "queued" || r.status === "running").length;
  $("req-count").textContent = requests.size ? rows.length + " shown · " + live + " in progress" : "";
}

// ---- config ----
function renderConfig(cfg) {
  const body = $("cfg-body");
  body.replaceChildren();
  $("cfg-source").textContent = cfg.source || "";
  for (const [section, keys] of Object.entries(cfg)) {
    if (typeof keys !== "object" || keys === null) continue;
    const box = document.createElement("div");
    const h = document.createElement("h4");
    h.textContent = "[" + section + "]";
    const dl = document.createElement("dl");
    dl.className = "kv";
    fillKv(dl, Object.entries(keys).map(([k, v]) => [k, show(v)]));
    box.append(h, dl);
    body.appendChild(box);
  }
  function show(v) {
    if (Array.isArray(v)) return v.length ? v.map((x) => JSON.stringify(x)).join(", ") : "[]";
    if (v === "") return '""';
    return String(v);
  }
}

// ---- data flow ----
function onPoint(point, totals) {
  dash.lastPoint = point;
  pushPoint(point);
  renderTiles(totals);
  drawCharts();
}

async function loadSnapshot() {
  const res = await api.fetch("/api/snapshot");
  if (!res.ok) throw new Error(await api.errorText(res));
  const snap = await res.json();
  dash.snapshots++;
  dash.server = snap.server;
  dash.history = snap.history_seconds || 300;
  dash.totals = snap.totals;
  playground.model = snap.server.model || "";
  $("key-btn").hidden = !api.key();
  const win = snap.latency_window_seconds;
  if (win) $("c-ttft-window").textContent = $("c-tpot-window").textContent = "p50 · p95, last " + win + " s";
  loadSeries(snap.series || {});
  dash.lastSeq = (snap.series && snap.series.seq) || 0;
  const cols = snap.series || {};
  if (cols.t && cols.t.length) {
    const i = cols.t.length - 1;
    dash.lastPoint = { kv_blocks_used: cols.kv_blocks_used[i], kv_blocks_total: cols.kv_blocks_total[i] };
  }
  requests.clear();
  mergeRequests(snap.requests || []);
  renderHeader();
  renderLive(snap.live);
  renderTiles(snap.totals);
  renderRequests();
  renderConfig(snap.config || {});
  drawCharts();
}

function setLive(state, text) {
  const el = $("live");
  el.dataset.state = state;
  el.querySelector("span").textContent = text;
}

async function follow() {
  for (;;) {
    try {
      const res = await api.fetch("/api/stream");
      if (!res.ok) throw new Error(await api.errorText(res));
      setLive("live", "live");
      for await (const ev of api.events(res)) {
        if (ev.event !== "stats") continue;
        const e = JSON.parse(ev.data);
        if (e.seq <= dash.lastSeq) continue;
        const gap = dash.lastSeq && e.seq !== dash.lastSeq + 1;
        dash.lastSeq = e.seq;
        dash.events++;
        dash.totals = e.totals;
        mergeRequests(e.requests || []);
        renderLive(e.live);
        onPoint(e.point, e.totals);
        renderRequests();
        if (gap) await loadSnapshot();  // missed events: request changes may be missing
      }
    } catch (err) {
      console.info("stats stream ended:", err.message || err);
    }
    setLive("off", "reconnecting");
    await new Promise((r) => setTimeout(r, 2000));
    try { await loadSnapshot(); } catch (err) { setLive("off", "offline"); }
  }
}

function setupTheme() {
  $("theme-btn").addEventListener("click", () => {
    const dark = document.documentElement.getAttribute("data-theme") !== "dark";
    document.documentElement.setAttribute("data-theme", dark ? "dark" : "light");
    try { localStorage.setItem("sparkd-theme", dark ? "dark" : "light"); } catch (e) { /* storage disabled */ }
    drawCharts();
  });
  $("key-btn").addEventListener("click", () => api.askKey(false).then(() => loadSnapshot()));
}

async function main() {
  setupTheme();
  setupCharts();
  playground.init();
  window.addEventListener("resize", drawCharts);
  setInterval(() => {  // keeps the uptime ticking between events
    if (dash.live) $("hdr-uptime").textContent = "up " + fmt.uptime((dash.live.uptime_s += 1));
  }, 1000);
  setLive("connecting", "connecting");
  try {
    await loadSnapshot();
  } catch (err) {
    setLive("off", "offline");
    console.info("snapshot failed:", err.message || err);
  }
  follow();
}

main();
