// The console graph view's layouts compared on the same graphs: the hand-written force layout it
// had, and d3-force as graph.js configures it. Run: make console-assets && node bench/graph_layout.js
const d3 = require("../app/console/assets/node_modules/d3-force");
function rng(seed){ return () => { seed = (seed * 1664525 + 1013904223) % 4294967296; return seed / 4294967296; }; }
function graph(seed, n, m) {
  const r = rng(seed), names = ["Ada Lovelace","Analytical Engine","Charles Babbage","Royal Society","London","Difference Engine","Mary Somerville","Augustus De Morgan","Note G","Bernoulli numbers"];
  const nodes = [...Array(n)].map((_, i) => ({ id: i, name: names[i % names.length] + (i >= names.length ? " " + i : "") }));
  const edges = [];
  for (let i = 1; i < n; i++) edges.push({ from: Math.floor(r() * i), to: i });  // a tree around the centre
  while (edges.length < m) { const a = Math.floor(r() * n), b = Math.floor(r() * n); if (a !== b) edges.push({ from: a, to: b }); }
  return { nodes, edges };
}
function handwritten(g, seed) {  // the console's layout today (static/graph.js step()), 300 ticks
  const r = rng(seed); const nodes = g.nodes.map((n, i) => ({ ...n, x: i ? 60 * Math.cos(r() * 6.28) : 0, y: i ? 60 * Math.sin(r() * 6.28) : 0, vx: 0, vy: 0 }));
  for (let t = 0; t < 300; t++) {
    for (let i = 0; i < nodes.length; i++) { const a = nodes[i]; for (let j = i + 1; j < nodes.length; j++) { const b = nodes[j];
      let dx = a.x - b.x, dy = a.y - b.y; let d2 = dx * dx + dy * dy; if (d2 < 1) { dx = r(); dy = r(); d2 = 1; }
      const f = 2400 / d2, d = Math.sqrt(d2); a.vx += dx / d * f; a.vy += dy / d * f; b.vx -= dx / d * f; b.vy -= dy / d * f; } }
    for (const e of g.edges) { const a = nodes[e.from], b = nodes[e.to]; const dx = b.x - a.x, dy = b.y - a.y; const d = Math.sqrt(dx * dx + dy * dy) || 1; const f = (d - 140) * 0.02;
      a.vx += dx / d * f; a.vy += dy / d * f; b.vx -= dx / d * f; b.vy -= dy / d * f; }
    for (const n of nodes) { n.vx -= n.x * 0.002; n.vy -= n.y * 0.002; n.vx *= 0.6; n.vy *= 0.6; n.x += Math.max(-30, Math.min(30, n.vx)); n.y += Math.max(-30, Math.min(30, n.vy)); }
  }
  return nodes;
}
function withD3(g) {
  const nodes = g.nodes.map((n) => ({ ...n })), links = g.edges.map((e) => ({ source: e.from, target: e.to }));
  const sim = d3.forceSimulation(nodes).randomSource(rng(7))
    .force("charge", d3.forceManyBody().strength(-400))
    .force("link", d3.forceLink(links).distance(130))
    .force("collide", d3.forceCollide((n) => 8 + 3.6 * n.name.length / 2).iterations(2))
    .force("x", d3.forceX().strength(0.04)).force("y", d3.forceY().strength(0.04)).stop();
  sim.tick(300);
  return nodes;
}
function score(g, nodes) {
  const box = (n) => ({ x1: n.x - 11, x2: n.x + 15 + 7 * n.name.length, y1: n.y - 11, y2: n.y + 11 });  // circle + label at 12 px
  let overlaps = 0, crossings = 0, close = 0;
  for (let i = 0; i < nodes.length; i++) for (let j = i + 1; j < nodes.length; j++) {
    const a = box(nodes[i]), b = box(nodes[j]); if (a.x1 < b.x2 && b.x1 < a.x2 && a.y1 < b.y2 && b.y1 < a.y2) overlaps++;
    if (Math.hypot(nodes[i].x - nodes[j].x, nodes[i].y - nodes[j].y) < 30) close++; }
  const cross = (p, q, r2, s) => { const o = (a, b, c) => Math.sign((b.x - a.x) * (c.y - a.y) - (b.y - a.y) * (c.x - a.x)); return o(p, q, r2) * o(p, q, s) < 0 && o(r2, s, p) * o(r2, s, q) < 0; };
  for (let i = 0; i < g.edges.length; i++) for (let j = i + 1; j < g.edges.length; j++) { const e = g.edges[i], f = g.edges[j];
    if (new Set([e.from, e.to, f.from, f.to]).size < 4) continue; if (cross(nodes[e.from], nodes[e.to], nodes[f.from], nodes[f.to])) crossings++; }
  const xs = nodes.map((n) => n.x), ys = nodes.map((n) => n.y);
  return { labelOverlaps: overlaps, nodesWithin30px: close, edgeCrossings: crossings, extent: `${Math.round(Math.max(...xs) - Math.min(...xs))}x${Math.round(Math.max(...ys) - Math.min(...ys))}` };
}
for (const [n, m] of [[10, 12], [25, 35], [40, 60], [40, 120]]) {
  const rows = { handwritten: [], d3: [] };
  for (let seed = 1; seed <= 5; seed++) {
    const g = graph(seed, n, m);
    let t = performance.now(); const h = handwritten(g, seed); const th = performance.now() - t;
    t = performance.now(); const d = withD3(g); const td = performance.now() - t;
    rows.handwritten.push({ ...score(g, h), ms: th }); rows.d3.push({ ...score(g, d), ms: td });
  }
  const mean = (xs, k) => (xs.reduce((s, x) => s + x[k], 0) / xs.length).toFixed(1);
  for (const [name, xs] of Object.entries(rows)) console.log(`${n} nodes ${m} edges ${name}: label overlaps ${mean(xs, "labelOverlaps")}, nodes within 30 px ${mean(xs, "nodesWithin30px")}, crossings ${mean(xs, "edgeCrossings")}, ms ${mean(xs, "ms")}, extent ${xs[0].extent}`);
}
