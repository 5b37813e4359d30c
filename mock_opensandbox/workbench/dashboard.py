"""The workbench dashboard: one HTML page served at ``/__mock__/`` (workbench/admin.py), no external assets.

It subscribes to ``/__mock__/events`` (server-sent events from the mock itself, one ``state`` document
per change) and shows the sandboxes (state, TTL, image, processes, a kill button), the cached images (refs,
size, digest, source, the sandboxes using them) and the snapshots, the request journal
(status colours, durations, faults), the fault rules (add and remove) and the execd mode and isolation.
Buttons call the admin API with the session cookie the login (``/__mock__/?key=<api key>``) set.
Everything is built with DOM calls and ``textContent`` (no HTML from data). Standard library only.
"""

from __future__ import annotations

PAGE = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>mock OpenSandbox workbench</title>
<style>
  :root { --bg:#0f1419; --panel:#171d24; --line:#26303b; --text:#d7dde3; --dim:#8592a0; --ok:#3fb950;
          --info:#58a6ff; --warn:#d29922; --bad:#f85149; --grey:#6e7681; --accent:#bc8cff; }
  * { box-sizing: border-box; }
  body { margin:0; font:13px/1.45 ui-sans-serif, system-ui, -apple-system, "Segoe UI", sans-serif;
         background:var(--bg); color:var(--text); }
  header { display:flex; align-items:center; gap:16px; padding:10px 18px; border-bottom:1px solid var(--line);
           background:var(--panel); flex-wrap:wrap; }
  header h1 { font-size:15px; margin:0; font-weight:600; letter-spacing:.2px; }
  header .facts { display:flex; gap:14px; flex-wrap:wrap; color:var(--dim); }
  header .facts b { color:var(--text); font-weight:500; }
  #live { margin-left:auto; display:flex; align-items:center; gap:6px; color:var(--dim); }
  #live i { width:9px; height:9px; border-radius:50%; background:var(--grey); display:inline-block; }
  #live.on i { background:var(--ok); box-shadow:0 0 6px var(--ok); }
  main { display:grid; grid-template-columns: minmax(0,1.5fr) minmax(0,1fr); gap:14px; padding:14px 18px; }
  section { background:var(--panel); border:1px solid var(--line); border-radius:8px; overflow:hidden; min-width:0; }
  section.wide { grid-column: 1 / -1; }
  section h2 { margin:0; padding:9px 12px; font-size:12px; text-transform:uppercase; letter-spacing:.8px;
               color:var(--dim); border-bottom:1px solid var(--line); display:flex; align-items:center; gap:8px; }
  section h2 .count { color:var(--text); background:var(--line); border-radius:9px; padding:0 7px; font-size:11px; }
  section h2 .tools { margin-left:auto; display:flex; gap:6px; text-transform:none; letter-spacing:0; }
  table { width:100%; border-collapse:collapse; }
  th, td { text-align:left; padding:5px 10px; border-bottom:1px solid var(--line); vertical-align:top;
           white-space:nowrap; }
  th { color:var(--dim); font-weight:500; font-size:11.5px; }
  td.path { white-space:normal; word-break:break-all; font-family:ui-monospace, SFMono-Regular, Menlo, monospace;
            font-size:12px; }
  .mono { font-family:ui-monospace, SFMono-Regular, Menlo, monospace; font-size:12px; }
  .scroll { max-height:460px; overflow:auto; }
  .empty { padding:14px 12px; color:var(--dim); }
  .badge { display:inline-block; padding:0 7px; border-radius:9px; font-size:11.5px; font-weight:600; }
  .s-Running { background:rgba(63,185,80,.15); color:var(--ok); }
  .s-Paused { background:rgba(210,153,34,.15); color:var(--warn); }
  .s-Ready { background:rgba(63,185,80,.15); color:var(--ok); }
  .s-Creating { background:rgba(88,166,255,.15); color:var(--info); }
  .s-Stopped, .s-Failed, .s-Terminated { background:rgba(248,81,73,.15); color:var(--bad); }
  .st { font-weight:700; font-family:ui-monospace, monospace; }
  .c2 { color:var(--ok); } .c3 { color:var(--info); } .c4 { color:var(--warn); } .c5 { color:var(--bad); }
  .c0 { color:var(--grey); }
  .fault { background:rgba(188,140,255,.16); color:var(--accent); margin-left:6px; }
  .dim { color:var(--dim); }
  button { background:#21262d; color:var(--text); border:1px solid #363b42; border-radius:6px; padding:3px 9px;
           font:inherit; font-size:12px; cursor:pointer; }
  button:hover { border-color:#8b949e; }
  button.danger { color:var(--bad); border-color:rgba(248,81,73,.4); }
  details summary { cursor:pointer; color:var(--dim); }
  details .procs { margin:4px 0 2px; padding-left:10px; border-left:2px solid var(--line); white-space:normal; }
  form { display:grid; grid-template-columns: repeat(3, minmax(0,1fr)); gap:6px 8px; padding:10px 12px;
         border-top:1px solid var(--line); }
  form label { display:flex; flex-direction:column; gap:2px; color:var(--dim); font-size:11px; }
  input, select { background:var(--bg); color:var(--text); border:1px solid var(--line); border-radius:5px;
                  padding:4px 6px; font:inherit; font-size:12px; }
  form .actions { grid-column: 1 / -1; display:flex; gap:8px; align-items:center; }
  #msg { color:var(--bad); }
  .bar { display:inline-block; height:6px; border-radius:3px; background:var(--info); vertical-align:middle;
         margin-right:6px; opacity:.7; }
</style>
</head>
<body>
<header>
  <h1>mock OpenSandbox <span class="dim">workbench</span></h1>
  <div class="facts" id="facts"></div>
  <div id="live"><i></i><span id="livetext">connecting…</span></div>
</header>
<main>
  <section class="wide" id="sb-section">
    <h2>Sandboxes <span class="count" id="sb-count">0</span>
      <span class="tools"><button id="reset-all" class="danger" title="POST /__mock__/reset">Reset everything</button></span></h2>
    <div id="sandboxes"></div>
  </section>
  <section class="wide" id="vol-section">
    <h2>Volumes <span class="count" id="vol-count">0</span>
      <span class="tools dim">GET /__mock__/volumes</span></h2>
    <div id="volumes"></div>
  </section>
  <section class="wide" id="img-section">
    <h2>Images <span class="count" id="img-count">0</span> · snapshots <span class="count" id="snap-count">0</span>
      <span class="tools dim">GET /__mock__/images</span></h2>
    <div id="images"></div>
    <div id="snapshots"></div>
  </section>
  <section id="req-section">
    <h2>Request journal <span class="count" id="req-count">0</span>
      <span class="tools"><button id="clear-journal" title="DELETE /__mock__/requests">Clear</button></span></h2>
    <div class="scroll" id="requests"></div>
  </section>
  <section id="fault-section">
    <h2>Fault rules <span class="count" id="fault-count">0</span>
      <span class="tools"><button id="clear-faults" title="DELETE /__mock__/faults">Remove all</button></span></h2>
    <div id="faults"></div>
    <form id="fault-form" autocomplete="off">
      <label>kind <select name="kind">
        <option>status</option><option>delay</option><option>reset</option><option>reset_body</option>
        <option>truncate</option><option>dribble</option><option>stall</option></select></label>
      <label>status <input name="status" value="503" inputmode="numeric"></label>
      <label>method <input name="method" placeholder="* or GET|POST"></label>
      <label>listener <select name="listener"><option value="">any</option><option>lifecycle</option>
        <option>execd</option><option>port</option></select></label>
      <label style="grid-column: span 3">path (regex) <input name="path" placeholder="^/command$"></label>
      <label>sandbox <input name="sandbox" placeholder="id (optional)"></label>
      <label>count <input name="count" placeholder="unlimited" inputmode="numeric"></label>
      <label>delay s <input name="delay" placeholder="0"></label>
      <label>after_bytes <input name="after_bytes" placeholder="0" inputmode="numeric"></label>
      <label>probability <input name="probability" placeholder="1.0"></label>
      <label>id <input name="id" placeholder="auto"></label>
      <div class="actions"><button type="submit" id="add-fault">Add rule</button><span id="msg"></span></div>
    </form>
  </section>
</main>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined) e.setAttribute(k, v);
  }
  for (const kid of kids) if (kid !== null && kid !== undefined)
    e.appendChild(typeof kid === "string" || typeof kid === "number" ? document.createTextNode(String(kid)) : kid);
  return e;
}
async function api(method, path, body) {
  const opt = {method, credentials: "same-origin", headers: {}};
  if (body !== undefined) { opt.body = JSON.stringify(body); opt.headers["Content-Type"] = "application/json"; }
  const r = await fetch(path, opt);
  if (!r.ok) { let m = r.status + ""; try { m += " " + (await r.json()).message; } catch (e) {} throw new Error(m); }
  return r;
}
let state = null, receivedAt = 0;
function ttl(s) {
  if (s.ttl_left_s === null || s.ttl_left_s === undefined) return "–";
  const left = Math.max(0, s.ttl_left_s - (Date.now() - receivedAt) / 1000);
  const m = Math.floor(left / 60), sec = Math.floor(left % 60);
  return m + "m " + String(sec).padStart(2, "0") + "s";
}
function statusClass(st) { return "st c" + (st ? String(st)[0] : "0"); }
function renderFacts(info) {
  const f = $("facts"); f.replaceChildren();
  const facts = [["", info.kind === "proxy" ? "fault proxy → " + info.upstream : "mock"],
                 ["execd", info.execd_mode], ["runs", info.execd], ["isolation", info.isolation]];
  if (info.gateway) facts.push(["gateway", "on"]);
  if (info.execd_token) facts.push(["execd token", "set"]);
  if (info.recording) facts.push(["recording", info.recording]);
  for (const [k, v] of facts) f.appendChild(el("span", {}, k ? k + " " : "", el("b", {}, v === undefined ? "?" : String(v))));
}
function renderSandboxes(items) {
  $("sb-count").textContent = items.length;
  const box = $("sandboxes"); box.replaceChildren();
  if (!items.length) { box.appendChild(el("div", {class: "empty"}, "No sandboxes. Create one through the lifecycle API.")); return; }
  const t = el("table", {id: "sandbox-table"}, el("thead", {}, el("tr", {}, ...["sandbox", "state", "image", "TTL left",
    "execd", "volumes", "processes", ""].map((h) => el("th", {}, h)))));
  const tb = el("tbody");
  for (const s of items) {
    const procs = s.processes;
    const pcell = procs === null || procs === undefined ? el("span", {class: "dim"}, "upstream's")
      : el("details", {}, el("summary", {}, procs.length + " process" + (procs.length === 1 ? "" : "es")),
           el("div", {class: "procs mono"}, ...procs.map((p) => el("div", {}, p.pid + " [" + p.state + "] " + p.cmdline))));
    const ex = s.execd || {};
    tb.appendChild(el("tr", {"data-sandbox": s.id},
      el("td", {class: "mono", title: s.id}, s.id.slice(0, 8)),
      el("td", {}, el("span", {class: "badge s-" + s.state}, s.state)),
      el("td", {class: "mono"}, s.image || "?"),
      el("td", {class: "mono ttl", "data-id": s.id}, ttl(s)),
      el("td", {class: "mono"}, (ex.mode || "?") + (ex.port ? " :" + ex.port : "")),
      el("td", {class: "mono"}, ...(s.volumes || []).map((v) => el("div", {title: v.source},
        (v.claimName || v.source) + (v.subPath ? "/" + v.subPath : "") + " → " + v.mountPath + (v.readOnly ? " (ro)" : "")))),
      el("td", {}, pcell),
      el("td", {}, el("button", {class: "danger kill", onclick: () => kill(s.id)}, "Kill"))));
  }
  t.appendChild(tb); box.appendChild(t);
}
function size(n) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : String(n)) + " " + u[i];
}
function renderVolumes(v) {
  const box = $("volumes"); box.replaceChildren();
  const named = (v && v.named) || [], host = (v && v.hostBinds) || [];
  $("vol-count").textContent = named.length + host.length;
  if (!named.length && !host.length) { box.appendChild(el("div", {class: "empty"}, "No volumes. Named volumes (pvc) appear here when a create names one; host binds while a sandbox mounts one.")); return; }
  const t = el("table", {id: "volume-table"}, el("thead", {}, el("tr", {}, ...["volume", "kind", "size", "mounted by", "path"].map((h) => el("th", {}, h)))));
  const tb = el("tbody");
  for (const n of named) {
    tb.appendChild(el("tr", {"data-volume": n.name}, el("td", {class: "mono"}, n.name), el("td", {}, "pvc"),
      el("td", {class: "mono"}, size(n.sizeBytes) + (n.sizeComplete ? "" : "+") + " · " + n.entries + " entries"),
      el("td", {class: "mono"}, n.mountedBy.length ? n.mountedBy.map((s) => s.slice(0, 8)).join(" ") : "—"),
      el("td", {class: "path"}, n.path)));
  }
  for (const h of host) {
    tb.appendChild(el("tr", {}, el("td", {class: "mono"}, h.name), el("td", {}, "host" + (h.readOnly ? " (ro)" : "")),
      el("td", {class: "dim"}, "—"), el("td", {class: "mono"}, h.sandbox.slice(0, 8) + " → " + h.mountPath),
      el("td", {class: "path"}, h.source)));
  }
  t.appendChild(tb); box.appendChild(t);
}
function renderImages(d) {
  const box = $("images"), sbox = $("snapshots"); box.replaceChildren(); sbox.replaceChildren();
  const imgs = (d && d.images) || [], snaps = (d && d.snapshots) || [];
  $("img-count").textContent = imgs.length; $("snap-count").textContent = snaps.length;
  const users = (ids) => ids && ids.length ? ids.map((s) => s.slice(0, 8)).join(" ") : "—";
  if (!d || !d.available) box.appendChild(el("div", {class: "empty"}, "No image store: sandboxes get the host-tools view (start the mock with --image-dir DIR)."));
  else if (!imgs.length) box.appendChild(el("div", {class: "empty"}, "No cached images yet (sources: " + (d.sources.join(", ") || "none") + "). A create pulls its image here."));
  else {
    const t = el("table", {id: "image-table"}, el("thead", {}, el("tr", {}, ...["image", "size", "digest", "source", "used by"].map((h) => el("th", {}, h)))));
    const tb = el("tbody");
    for (const i of imgs) {
      tb.appendChild(el("tr", {"data-image": i.id}, el("td", {class: "mono"}, ...(i.refs && i.refs.length ? i.refs : [i.ref]).map((r) => el("div", {}, r))),
        el("td", {class: "mono"}, size(i.size || 0)), el("td", {class: "mono", title: i.digest || ""}, (i.digest || "—").slice(0, 19)),
        el("td", {}, i.source || "?"), el("td", {class: "mono"}, users(i.sandboxes))));
    }
    t.appendChild(tb); box.appendChild(t);
  }
  if (!snaps.length) return;
  const t = el("table", {id: "snapshot-table"}, el("thead", {}, el("tr", {}, ...["snapshot", "state", "of sandbox", "image", "size", "restored into"].map((h) => el("th", {}, h)))));
  const tb = el("tbody");
  for (const s of snaps) {
    tb.appendChild(el("tr", {"data-snapshot": s.id}, el("td", {class: "mono", title: s.id}, (s.name ? s.name + " " : "") + s.id.slice(0, 8)),
      el("td", {}, el("span", {class: "badge s-" + s.state}, s.state)), el("td", {class: "mono"}, (s.sandboxId || "").slice(0, 8)),
      el("td", {class: "mono"}, s.ref || "—"), el("td", {class: "mono"}, size(s.size || 0)), el("td", {class: "mono"}, users(s.sandboxes))));
  }
  t.appendChild(tb); sbox.appendChild(t);
}
function renderRequests(items) {
  $("req-count").textContent = items.length;
  const box = $("requests"); box.replaceChildren();
  if (!items.length) { box.appendChild(el("div", {class: "empty"}, "No requests yet.")); return; }
  const max = Math.max(1, ...items.map((e) => e.duration_ms || 0));
  const t = el("table", {id: "request-table"}, el("thead", {}, el("tr", {}, ...["#", "time", "method", "path",
    "listener", "status", "duration"].map((h) => el("th", {}, h)))));
  const tb = el("tbody");
  for (const e of items.slice().reverse()) {
    const st = e.status ? String(e.status) : (e.error || "no answer");
    tb.appendChild(el("tr", {},
      el("td", {class: "dim"}, e.seq), el("td", {class: "mono dim"}, (e.time || "").slice(11, 23)),
      el("td", {class: "mono"}, e.method), el("td", {class: "path"}, e.path),
      el("td", {class: "dim"}, e.listener + (e.sandbox ? " · " + e.sandbox.slice(0, 8) : "")),
      el("td", {}, el("span", {class: statusClass(e.status)}, st),
         e.fault ? el("span", {class: "badge fault", title: "fault rule " + e.fault.id}, e.fault.kind) : null),
      el("td", {class: "mono"}, el("span", {class: "bar", style: "width:" + Math.max(2, 40 * (e.duration_ms || 0) / max) + "px"}),
         (e.duration_ms || 0).toFixed(1) + " ms")));
  }
  t.appendChild(tb); box.appendChild(t);
}
function renderFaults(rules) {
  $("fault-count").textContent = rules.length;
  const box = $("faults"); box.replaceChildren();
  if (!rules.length) { box.appendChild(el("div", {class: "empty"}, "No fault rules. Every request is answered normally.")); return; }
  const t = el("table", {id: "fault-table"}, el("thead", {}, el("tr", {}, ...["id", "kind", "match", "left", "hits", ""].map((h) => el("th", {}, h)))));
  const tb = el("tbody");
  for (const r of rules) {
    const what = r.kind + (r.status ? " " + r.status : "") + (r.delay ? " +" + r.delay + "s" : "");
    const match = [r.method, r.path || "any path", r.listener || "", r.sandbox ? "sandbox " + r.sandbox.slice(0, 8) : ""]
      .filter(Boolean).join("  ");
    tb.appendChild(el("tr", {"data-rule": r.id}, el("td", {class: "mono"}, r.id), el("td", {}, el("span", {class: "badge fault"}, what)),
      el("td", {class: "path"}, match), el("td", {}, r.count === null ? "∞" : r.count), el("td", {}, r.hits),
      el("td", {}, el("button", {onclick: () => removeRule(r.id)}, "Remove"))));
  }
  t.appendChild(tb); box.appendChild(t);
}
function render() {
  if (!state) return;
  renderFacts(state.info); renderSandboxes(state.sandboxes); renderVolumes(state.volumes); renderImages(state.images); renderRequests(state.requests);
  renderFaults(state.faults);
}
function flash(text) { $("msg").textContent = text; setTimeout(() => { $("msg").textContent = ""; }, 6000); }
async function kill(id) { try { await api("DELETE", "/__mock__/sandboxes/" + encodeURIComponent(id)); } catch (e) { flash(e.message); } }
async function removeRule(id) { try { await api("DELETE", "/__mock__/faults/" + encodeURIComponent(id)); } catch (e) { flash(e.message); } }
$("reset-all").addEventListener("click", async () => {
  if (confirm("Remove every sandbox, fault rule and journal entry?")) { try { await api("POST", "/__mock__/reset", {}); } catch (e) { flash(e.message); } }
});
$("clear-journal").addEventListener("click", () => api("DELETE", "/__mock__/requests").catch((e) => flash(e.message)));
$("clear-faults").addEventListener("click", () => api("DELETE", "/__mock__/faults").catch((e) => flash(e.message)));
$("fault-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const f = new FormData(ev.target), rule = {kind: f.get("kind")};
  const num = (k, int) => { const v = (f.get(k) || "").trim(); if (v !== "") rule[k] = int ? parseInt(v, 10) : parseFloat(v); };
  for (const k of ["method", "path", "listener", "sandbox", "id"]) { const v = (f.get(k) || "").trim(); if (v) rule[k] = v; }
  if (rule.kind === "status") num("status", true);
  num("count", true); num("delay", false); num("probability", false);
  if (rule.kind === "reset_body" || rule.kind === "truncate") num("after_bytes", true);
  try { await api("POST", "/__mock__/faults", rule); flash(""); } catch (e) { flash(e.message); }
});
function connect() {
  const es = new EventSource("/__mock__/events");
  es.addEventListener("state", (ev) => {
    state = JSON.parse(ev.data); receivedAt = Date.now(); render();
    $("live").className = "on"; $("livetext").textContent = "live · " + state.time.slice(11, 19) + " UTC";
  });
  es.onerror = () => { $("live").className = ""; $("livetext").textContent = "reconnecting…"; };
}
setInterval(() => { if (!state) return; for (const s of state.sandboxes) {
  const c = document.querySelector('td.ttl[data-id="' + s.id + '"]'); if (c) c.textContent = ttl(s); } }, 1000);
connect();
</script>
</body>
</html>
"""


def page() -> bytes:
    return PAGE.encode("utf-8")
