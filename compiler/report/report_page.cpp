#include "compiler/report/report_page.h"

namespace kiln {

const char* report_page_template() {
  return R"KILNPAGE(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>kiln report</title>
<style>
body{margin:0;font:13px/1.4 system-ui,sans-serif;color:#222;display:flex;flex-direction:column;height:100vh}
header{padding:6px 12px;background:#2b2d42;color:#fff;display:flex;gap:16px;align-items:baseline}
header h1{font-size:16px;margin:0}
header .sub{opacity:.8}
nav button{background:none;border:0;color:#fff;cursor:pointer;font:inherit;padding:2px 6px}
nav button.on{border-bottom:2px solid #ffd166}
main{flex:1;display:flex;min-height:0}
#graphpane{flex:3;overflow:auto;border-right:1px solid #ccc;background:#fafafa}
#side{flex:2;overflow:auto;padding:8px 12px;min-width:320px}
.tab{display:none}.tab.on{display:block}
svg text{font:11px system-ui,sans-serif;pointer-events:none}
.node rect{stroke:#555;stroke-width:1;rx:5;cursor:pointer}
.node.sel rect{stroke:#000;stroke-width:3}
.node.slow rect{stroke:#d00;stroke-width:3}
.k-compute rect{fill:#f4a261}.k-fused rect{fill:#8fd19e}.k-elementwise rect{fill:#cdeac0}
.k-reduction rect{fill:#9cc3ff}.k-movement rect{fill:#d0d0d0}.k-input rect{fill:#fff}
.edge{fill:none;stroke:#888;stroke-width:1.2}
.elabel{fill:#555;font-size:9px}
.legend span{display:inline-block;padding:0 6px;margin-right:4px;border:1px solid #555;border-radius:3px}
table{border-collapse:collapse;margin:6px 0}
td,th{border-bottom:1px solid #e3e3e3;padding:2px 8px;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums}
pre{background:#1e1e24;color:#e6e6e6;padding:8px;overflow:auto;font:12px/1.35 ui-monospace,monospace;margin:4px 0}
pre .c{color:#7f8c8d}pre .k{color:#ff79c6}pre .s{color:#f1fa8c}pre .d{color:#bd93f9}pre .o{color:#6c7a89;user-select:none}
.frag{font:11px ui-monospace,monospace;color:#555;margin-top:8px}
.dyn{color:#d00;font-weight:bold}
</style></head><body>
<header><h1>kiln report</h1><span class="sub" id="title"></span>
<nav><button data-tab="node" class="on">node</button><button data-tab="passes">passes</button><button data-tab="cache">cache</button><button data-tab="profile">profile</button></nav></header>
<main><div id="graphpane"><div class="legend" style="padding:4px 8px">
<span style="background:#f4a261">GEMM / conv</span><span style="background:#8fd19e">fused elementwise</span><span style="background:#cdeac0">elementwise</span><span style="background:#9cc3ff">reduction</span><span style="background:#d0d0d0">data movement</span><span style="border-color:#d00;border-width:2px">slowest</span>
<span style="border:0">? in a shape: a dynamic dimension</span></div><svg id="graph" xmlns="http://www.w3.org/2000/svg"></svg></div>
<div id="side">
<div class="tab on" id="tab-node"><p id="hint">Click a node to see its generated code.</p><div id="detail"></div><div id="codepane"></div></div>
<div class="tab" id="tab-passes"></div><div class="tab" id="tab-cache"></div><div class="tab" id="tab-profile"></div>
</div></main>
<script id="kiln-data" type="application/json">@KILN_REPORT_DATA@</script>
<script>
"use strict";
const t0 = performance.now();
const D = JSON.parse(document.getElementById("kiln-data").textContent);
const G = D.graph, V = G.vars;
const esc = s => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
const shape = v => v.dtype + " (" + v.dims.map(d => d < 0 ? "?" : d).join(", ") + (v.dims.length == 1 ? "," : "") + ")";
const shapeHtml = v => esc(v.dtype) + " (" + v.dims.map(d => d < 0 ? '<span class="dyn">?</span>' : d).join(", ") + (v.dims.length == 1 ? "," : "") + ")";
document.getElementById("title").textContent = D.model + " \u2014 " + G.nodes.length + " nodes after the rewrites (" + D.given.nodes.length + " given), cache " + D.cache.status;
const fmt = (x, d = 3) => x == null ? "" : Number(x).toFixed(d);

// Profile by node id; the slowest five are marked.
const prof = {}, slow = new Set();
if (D.profile) {
  for (const s of D.profile.steps) prof[s.node] = s;
  [...D.profile.steps].sort((a, b) => b.ms - a.ms).slice(0, 5).forEach(s => slow.add(s.node));
}

// The given model's nodes a node of the optimized graph came from: walking up the given
// graph from its outputs' names to its inputs' names (values keep their names through the
// rewrites). Capped, in case a rewrite renamed an input.
const GV = D.given.vars, gvByName = {}, gnode = {};
for (const id in GV) gvByName[GV[id].name] = GV[id];
for (const g of D.given.nodes) gnode[g.id] = g;
function origins(n) {
  const stop = new Set(n.inputs.map(i => V[i].name)), seen = new Set(), out = [];
  const queue = n.outputs.map(o => V[o].name);
  while (queue.length && out.length < 64) {
    const name = queue.pop();
    if (stop.has(name)) continue;
    const v = gvByName[name];
    if (!v || v.producer < 0 || seen.has(v.producer)) continue;
    seen.add(v.producer);
    const g = gnode[v.producer];
    out.push(g);
    for (const i of g.inputs) queue.push(GV[i].name);
  }
  return out.sort((a, b) => a.id - b.id);
}

// A node standing for several of the model's: "· 3 ops: conv+add+relu" in its box.
function fused(n) {
  const o = origins(n);
  if (o.length < 2) return "";
  const ops = o.map(g => g.op).join("+");
  return " \u00b7 " + (ops.length > 22 ? o.length + " ops" : ops);
}

// Layered layout: graph inputs on layer 0, each node one below its deepest producer;
// within a layer, nodes ordered by the mean position of their producers.
const W = 215, H = 34, GX = 36, GY = 62;
const items = [], byVar = {}, pos = {};
for (const id of Object.keys(V)) if (V[id].kind == "input") { const it = {key: "v" + id, kind: "input", label: V[id].name, layer: 0, preds: []}; items.push(it); byVar[id] = it; }
for (const n of G.nodes) {
  const preds = n.inputs.map(i => byVar[i]).filter(p => p);
  const it = {key: "n" + n.id, node: n, kind: n.kind, label: (n.name ? n.name + " \u00b7 " : "") + n.op, layer: 1 + Math.max(0, ...preds.map(p => p.layer)), preds, ins: n.inputs};
  items.push(it);
  for (const o of n.outputs) byVar[o] = it;
}
const layers = [];
for (const it of items) (layers[it.layer] = layers[it.layer] || []).push(it);
layers.forEach((row, l) => {
  row.forEach(it => it.bary = it.preds.length ? it.preds.reduce((s, p) => s + p.x, 0) / it.preds.length : 0);
  if (l > 0) row.sort((a, b) => a.bary - b.bary);
  row.forEach((it, i) => { it.x = i * (W + GX); it.y = l * (H + GY); });
  const shift = Math.max(0, (row.length ? (row.reduce((s, it) => s + it.bary, 0) / row.length) : 0) - (row.length - 1) * (W + GX) / 2);
  if (l > 0) row.forEach(it => it.x += shift);
});
const maxX = Math.max(...items.map(i => i.x)) + W + 20, maxY = Math.max(...items.map(i => i.y)) + H + 20;
const svg = document.getElementById("graph");
svg.setAttribute("width", maxX + 20); svg.setAttribute("height", maxY + 20);
const parts = [];
for (const it of items) {
  if (!it.node) continue;
  for (const vid of it.ins) {
    const p = byVar[vid]; if (!p) continue;
    const x1 = p.x + W / 2 + 10, y1 = p.y + H + 10, x2 = it.x + W / 2 + 10, y2 = it.y + 10, my = (y1 + y2) / 2;
    // An edge that skips layers bows out to the right, clear of the nodes between.
    const span = it.layer - p.layer, bow = span > 1 ? W / 2 + 30 + 12 * Math.min(span, 6) : 0;
    parts.push('<path class="edge" d="M' + x1 + ',' + y1 + ' C' + (x1 + bow) + ',' + (y1 + GY) + ' ' + (x2 + bow) + ',' + (y2 - GY) + ' ' + x2 + ',' + y2 + '"/>');
    parts.push('<text class="elabel" x="' + ((x1 + x2) / 2 + 4 + bow * 0.75) + '" y="' + (my + 3) + '">' + esc(shape(V[vid])) + '</text>');
  }
}
for (const it of items) {
  const cls = "node k-" + it.kind + (it.node && slow.has(it.node.id) ? " slow" : "");
  const id = it.node ? ' id="node-' + it.node.id + '" data-node="' + it.node.id + '"' : "";
  const ms = it.node && prof[it.node.id] ? " \u00b7 " + fmt(prof[it.node.id].ms) + " ms" : "";
  parts.push('<g class="' + cls + '"' + id + ' transform="translate(' + (it.x + 10) + ',' + (it.y + 10) + ')"><rect width="' + W + '" height="' + H + '"/>' +
    '<text x="6" y="14">' + esc(it.label.length > 30 ? it.label.slice(0, 29) + "\u2026" : it.label) + '</text>' +
    '<text x="6" y="27" style="fill:#333">' + esc(it.node ? "node " + it.node.id + ms + fused(it.node) : "input " + shape(V[it.key.slice(1)])) + '</text></g>');
}
svg.innerHTML = parts.join("");

// C highlighting: comments, strings, keywords, numbers.
const KW = /\b(if|else|for|while|return|static|inline|const|void|int|int32_t|int64_t|uint32_t|uint64_t|size_t|float|double|char|struct|typedef|goto|break|continue|sizeof|__global__|__shared__|__device__|unsigned|long|restrict|__restrict__)\b/g;
function highlight(text) {
  let out = "", re = /(\/\*[\s\S]*?\*\/|\/\/[^\n]*)|("(?:[^"\\\n]|\\.)*")|([^"\/]+|\/)/g, m;
  while ((m = re.exec(text))) {
    if (m[1]) out += '<span class="c">' + esc(m[1]) + "</span>";
    else if (m[2]) out += '<span class="s">' + esc(m[2]) + "</span>";
    else out += esc(m[3]).replace(KW, '<span class="k">$1</span>').replace(/\b(\d+(\.\d+)?([eE][-+]?\d+)?f?)\b/g, '<span class="d">$1</span>');
  }
  return out;
}

function select(id) {
  const n = G.nodes.find(x => x.id == id);
  if (!n) return;
  document.querySelectorAll(".node.sel").forEach(e => e.classList.remove("sel"));
  const g = document.getElementById("node-" + id);
  if (g) g.classList.add("sel");
  showTab("node");
  document.getElementById("hint").style.display = "none";
  const io = (ids) => ids.map(i => "<tr><td>" + esc(V[i].name) + "</td><td>" + shapeHtml(V[i]) + "</td><td>" + esc(V[i].kind) + "</td></tr>").join("");
  let h = "<h3>" + esc(n.label) + "</h3><p><b>op</b> " + esc(n.describe) + "</p>";
  const orig = origins(n);
  if (orig.length) h += "<p><b>from the model's nodes</b> " + orig.map(g => esc((g.name ? g.name + " " : "") + "(" + g.op + ")")).join(", ") + "</p>";
  h += "<table><tr><th>inputs</th><th></th><th></th></tr>" + io(n.inputs) + "<tr><th>outputs</th><th></th><th></th></tr>" + io(n.outputs) + "</table>";
  const p = prof[n.id];
  if (p) h += "<p><b>profile</b> " + fmt(p.ms) + " ms per run, " + fmt(p.parts, 1) + " parts, " + fmt(p.bytes / 1e6) + " MB moved" + (p.flops > 0 ? ", " + fmt(p.flops / (p.ms * 1e6), 1) + " GFLOP/s" : "") + "</p>";
  document.getElementById("detail").innerHTML = h;
  const segs = (D.code.nodes[n.id] || []);
  const pane = document.getElementById("codepane");
  pane.dataset.node = n.id;
  pane.innerHTML = segs.length ? segs.map(s => '<div class="frag">' + esc(s.fragment) + " from its line " + s.line + " \u2192 line " + s.module_line + (s.fragment.startsWith("kernels.cu") ? " of kernels.cu" : " of the module") + "</div><pre>" + highlight(D.code.texts[s.text]) + "</pre>").join("") : "<p>No code of its own (a view, or code shared with another node).</p>";
}
svg.addEventListener("click", e => { const g = e.target.closest("[data-node]"); if (g) select(+g.dataset.node); });

function showTab(name) {
  document.querySelectorAll("nav button").forEach(b => b.classList.toggle("on", b.dataset.tab == name));
  document.querySelectorAll(".tab").forEach(t => t.classList.toggle("on", t.id == "tab-" + name));
}
document.querySelectorAll("nav button").forEach(b => b.addEventListener("click", () => showTab(b.dataset.tab)));

// Passes: what each did.
document.getElementById("tab-passes").innerHTML = "<h3>Rewrite passes</h3><table><tr><th>pass</th><th>nodes</th><th>ms</th><th>changes</th></tr>" +
  D.passes.map(p => "<tr><td>" + esc(p.name) + "@" + p.version + "</td><td class=n>" + p.nodes_before + " \u2192 " + p.nodes_after + "</td><td class=n>" + fmt(p.ms, 2) + "</td><td>" + (p.changes.length ? esc(p.changes.join(", ")) : "no change") + "</td></tr>").join("") + "</table>";

// Cache: key, status, components, phases, kernels.
const C = D.cache;
document.getElementById("tab-cache").innerHTML = "<h3>Cache</h3><p><b>key</b> <code>" + esc(C.key) + "</code><br><b>status</b> " + esc(C.status) + (C.note ? " (" + esc(C.note) + ")" : "") + (C.device ? "<br><b>device</b> " + esc(C.device) : "") + "</p>" +
  "<h4>Tiers</h4><table>" + C.tiers.map(([t, a]) => "<tr><td>" + esc(t) + "</td><td>" + esc(a) + "</td></tr>").join("") + "</table>" +
  "<h4>Compile time per phase (ms)</h4><table>" + Object.entries(C.times_ms).filter(([k, v]) => v > 0).map(([k, v]) => "<tr><td>" + esc(k) + "</td><td class=n>" + fmt(v, 2) + "</td></tr>").join("") + "</table>" +
  "<h4>Kernels</h4><p>" + C.kernels.count + " distinct, " + C.kernels.reused + " reused from the kernel cache, " + C.kernels.compiled + " compiled (" + C.kernels.jobs + " at once)</p><table>" +
  C.kernels.compile_ms.map(([s, ms]) => "<tr><td><code>" + esc(s) + "</code></td><td class=n>" + fmt(ms, 1) + " ms</td></tr>").join("") + "</table>" +
  "<h4>Key components</h4><table>" + C.components.map(([k, v]) => "<tr><td>" + esc(k) + "</td><td><code>" + esc(v) + "</code></td></tr>").join("") + "</table>";

// Profile: sorted table.
const P = D.profile;
document.getElementById("tab-profile").innerHTML = !P ? "<p>No profile: give every input (kiln report MODEL --input NAME=FILE ...).</p>" :
  "<h3>Profile</h3><p>" + P.runs + " runs, " + fmt(P.wall_ms) + " ms per run; threads busy " + P.thread_busy_ns.map(b => fmt(100 * b / P.wall_ns, 0) + "%").join(" ") + "</p><table><tr><th>ms/run</th><th>share</th><th>parts</th><th>MB</th><th>GFLOP/s</th><th>node</th></tr>" +
  (() => { const tot = P.steps.reduce((s, x) => s + x.ms, 0); return [...P.steps].sort((a, b) => b.ms - a.ms).map(s => "<tr" + (slow.has(s.node) ? ' style="color:#d00"' : "") + "><td class=n>" + fmt(s.ms) + "</td><td class=n>" + fmt(tot > 0 ? 100 * s.ms / tot : 0, 1) + "%</td><td class=n>" + fmt(s.parts, 1) + "</td><td class=n>" + fmt(s.bytes / 1e6) + "</td><td class=n>" + (s.flops > 0 && s.ms > 0 ? fmt(s.flops / (s.ms * 1e6), 1) : "-") + '</td><td><a href="#node=' + s.node + '">' + esc(s.label) + "</a></td></tr>").join(""); })() + "</table>";

// #node=N selects a node as a click on it would (links in the profile, and tests).
function fromHash() {
  const m = /node=(\d+)/.exec(location.hash);
  if (m) { const g = document.getElementById("node-" + m[1]); if (g) g.dispatchEvent(new MouseEvent("click", {bubbles: true})); }
}
window.addEventListener("hashchange", fromHash);
fromHash();
document.body.dataset.renderMs = (performance.now() - t0).toFixed(1);
document.body.dataset.ready = "1";
</script></body></html>
)KILNPAGE";
}

}  // namespace kiln
