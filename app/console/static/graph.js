// The console's graph view: the neighbourhood JSON drawn as SVG, laid out by d3-force (the npm
// package, installed at build time and served beside this file: docs/console.md says why). Nodes
// are coloured by type (the legend names them), labels keep one readable size at every zoom, and
// the view fits the drawing until the person pans or zooms ("Fit" brings it back). Pan (drag the
// background), zoom (wheel, + / −), select (click, Enter), expand (double-click, "Expand selected",
// the E key), open (O key, "Open selected"). Nothing is fetched but the console's own JSON; names
// are set as text, never as markup.
"use strict";
(function () {
  const svg = document.getElementById("graph");
  if (!svg || !window.d3) return; // without the layout library the page's list still says it all
  const NS = "http://www.w3.org/2000/svg";
  const LABEL_PX = 13; // the labels' size on screen, whatever the zoom
  const tools = document.getElementById("graph-tools");
  const legend = document.getElementById("legend");
  const expandButton = document.getElementById("expand");
  const openLink = document.getElementById("open");
  const selectedText = document.getElementById("selected");
  const nodes = new Map(); // id -> {id, name, type, colour, url, x, y, el}
  const edges = new Map(); // id -> {id, source, target, type, el, label}
  const mores = new Map(); // id of the node a load was around -> {of, el}
  let view = { x: -400, y: -300, w: 800, h: 600 };
  let fitting = true; // follow the layout until the person moves the view
  let selected = null;

  const layer = (cls) => el("g", { class: cls }, svg);
  const defs = el("defs", {}, svg);
  const arrow = el("marker", { id: "arrow", viewBox: "0 0 10 10", refX: "22", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" }, defs);
  el("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrow" }, arrow);
  const edgeLayer = layer("edges");
  const nodeLayer = layer("nodes");

  const simulation = d3.forceSimulation([])
    .force("charge", d3.forceManyBody().strength(-400))
    .force("link", d3.forceLink([]).id((n) => n.id).distance(130))
    .force("collide", d3.forceCollide((n) => 14 + 3.6 * Math.min(n.name.length, 40) / 2).iterations(2))
    .force("x", d3.forceX().strength(0.04))
    .force("y", d3.forceY().strength(0.04))
    .on("tick", draw);

  function el(name, attrs, parent) {
    const e = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (parent) parent.appendChild(e);
    return e;
  }

  function setView() {
    svg.setAttribute("viewBox", `${view.x} ${view.y} ${view.w} ${view.h}`);
    // One size on screen: the font in drawing units grows as the view widens (an attribute, not a style).
    const scale = view.w / (svg.clientWidth || 800);
    nodeLayer.setAttribute("font-size", (LABEL_PX * scale).toFixed(2));
    edgeLayer.setAttribute("font-size", ((LABEL_PX - 2) * scale).toFixed(2));
  }

  function fit() {
    const list = [...nodes.values()];
    if (!list.length) return;
    const box = nodeLayer.getBBox(); // names included, as drawn
    const pad = 40 * (view.w / (svg.clientWidth || 800));
    const ratio = (svg.clientHeight || 600) / (svg.clientWidth || 800);
    let w = Math.max(box.width + 2 * pad, 300), h = Math.max(box.height + 2 * pad, 300 * ratio);
    if (h / w > ratio) w = h / ratio; else h = w * ratio; // keep the element's shape: no stretching
    view = { x: box.x + box.width / 2 - w / 2, y: box.y + box.height / 2 - h / 2, w, h };
    setView();
  }

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
      const node = { ...n, x: anchor.x + 60 * Math.cos(angle), y: anchor.y + 60 * Math.sin(angle) };
      if (nodes.size === 0) { node.x = 0; node.y = 0; node.fx = 0; node.fy = 0; } // the centre stays put
      node.el = drawNode(node, n.id === data.center && nodes.size === 0);
      nodes.set(n.id, node);
    }
    for (const e of data.edges) {
      if (edges.has(e.id)) continue;
      const line = el("line", { class: "edge", "marker-end": "url(#arrow)" }, edgeLayer);
      const label = el("text", { class: "edge-label", "text-anchor": "middle" }, edgeLayer);
      label.textContent = e.type;
      edges.set(e.id, { id: e.id, source: e.from, target: e.to, type: e.type, el: line, label });
    }
    const old = mores.get(data.center);
    if (old) old.el.remove();
    mores.delete(data.center);
    if (data.more > 0 && nodes.has(data.center)) {
      const c = nodes.get(data.center);
      const a = el("a", { class: "more", href: c.url, "data-more": String(data.more) }, nodeLayer);
      el("circle", { r: 16 }, a);
      const t = el("text", { "text-anchor": "middle", dy: "2.2em" }, a);
      t.textContent = `+${data.more}${data.more_plus ? "+" : ""} more`;
      mores.set(data.center, { el: a, of: data.center });
    }
    drawLegend();
    simulation.nodes([...nodes.values()]);
    simulation.force("link").links([...edges.values()]);
    simulation.alpha(1).restart();
  }

  function drawNode(node, center) {
    const g = el("g", { class: `node type-${node.colour}${center ? " center" : ""}`, tabindex: "0", role: "button", "data-id": node.id }, nodeLayer);
    g.setAttribute("aria-label", `${node.name} (${node.type})`);
    el("circle", { r: center ? 14 : 11 }, g);
    const t = el("text", { x: center ? 18 : 15, dy: "0.35em" }, g);
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

  function drawLegend() {
    if (!legend) return;
    const types = new Map();
    for (const n of nodes.values()) types.set(n.type, n.colour);
    legend.replaceChildren();
    for (const [type, colour] of [...types].sort((a, b) => a[0].localeCompare(b[0]))) {
      const item = document.createElement("li");
      item.className = `type-${colour}`;
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.setAttribute("aria-hidden", "true");
      item.append(swatch, document.createTextNode(type));
      legend.appendChild(item);
    }
    legend.hidden = types.size === 0;
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
    fitting = true; // new neighbours: show them all
    load(`/console/api/graph?entity=${encodeURIComponent(selected)}&depth=1`, selected);
  }

  function draw() {
    for (const n of nodes.values()) n.el.setAttribute("transform", `translate(${n.x.toFixed(1)} ${n.y.toFixed(1)})`);
    for (const e of edges.values()) {
      const a = e.source, b = e.target; // objects once the link force has resolved the ids
      if (!a.el || !b.el) continue;
      e.el.setAttribute("x1", a.x); e.el.setAttribute("y1", a.y);
      e.el.setAttribute("x2", b.x); e.el.setAttribute("y2", b.y);
      e.label.setAttribute("x", (a.x + b.x) / 2); e.label.setAttribute("y", (a.y + b.y) / 2 - 3);
    }
    for (const m of mores.values()) {
      const c = nodes.get(m.of);
      m.el.setAttribute("transform", `translate(${c.x + 70} ${c.y - 70})`);
    }
    if (fitting) fit();
  }

  // --- pan and zoom: either ends the fitting, "Fit" brings it back ---
  let drag = null;
  svg.addEventListener("pointerdown", (ev) => {
    drag = { x: ev.clientX, y: ev.clientY, view: { ...view } };
    svg.setPointerCapture(ev.pointerId);
  });
  svg.addEventListener("pointermove", (ev) => {
    if (!drag) return;
    fitting = false;
    const scale = view.w / svg.clientWidth;
    view.x = drag.view.x - (ev.clientX - drag.x) * scale;
    view.y = drag.view.y - (ev.clientY - drag.y) * scale;
    setView();
  });
  svg.addEventListener("pointerup", () => { drag = null; });
  function zoom(factor) {
    fitting = false;
    const cx = view.x + view.w / 2, cy = view.y + view.h / 2;
    view.w *= factor; view.h *= factor;
    view.x = cx - view.w / 2; view.y = cy - view.h / 2;
    setView();
  }
  svg.addEventListener("wheel", (ev) => { ev.preventDefault(); zoom(ev.deltaY > 0 ? 1.15 : 1 / 1.15); }, { passive: false });
  document.getElementById("zoom-in").addEventListener("click", () => zoom(1 / 1.25));
  document.getElementById("zoom-out").addEventListener("click", () => zoom(1.25));
  document.getElementById("fit").addEventListener("click", () => { fitting = true; fit(); });
  expandButton.addEventListener("click", expand);
  window.addEventListener("resize", () => (fitting ? fit() : setView()));

  tools.hidden = false;
  setView();
  load(svg.dataset.source, svg.dataset.center);
})();
