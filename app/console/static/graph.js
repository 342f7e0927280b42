// The console's graph view: the neighbourhood JSON drawn as SVG with a small force layout.
// Pan (drag the background), zoom (wheel, + / −), select (click, Enter), expand (double-click,
// "Expand selected", the E key), open (O key, "Open selected"). No library, nothing fetched but
// the console's own JSON. Names are set as text, never as markup.
"use strict";
(function () {
  const svg = document.getElementById("graph");
  if (!svg) return;
  const NS = "http://www.w3.org/2000/svg";
  const tools = document.getElementById("graph-tools");
  const expandButton = document.getElementById("expand");
  const openLink = document.getElementById("open");
  const selectedText = document.getElementById("selected");
  const nodes = new Map(); // id -> {id, name, type, url, x, y, vx, vy, el}
  const edges = new Map(); // id -> {id, from, to, type, el, label}
  const mores = new Map(); // id of the node a load was around -> {count, plus, el}
  let view = { x: -400, y: -300, w: 800, h: 600 };
  let selected = null;
  let ticks = 0;

  const layer = (cls) => { const g = document.createElementNS(NS, "g"); g.setAttribute("class", cls); svg.appendChild(g); return g; };
  const defs = el("defs", {}, svg);
  const arrow = el("marker", { id: "arrow", viewBox: "0 0 10 10", refX: "22", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" }, defs);
  el("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrow" }, arrow);
  const edgeLayer = layer("edges");
  const nodeLayer = layer("nodes");

  function el(name, attrs, parent) {
    const e = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (parent) parent.appendChild(e);
    return e;
  }

  function setView() { svg.setAttribute("viewBox", `${view.x} ${view.y} ${view.w} ${view.h}`); }

  async function load(url, around) {
    const answer = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (!answer.ok) { selectedText.textContent = "Could not load the neighbourhood."; return; }
    merge(await answer.json(), around);
  }

  function merge(data, around) {
    const anchor = nodes.get(around) || { x: 0, y: 0 };
    for (const n of data.nodes) {
      if (nodes.has(n.id)) continue;
      const angle = Math.random() * 2 * Math.PI;
      const node = { ...n, x: anchor.x + 60 * Math.cos(angle), y: anchor.y + 60 * Math.sin(angle), vx: 0, vy: 0 };
      if (nodes.size === 0) { node.x = 0; node.y = 0; }
      node.el = drawNode(node, n.id === data.center && nodes.size === 0);
      nodes.set(n.id, node);
    }
    for (const e of data.edges) {
      if (edges.has(e.id)) continue;
      const line = el("line", { class: "edge", "marker-end": "url(#arrow)" }, edgeLayer);
      const label = el("text", { class: "edge-label", "text-anchor": "middle" }, edgeLayer);
      label.textContent = e.type;
      edges.set(e.id, { ...e, el: line, label });
    }
    const old = mores.get(data.center);
    if (old) old.el.remove();
    mores.delete(data.center);
    if (data.more > 0 && nodes.has(data.center)) {
      const c = nodes.get(data.center);
      const a = el("a", { class: "more", href: c.url, "data-more": String(data.more) }, nodeLayer);
      el("circle", { r: 16 }, a);
      const t = el("text", { "text-anchor": "middle", dy: 30 }, a);
      t.textContent = `+${data.more}${data.more_plus ? "+" : ""} more`;
      mores.set(data.center, { el: a, of: data.center, dx: 70, dy: -70 });
    }
    ticks = 300;
    requestAnimationFrame(step);
  }

  function drawNode(node, center) {
    const g = el("g", { class: center ? "node center" : "node", tabindex: "0", role: "button", "data-id": node.id }, nodeLayer);
    g.setAttribute("aria-label", `${node.name} (${node.type})`);
    el("circle", { r: 11 }, g);
    const t = el("text", { x: 15, dy: 4 }, g);
    t.textContent = node.name;
    const title = el("title", {}, g);
    title.textContent = `${node.name} — ${node.type}`;
    g.addEventListener("click", (ev) => { ev.stopPropagation(); select(node.id); });
    g.addEventListener("dblclick", (ev) => { ev.stopPropagation(); select(node.id); expand(); });
    g.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); select(node.id); }
      else if (ev.key === "e" || ev.key === "E") { select(node.id); expand(); }
      else if (ev.key === "o" || ev.key === "O") { window.location.assign(node.url); }
    });
    g.addEventListener("pointerdown", (ev) => ev.stopPropagation());
    return g;
  }

  function select(id) {
    if (selected) nodes.get(selected).el.classList.remove("selected");
    selected = id;
    const node = nodes.get(id);
    node.el.classList.add("selected");
    selectedText.textContent = `Selected: ${node.name} (${node.type})`;
    expandButton.disabled = false;
    openLink.href = node.url;
    openLink.setAttribute("aria-disabled", "false");
  }

  function expand() {
    if (!selected) return;
    load(`/console/api/graph?entity=${encodeURIComponent(selected)}&depth=1`, selected);
  }

  // --- the layout: repulsion between all nodes, springs along relations, a pull to the centre ---
  function step() {
    const list = [...nodes.values()];
    for (let i = 0; i < list.length; i++) {
      const a = list[i];
      for (let j = i + 1; j < list.length; j++) {
        const b = list[j];
        let dx = a.x - b.x, dy = a.y - b.y;
        let d2 = dx * dx + dy * dy;
        if (d2 < 1) { dx = Math.random(); dy = Math.random(); d2 = 1; }
        const f = 2400 / d2;
        const d = Math.sqrt(d2);
        a.vx += (dx / d) * f; a.vy += (dy / d) * f;
        b.vx -= (dx / d) * f; b.vy -= (dy / d) * f;
      }
    }
    for (const e of edges.values()) {
      const a = nodes.get(e.from), b = nodes.get(e.to);
      if (!a || !b) continue;
      const dx = b.x - a.x, dy = b.y - a.y;
      const d = Math.sqrt(dx * dx + dy * dy) || 1;
      const f = (d - 140) * 0.02;
      a.vx += (dx / d) * f; a.vy += (dy / d) * f;
      b.vx -= (dx / d) * f; b.vy -= (dy / d) * f;
    }
    for (const n of list) {
      n.vx -= n.x * 0.002; n.vy -= n.y * 0.002;
      n.vx *= 0.6; n.vy *= 0.6;
      n.x += Math.max(-30, Math.min(30, n.vx));
      n.y += Math.max(-30, Math.min(30, n.vy));
    }
    draw();
    if (--ticks > 0) requestAnimationFrame(step);
  }

  function draw() {
    for (const n of nodes.values()) n.el.setAttribute("transform", `translate(${n.x.toFixed(1)} ${n.y.toFixed(1)})`);
    for (const e of edges.values()) {
      const a = nodes.get(e.from), b = nodes.get(e.to);
      if (!a || !b) continue;
      e.el.setAttribute("x1", a.x); e.el.setAttribute("y1", a.y);
      e.el.setAttribute("x2", b.x); e.el.setAttribute("y2", b.y);
      e.label.setAttribute("x", (a.x + b.x) / 2); e.label.setAttribute("y", (a.y + b.y) / 2 - 3);
    }
    for (const m of mores.values()) {
      const c = nodes.get(m.of);
      m.el.setAttribute("transform", `translate(${c.x + m.dx} ${c.y + m.dy})`);
    }
  }

  // --- pan and zoom ---
  let drag = null;
  svg.addEventListener("pointerdown", (ev) => {
    drag = { x: ev.clientX, y: ev.clientY, view: { ...view } };
    svg.setPointerCapture(ev.pointerId);
  });
  svg.addEventListener("pointermove", (ev) => {
    if (!drag) return;
    const scale = view.w / svg.clientWidth;
    view.x = drag.view.x - (ev.clientX - drag.x) * scale;
    view.y = drag.view.y - (ev.clientY - drag.y) * scale;
    setView();
  });
  svg.addEventListener("pointerup", () => { drag = null; });
  function zoom(factor) {
    const cx = view.x + view.w / 2, cy = view.y + view.h / 2;
    view.w *= factor; view.h *= factor;
    view.x = cx - view.w / 2; view.y = cy - view.h / 2;
    setView();
  }
  svg.addEventListener("wheel", (ev) => { ev.preventDefault(); zoom(ev.deltaY > 0 ? 1.15 : 1 / 1.15); }, { passive: false });
  document.getElementById("zoom-in").addEventListener("click", () => zoom(1 / 1.25));
  document.getElementById("zoom-out").addEventListener("click", () => zoom(1.25));
  expandButton.addEventListener("click", expand);

  tools.hidden = false;
  setView();
  load(svg.dataset.source, svg.dataset.center);
})();
