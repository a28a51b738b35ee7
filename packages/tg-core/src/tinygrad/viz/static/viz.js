// tinygrad viz: draws the trace that tinygrad/viz/record.py wrote (served as trace.json). No libraries and no
// network beyond that one file: the page must work from a laptop on a plane and from a headless test browser.
"use strict";
(() => {
  const SVGNS = "http://www.w3.org/2000/svg";
  const $ = (id) => document.getElementById(id);

  const state = {
    trace: null,
    sel: null,        // {kind: "kernel" | "schedule", id}
    pass: 0,
    diff: false,
    tab: "graph",
    view: { x: 0, y: 0, k: 1 },   // graph pan/zoom
    size: { w: 0, h: 0 },         // the drawn graph's extent, for "fit"
    selectedNode: null,
  };

  // ---------- small helpers ----------
  function h(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else if (v !== undefined && v !== null) e.setAttribute(k, v);
    }
    for (const c of children) if (c !== null && c !== undefined) e.append(c);
    return e;
  }
  function s(tag, attrs) {
    const e = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    return e;
  }
  function fmtTime(us) {
    if (us === undefined || us === null) return "";
    if (us < 1) return `${(us * 1000).toFixed(0)} ns`;
    if (us < 1000) return `${us.toFixed(us < 10 ? 2 : 1)} µs`;
    if (us < 1e6) return `${(us / 1000).toFixed(2)} ms`;
    return `${(us / 1e6).toFixed(2)} s`;
  }
  function fmtNum(n) {
    if (n === undefined || n === null) return "";
    const units = [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
    for (const [v, u] of units) if (Math.abs(n) >= v) return `${(n / v).toFixed(2)} ${u}`;
    return String(n);
  }
  function clip(text, n) { return text.length <= n ? text : text.slice(0, n - 1) + "…"; }

  // ---------- the list on the left ----------
  function kernelForItem(item) {
    // the last kernel recorded for this AST on this device: with BEAM the candidates come first, the chosen last
    const byAst = state.trace._kernelsByAst.get(item.ast) || [];
    for (let i = byAst.length - 1; i >= 0; i--) if (byAst[i].device === item.device) return byAst[i];
    return byAst.length ? byAst[byAst.length - 1] : null;
  }

  function kernelMeta(k) {
    if (k.timings) return `${fmtTime(k.timings.mean_us)}${k.timings.count > 1 ? ` ×${k.timings.count}` : ""}`;
    return `${k.passes.length} passes`;
  }

  function buildList() {
    const t = state.trace, list = $("kernel-list"), filter = $("filter").value.trim().toLowerCase();
    list.replaceChildren();
    const listed = new Set();
    const rows = [];
    for (const sc of t.schedules) {
      for (const it of sc.items) { const k = it.kind === "kernel" ? kernelForItem(it) : null; if (k) listed.add(k.id); }
    }
    const entries = [...t.schedules.map((x) => ({ kind: "schedule", rec: x })),
      ...t.kernels.filter((k) => !listed.has(k.id)).map((x) => ({ kind: "kernel", rec: x }))];
    entries.sort((a, b) => a.rec.seq - b.rec.seq);
    const matches = (name) => !filter || name.toLowerCase().includes(filter);
    for (const e of entries) {
      if (e.kind === "kernel") {
        if (matches(e.rec.name)) rows.push(kernelRow(e.rec, false, false));
        continue;
      }
      const sc = e.rec;
      const sub = [];
      const seen = new Set();
      for (const it of sc.items) {
        if (it.kind === "copy") { if (!filter) sub.push(h("li", { class: "nested copy" }, h("span", { class: "name" }, "copy"), h("span", { class: "dev" }, it.device))); continue; }
        const k = kernelForItem(it);
        if (!k) { if (!filter) sub.push(h("li", { class: "nested copy", title: "this kernel was not recorded (compiled before VIZ was on, or past the kernel limit)" }, h("span", { class: "name" }, "kernel (not recorded)"))); continue; }
        if (!matches(k.name)) continue;
        // a kernel compiled for an earlier schedule is only referenced here
        sub.push(kernelRow(k, true, k.seq < sc.seq || seen.has(k.id)));
        seen.add(k.id);
      }
      if (filter && !sub.length && !matches(sc.name)) continue;
      const nk = sc.items.filter((i) => i.kind === "kernel").length;
      const row = h("li", { class: "schedule", "data-kind": "schedule", "data-id": sc.id, title: "the tensor graph this schedule was made from" },
        h("span", { class: "name" }, sc.name), h("span", { class: "meta" }, `${nk} kernel${nk === 1 ? "" : "s"}, ${fmtTime(sc.time_ms * 1000)}`));
      row.addEventListener("click", () => select({ kind: "schedule", id: sc.id }));
      rows.push(row, ...sub);
    }
    if (!rows.length) rows.push(h("li", { class: "empty" }, t.kernels.length || t.schedules.length ? "nothing matches" : "no kernels recorded"));
    list.append(...rows);
    markSelected();
  }

  function kernelRow(k, nested, reused) {
    const row = h("li", { class: `kernel${nested ? " nested" : ""}${reused ? " reused" : ""}`, "data-kind": "kernel", "data-id": k.id,
      title: reused ? "compiled earlier: this schedule reuses the program" : `${k.name} on ${k.device}` },
    h("span", { class: "name" }, (reused ? "↻ " : "") + k.name), h("span", { class: "dev" }, k.device), h("span", { class: "meta" }, kernelMeta(k)));
    row.addEventListener("click", () => select({ kind: "kernel", id: k.id }));
    return row;
  }

  function markSelected() {
    for (const li of $("kernel-list").querySelectorAll("li[data-kind]")) {
      const on = state.sel && li.dataset.kind === state.sel.kind && Number(li.dataset.id) === state.sel.id;
      li.classList.toggle("selected", !!on);
    }
  }

  // ---------- selection and the pass bar ----------
  function current() {
    if (!state.sel) return null;
    return state.sel.kind === "kernel" ? state.trace.kernels[state.sel.id] : state.trace.schedules[state.sel.id];
  }
  function passesOf(rec) { return state.sel.kind === "kernel" ? rec.passes : [rec.graph]; }

  function select(sel, pass) {
    const recs = sel.kind === "kernel" ? state.trace.kernels : state.trace.schedules;
    if (!recs[sel.id]) return;
    const changed = !state.sel || state.sel.kind !== sel.kind || state.sel.id !== sel.id;
    state.sel = sel;
    const n = passesOf(recs[sel.id]).length;
    // a new kernel opens at its last pass (what was rendered); the chosen pass survives a redraw
    state.pass = pass !== undefined ? Math.max(0, Math.min(pass, n - 1)) : (changed ? n - 1 : Math.min(state.pass, n - 1));
    state.selectedNode = null;
    markSelected();
    renderPassBar();
    renderGraph(true);
    renderRight();
    saveHash();
  }

  function setPass(p) {
    const rec = current();
    if (!rec) return;
    const n = passesOf(rec).length;
    state.pass = Math.max(0, Math.min(p, n - 1));
    renderPassBar();
    renderGraph(true);
    saveHash();
  }

  function passChanged(prev, cur) {
    if (!prev) return true;
    if (prev.ids.length !== cur.ids.length) return true;
    for (let i = 0; i < cur.ids.length; i++) if (prev.ids[i] !== cur.ids[i]) return true;
    return false;
  }

  function renderPassBar() {
    const rec = current(), passes = passesOf(rec);
    const slider = $("pass-slider");
    slider.max = String(passes.length - 1);
    slider.value = String(state.pass);
    slider.disabled = passes.length < 2;
    $("pass-name").textContent = `${state.pass}: ${passes[state.pass].name}`;
    const chips = passes.map((p, i) => {
      const same = i > 0 && !passChanged(passes[i - 1], p);
      const b = h("button", { type: "button", class: `${i === state.pass ? "active" : ""}${same ? " same" : ""}`,
        title: same ? "no change from the previous pass" : `${p.total} nodes${p.truncated ? " (truncated)" : ""}` },
      p.name, h("span", { class: "count" }, String(p.total)));
      b.addEventListener("click", () => setPass(i));
      return b;
    });
    $("pass-list").replaceChildren(...chips);
  }

  // ---------- layout: longest-path layers, barycenter ordering, then x from the neighbours ----------
  const NODE_H = 34, LAYER_GAP = 46, NODE_GAP = 14, CHAR_W = 6.7;

  function nodeLabel(n) {
    const sub = n.arg === null || n.arg === undefined ? n.dtype : `${n.arg}`;
    return [n.op, clip(sub, 34)];
  }

  // x for the nodes of one row, in their order, at least their half-widths plus NODE_GAP apart: by priority, each
  // node takes the position it wants, clamped between its nearest placed neighbours with room left for the nodes
  // between them.
  function placeRow(row, want, width, prio, x) {
    const n = row.length, off = new Float64Array(n);  // off[q]: centre of q minus centre of 0 when packed tight
    for (let q = 1; q < n; q++) off[q] = off[q - 1] + (width[row[q - 1]] + width[row[q]]) / 2 + NODE_GAP;
    const placed = new Uint8Array(n), pos = new Float64Array(n);
    const byPrio = [...row.keys()].sort((a, b) => prio[row[b]] - prio[row[a]] || a - b);
    for (const q of byPrio) {
      let lo = -Infinity, hi = Infinity;
      for (let p = q - 1; p >= 0; p--) if (placed[p]) { lo = pos[p] + off[q] - off[p]; break; }
      for (let p = q + 1; p < n; p++) if (placed[p]) { hi = pos[p] - (off[p] - off[q]); break; }
      pos[q] = Math.min(Math.max(want[q], lo), hi);
      placed[q] = 1;
    }
    for (let q = 0; q < n; q++) x[row[q]] = pos[q];
  }

  function layout(ids, table) {
    const N = ids.length, index = new Map();
    ids.forEach((id, i) => index.set(id, i));
    const srcs = ids.map((id) => [...new Set((table[id].src || []).filter((x) => index.has(x)).map((x) => index.get(x)))]);
    const users = ids.map(() => []);
    srcs.forEach((ss, i) => ss.forEach((j) => users[j].push(i)));
    // longest path from the leaves (iterative: graphs can be thousands of nodes deep)
    const layer = new Array(N).fill(-1);
    for (let r = 0; r < N; r++) {
      if (layer[r] >= 0) continue;
      const stack = [[r, 0]];
      while (stack.length) {
        const top = stack[stack.length - 1], i = top[0];
        if (layer[i] >= 0) { stack.pop(); continue; }
        if (top[1] < srcs[i].length) {
          const j = srcs[i][top[1]++];
          if (layer[j] < 0) { if (stack.some((e) => e[0] === j)) continue; stack.push([j, 0]); }
          continue;
        }
        let L = 0;
        for (const j of srcs[i]) L = Math.max(L, layer[j] + 1);
        layer[i] = L;
        stack.pop();
      }
    }
    // leaves (constants, params) sit just above their first user instead of all in the top row
    for (let i = 0; i < N; i++) {
      if (srcs[i].length || !users[i].length) continue;
      layer[i] = Math.max(0, Math.min(...users[i].map((u) => layer[u])) - 1);
    }
    const depth = Math.max(0, ...layer) + 1;
    const layers = Array.from({ length: depth }, () => []);
    for (let i = 0; i < N; i++) layers[layer[i]].push(i);
    const order = new Float64Array(N);
    const renumber = () => layers.forEach((row) => row.forEach((i, k) => { order[i] = (k + 0.5) / row.length; }));
    renumber();
    const bary = (i, nbs) => {
      if (!nbs.length) return order[i];
      let sum = 0;
      for (const j of nbs) sum += order[j];
      return sum / nbs.length;
    };
    for (let it = 0; it < 8; it++) {
      const down = it % 2 === 0;
      for (let k = 0; k < depth; k++) {
        const L = down ? k : depth - 1 - k;
        const row = layers[L];
        const key = new Map(row.map((i) => [i, bary(i, down ? srcs[i] : users[i])]));
        row.sort((a, b) => key.get(a) - key.get(b));
        row.forEach((i, kk) => { order[i] = (kk + 0.5) / row.length; });
      }
    }
    // widths, then x: each row starts packed, then its nodes move towards their neighbours' centres. Within a row
    // the better-connected nodes are placed first and keep their wish; the others fit around them. Giving every
    // node equal say instead pushes a chain sideways by half a node at each leaf it meets, and long chains drift.
    const width = ids.map((id) => {
      const [a, b] = nodeLabel(table[id]);
      return Math.max(54, Math.ceil(Math.max(a.length, b.length) * CHAR_W) + 16);
    });
    const prio = ids.map((_, i) => srcs[i].length + users[i].length + (srcs[i].length ? N : 0));
    const x = new Float64Array(N);
    for (const row of layers) { let cx = 0; for (const i of row) { x[i] = cx + width[i] / 2; cx += width[i] + NODE_GAP; } }
    for (let it = 0; it < 10; it++) {
      const down = it % 2 === 0;
      for (let k = 0; k < depth; k++) {
        const row = layers[down ? k : depth - 1 - k];
        if (!row.length) continue;
        // a node with no edges in this pass (an unused leaf) joins the middle of its row rather than stay behind
        // at its packed position while the rest of the graph moves
        let rowSum = 0, rowN = 0;
        for (const i of row) if (srcs[i].length || users[i].length) { rowSum += x[i]; rowN++; }
        const want = row.map((i) => {
          const nbs = down ? srcs[i] : users[i];
          const all = nbs.length ? nbs : (down ? users[i] : srcs[i]);
          if (!all.length) return rowN ? rowSum / rowN : x[i];
          let sum = 0;
          for (const j of all) sum += x[j];
          return sum / all.length;
        });
        placeRow(row, want, width, prio, x);
      }
    }
    let minX = Infinity, maxX = -Infinity;
    for (let i = 0; i < N; i++) { minX = Math.min(minX, x[i] - width[i] / 2); maxX = Math.max(maxX, x[i] + width[i] / 2); }
    if (!N) { minX = 0; maxX = 0; }
    const pos = ids.map((id, i) => ({ id, x: x[i] - minX, y: layer[i] * (NODE_H + LAYER_GAP), w: width[i] }));
    return { pos, srcs, users, width: maxX - minX, height: depth * (NODE_H + LAYER_GAP) - LAYER_GAP };
  }

  // ---------- diff against the previous pass ----------
  function diffPasses(prev, cur, table) {
    const prevSet = new Set(prev.ids), curSet = new Set(cur.ids);
    const added = cur.ids.filter((id) => !prevSet.has(id));
    const removed = prev.ids.filter((id) => !curSet.has(id));
    // a new node that takes the place of an old one (same op and arg, or same op and sources) is "changed"
    const changed = new Set(), gone = new Set(removed), pairedRemoved = new Set();
    const keyed = (keyOf) => {
      const pool = new Map();
      for (const id of gone) { const k = keyOf(table[id]); if (!pool.has(k)) pool.set(k, []); pool.get(k).push(id); }
      for (const id of added) {
        if (changed.has(id)) continue;
        const bucket = pool.get(keyOf(table[id]));
        if (bucket && bucket.length) { const old = bucket.shift(); changed.add(id); gone.delete(old); pairedRemoved.add(old); }
      }
    };
    keyed((n) => `${n.op}|${n.dtype}|${n.arg}`);
    keyed((n) => `${n.op}|${(n.src || []).join(",")}`);
    return { added: new Set(added.filter((id) => !changed.has(id))), changed, removed: [...gone], replaced: pairedRemoved };
  }

  function category(op) {
    if (["SINK", "STORE", "END", "ENDIF", "ASSIGN", "AFTER"].includes(op)) return op === "ASSIGN" ? "reduce" : "sink";
    if (["LOAD", "INDEX", "PARAM", "BUFFER", "DEFINE_GLOBAL", "DEFINE_LOCAL", "DEFINE_REG", "COPY", "CONTIGUOUS", "BUFFER_VIEW"].includes(op)) return "mem";
    if (["RANGE", "SPECIAL", "IF", "BARRIER"].includes(op)) return "loop";
    if (["CONST", "VCONST", "DEFINE_VAR", "BIND", "ARANGE", "DEVICE", "UNIQUE"].includes(op)) return "const";
    if (["RESHAPE", "PERMUTE", "EXPAND", "PAD", "SHRINK", "FLIP"].includes(op)) return "move";
    if (op.startsWith("REDUCE") || op === "DEFINE_ACC" || op === "WMMA") return "reduce";
    if (["VECTORIZE", "GEP", "CAT", "PTRCAT", "UNROLL", "CONTRACT", "NOOP", "CUSTOM", "CUSTOMI"].includes(op)) return "other";
    return "alu";
  }

  // ---------- drawing the graph ----------
  function renderGraph(fit) {
    const rec = current(), vp = $("viewport"), svg = $("graph");
    vp.replaceChildren();
    $("node-info").hidden = true;
    if (!rec) return;
    const table = rec.nodes, passes = passesOf(rec), pass = passes[state.pass];
    const prev = state.pass > 0 ? passes[state.pass - 1] : null;
    const lay = layout(pass.ids, table);
    const diff = state.diff && prev ? diffPasses(prev, pass, table) : null;
    svg.classList.toggle("diffing", !!diff);
    state.size = { w: lay.width, h: lay.height };
    const note = [];
    if (pass.truncated) note.push(`showing ${pass.ids.length} of ${pass.total} nodes (truncated at the recording limit)`);
    $("graph-note").textContent = note.join(" · ");

    const edges = s("g", { class: "edges" }), nodes = s("g", { class: "nodes" });
    const edgeEls = [];
    lay.pos.forEach((p, i) => {
      for (const j of lay.srcs[i]) {
        const q = lay.pos[j];
        const x1 = q.x, y1 = q.y + NODE_H, x2 = p.x, y2 = p.y;
        const dy = Math.max(20, (y2 - y1) / 2);
        const path = s("path", { class: "edge", d: `M${x1},${y1} C${x1},${y1 + dy} ${x2},${y2 - dy} ${x2},${y2}`, "marker-end": "url(#arrow)" });
        path.dataset.from = String(q.id); path.dataset.to = String(p.id);
        edges.append(path);
        edgeEls.push(path);
      }
    });
    const shown = new Set(pass.ids);
    lay.pos.forEach((p) => {
      const n = table[p.id], [a, b] = nodeLabel(n);
      let cls = `node c-${category(n.op)}`;
      if (diff) cls += diff.added.has(p.id) ? " added" : diff.changed.has(p.id) ? " changed" : " same";
      const g = s("g", { class: cls, transform: `translate(${p.x - p.w / 2},${p.y})`, "data-id": p.id });
      g.append(s("rect", { width: p.w, height: NODE_H, rx: 5 }));
      const t1 = s("text", { x: 8, y: 14 }); t1.textContent = a;
      const t2 = s("text", { x: 8, y: 27, class: "sub" }); t2.textContent = b;
      const missing = (n.src || []).filter((x) => !shown.has(x)).length;
      if (missing) g.append(s("line", { class: "cut", x1: p.w / 2, y1: -12, x2: p.w / 2, y2: 0 }));
      const title = s("title");
      title.textContent = `${n.op} ${n.dtype}${n.arg !== null && n.arg !== undefined ? `\narg: ${n.arg}` : ""}${n.shape ? `\nshape: (${n.shape.join(", ")})` : ""}\nid ${n.id}${missing ? `\n${missing} source(s) not shown` : ""}`;
      g.append(t1, t2, title);
      nodes.append(g);
    });
    const defs = s("defs");
    const marker = s("marker", { id: "arrow", viewBox: "0 0 8 8", refX: 8, refY: 4, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" });
    marker.append(s("path", { d: "M0,0 L8,4 L0,8 z", fill: "#9aa3b5" }));
    defs.append(marker);
    vp.append(defs, edges, nodes);
    state.edgeEls = edgeEls;

    const summary = $("diff-summary");
    summary.replaceChildren();
    if (diff) {
      const removedText = diff.removed.slice(0, 40).map((id) => `${table[id].op}${table[id].arg ? `(${clip(table[id].arg, 24)})` : ""}`).join(", ");
      summary.append(h("span", { class: "added-text" }, `+${diff.added.size} added`), "  ",
        h("span", { class: "changed-text" }, `~${diff.changed.size} changed`), "  ",
        h("span", { class: "removed-text" }, `−${diff.removed.length} removed`),
        ` vs ${prev.name}`, diff.removed.length ? `: ${removedText}${diff.removed.length > 40 ? ", …" : ""}` : "");
    } else if (state.diff && !prev) {
      summary.textContent = "the first pass has nothing to compare with";
    }
    if (fit) fitView();
    else applyView();
  }

  function showNode(id) {
    const rec = current(), table = rec.nodes, n = table[id], pass = passesOf(rec)[state.pass];
    state.selectedNode = id;
    for (const g of $("viewport").querySelectorAll(".node")) g.classList.toggle("selected", Number(g.dataset.id) === id);
    for (const e of state.edgeEls || []) e.classList.toggle("hl", Number(e.dataset.from) === id || Number(e.dataset.to) === id);
    const inPass = new Set(pass.ids);
    const users = pass.ids.filter((u) => (table[u].src || []).includes(id));
    const ref = (j) => {
      const span = h("span", { class: "src" }, `${j} ${table[j].op}`);
      if (inPass.has(j)) span.addEventListener("click", () => showNode(j));
      return span;
    };
    const join = (xs) => xs.flatMap((x, i) => (i ? [", ", x] : [x]));
    const box = $("node-info");
    box.replaceChildren(
      h("div", {}, h("b", {}, n.op), ` ${n.dtype} · id ${n.id}`),
      n.arg !== null && n.arg !== undefined ? h("div", {}, "arg: ", h("code", {}, n.arg)) : null,
      n.shape ? h("div", {}, `shape: (${n.shape.join(", ")})`) : null,
      h("div", {}, "sources: ", ...(n.src && n.src.length ? join(n.src.map(ref)) : ["none"])),
      h("div", {}, "users: ", ...(users.length ? join(users.map(ref)) : ["none"])));
    box.hidden = false;
  }

  // ---------- pan and zoom ----------
  function applyView() {
    const v = state.view;
    $("viewport").setAttribute("transform", `translate(${v.x},${v.y}) scale(${v.k})`);
  }
  function fitView() {
    const svg = $("graph"), W = svg.clientWidth || 800, H = svg.clientHeight || 600, pad = 24;
    const { w, h: gh } = state.size;
    const kW = (W - 2 * pad) / Math.max(w, 1), kH = (H - 2 * pad) / Math.max(gh + 12, 1);
    // a tall graph shrunk to fit would be unreadable: keep labels legible (fitting the width) and show its top
    const k = Math.min(1.4, Math.max(Math.min(kW, kH), Math.min(kW, 0.55)));
    state.view = { k, x: (W - w * k) / 2, y: Math.max(pad, (H - gh * k) / 2) };
    applyView();
  }
  function setupPanZoom() {
    const svg = $("graph");
    let drag = null;
    svg.addEventListener("wheel", (ev) => {
      ev.preventDefault();
      const r = svg.getBoundingClientRect(), px = ev.clientX - r.left, py = ev.clientY - r.top, v = state.view;
      const k = Math.min(8, Math.max(0.02, v.k * Math.exp(-ev.deltaY * 0.0015)));
      state.view = { k, x: px - (px - v.x) * (k / v.k), y: py - (py - v.y) * (k / v.k) };
      applyView();
    }, { passive: false });
    svg.addEventListener("pointerdown", (ev) => {
      if (ev.button !== 0) return;
      drag = { x: ev.clientX, y: ev.clientY, vx: state.view.x, vy: state.view.y, moved: false };
      svg.setPointerCapture(ev.pointerId);
    });
    svg.addEventListener("pointermove", (ev) => {
      if (!drag) return;
      const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
      if (Math.abs(dx) + Math.abs(dy) > 3) { drag.moved = true; svg.classList.add("panning"); }
      state.view.x = drag.vx + dx; state.view.y = drag.vy + dy;
      applyView();
    });
    const end = (ev) => {
      if (!drag) return;
      const moved = drag.moved;
      drag = null;
      svg.classList.remove("panning");
      if (!moved && ev.type === "pointerup") {
        // a click (not a drag): on a node, show it; on the background, close the node box
        const hit = document.elementFromPoint(ev.clientX, ev.clientY);
        const g = hit && hit.closest ? hit.closest(".node") : null;
        if (g) showNode(Number(g.dataset.id));
        else { $("node-info").hidden = true; state.selectedNode = null; for (const e of state.edgeEls || []) e.classList.remove("hl"); for (const n of $("viewport").querySelectorAll(".node.selected")) n.classList.remove("selected"); }
      }
    };
    svg.addEventListener("pointerup", end);
    svg.addEventListener("pointercancel", end);
  }

  // ---------- the right column ----------
  function row(label, value) {
    if (value === undefined || value === null || value === "") return null;
    return h("tr", {}, h("th", {}, label), h("td", {}, value));
  }
  function code(text) { return h("code", {}, text); }
  function sizes(x) { return x ? `(${x.join(", ")})` : "none (loops)"; }

  function renderRight() {
    const rec = current(), info = $("program-info"), src = $("source"), rw = $("rewrites");
    info.replaceChildren(); src.replaceChildren(); rw.replaceChildren();
    if (!rec) return;
    if (state.sel.kind === "kernel") {
      const p = rec.program || {}, t = rec.timings;
      info.append(h("h3", {}, rec.name), h("table", {},
        row("device", rec.device),
        row("global size", sizes(p.global_size)),
        row("local size", p.local_size ? sizes(p.local_size) : "none"),
        row("opts", code(p.applied_opts && p.applied_opts.length ? p.applied_opts.join(", ") : "none")),
        row("est. ops", fmtNum(p.estimated_ops)),
        row("est. bytes", `${fmtNum(p.estimated_bytes)}B`),
        row("params", p.param_indices ? p.param_indices.join(", ") : ""),
        row("variables", p.var_names && p.var_names.length ? p.var_names.join(", ") : ""),
        row("launches", t ? `${t.count} × ${fmtTime(t.mean_us)} (min ${fmtTime(t.min_us)}, max ${fmtTime(t.max_us)}, total ${fmtTime(t.total_us)})${t.by_name ? ", matched by name only" : ""}` : "not timed (run with PROFILE=1 too)"),
        row("compile", rec.compile_ms !== undefined ? fmtTime(rec.compile_ms * 1000) : ""),
        row("passes", String(rec.passes.length))));
      $("source-title").hidden = false;
      const lines = (rec.source || "").split("\n");
      src.append(...lines.map((l) => h("span", { class: "ln" }, l || " ")));
      if (rec.source_truncated) src.append(h("span", { class: "ln" }, "… (source truncated at the recording limit)"));
    } else {
      $("source-title").hidden = true;
      const items = h("table", {}, h("tr", {}, h("th", {}, "#"), h("th", {}, "item"), h("th", {}, "device"), h("th", {}, "buffers")));
      rec.items.forEach((it, i) => {
        const k = it.kind === "kernel" ? kernelForItem(it) : null;
        const name = k ? h("span", { class: "link" }, k.name) : (it.kind === "copy" ? "copy" : "kernel (not recorded)");
        if (k) name.addEventListener("click", () => select({ kind: "kernel", id: k.id }));
        items.append(h("tr", {}, h("td", {}, String(i)), h("td", {}, name), h("td", {}, it.device), h("td", {}, code(it.bufs.join(" ")))));
      });
      info.append(h("h3", {}, rec.name), h("table", {},
        row("devices", rec.devices.join(", ")),
        row("scheduling", fmtTime(rec.time_ms * 1000)),
        row("graph", `${rec.graph.total} nodes${rec.graph.truncated ? " (truncated)" : ""}`)),
      h("h4", {}, "items"), items);
    }
    if (rec.rewrites && rec.rewrites.length) {
      const tbl = h("table", {}, h("tr", {}, h("th", {}, "graph_rewrite from"), h("th", {}, "calls"), h("th", {}, "steps"), h("th", {}, "changed")));
      for (const r of rec.rewrites) tbl.append(h("tr", {}, h("td", {}, code(r.site)), h("td", {}, String(r.calls)), h("td", {}, String(r.steps)), h("td", {}, String(r.changed))));
      rw.append(h("h4", {}, "rewrites"), tbl);
    }
  }

  // ---------- timeline (a PROFILE trace inside the VIZ trace) ----------
  const tl = { events: [], lanes: [], t0: 0, t1: 1, scale: 1, offset: 0, built: false };
  const LANE_H = 22, LABEL_W = 200, AXIS_H = 24, MAX_EVENTS = 20000;

  function buildTimeline() {
    const prof = state.trace.profile;
    if (!prof || tl.built) return;
    tl.built = true;
    const evs = (prof.traceEvents || []);
    const pname = new Map(), tname = new Map();
    for (const e of evs) {
      if (e.ph !== "M") continue;
      if (e.name === "process_name") pname.set(e.pid, e.args.name);
      if (e.name === "thread_name") tname.set(`${e.pid}:${e.tid}`, e.args.name);
    }
    const xs = evs.filter((e) => e.ph === "X");
    const laneKeys = [...new Set(xs.map((e) => `${e.pid}:${e.tid}`))].sort((a, b) => {
      const [pa, ta] = a.split(":").map(Number), [pb, tb] = b.split(":").map(Number);
      return pa - pb || ta - tb;
    });
    tl.lanes = laneKeys.map((k) => ({ key: k, label: `${pname.get(Number(k.split(":")[0])) || k.split(":")[0]} · ${tname.get(k) || k.split(":")[1]}` }));
    const laneIndex = new Map(laneKeys.map((k, i) => [k, i]));
    tl.events = xs.slice(0, MAX_EVENTS).map((e) => ({ ...e, lane: laneIndex.get(`${e.pid}:${e.tid}`) }));
    tl.t0 = tl.events.reduce((m, e) => Math.min(m, e.ts), Infinity);
    if (!Number.isFinite(tl.t0)) tl.t0 = 0;
    tl.t1 = tl.events.reduce((m, e) => Math.max(m, e.ts + (e.dur || 0)), tl.t0 + 1);
    $("timeline-info").textContent = `${xs.length} events in ${tl.lanes.length} lanes, ${fmtTime(tl.t1 - tl.t0)}${xs.length > MAX_EVENTS ? ` (first ${MAX_EVENTS} drawn)` : ""} · wheel: zoom, drag: pan, click a launch: its kernel`;
    fitTimeline();
    const svg = $("timeline");
    svg.addEventListener("wheel", (ev) => {
      ev.preventDefault();
      const r = svg.getBoundingClientRect(), px = ev.clientX - r.left - LABEL_W;
      const t = tl.offset + px / tl.scale;
      tl.scale = Math.max(1e-6, tl.scale * Math.exp(-ev.deltaY * 0.0015));
      tl.offset = t - px / tl.scale;
      drawTimeline();
    }, { passive: false });
    let drag = null;
    svg.addEventListener("pointerdown", (ev) => { drag = { x: ev.clientX, off: tl.offset, moved: false }; svg.setPointerCapture(ev.pointerId); });
    svg.addEventListener("pointermove", (ev) => {
      if (!drag) return;
      if (Math.abs(ev.clientX - drag.x) > 3) drag.moved = true;
      tl.offset = drag.off - (ev.clientX - drag.x) / tl.scale;
      drawTimeline();
    });
    svg.addEventListener("pointerup", (ev) => {
      const moved = drag && drag.moved;
      drag = null;
      if (moved) return;
      const hit = document.elementFromPoint(ev.clientX, ev.clientY);
      if (hit && hit.dataset && hit.dataset.kernel) {
        const k = state.trace.kernels.filter((x) => x.name === hit.dataset.kernel).pop();
        if (k) { setTab("graph"); select({ kind: "kernel", id: k.id }); }
      }
    });
  }

  function fitTimeline() {
    const W = Math.max(400, ($("timeline-wrap").clientWidth || 1000) - LABEL_W - 20);
    tl.scale = W / Math.max(tl.t1 - tl.t0, 1e-3);
    tl.offset = tl.t0;
    drawTimeline();
  }

  function drawTimeline() {
    const svg = $("timeline"), W = Math.max(600, $("timeline-wrap").clientWidth || 1000);
    const H = AXIS_H + tl.lanes.length * LANE_H + 8;
    svg.setAttribute("width", W); svg.setAttribute("height", H);
    svg.replaceChildren();
    const plotW = W - LABEL_W;
    // ticks at a round step that gives about ten labels
    const span = plotW / tl.scale, raw = span / 10, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * mag).find((v) => v >= raw) || mag * 10;
    // ticks at round times since the first event, not round absolute timestamps
    for (let rel = Math.ceil((tl.offset - tl.t0) / step) * step; rel < tl.offset - tl.t0 + span; rel += step) {
      const x = LABEL_W + (rel + tl.t0 - tl.offset) * tl.scale;
      svg.append(s("line", { class: "tick", x1: x, y1: AXIS_H - 4, x2: x, y2: H }));
      const lbl = s("text", { class: "tick-label", x: x + 2, y: AXIS_H - 8 }); lbl.textContent = fmtTime(rel);
      svg.append(lbl);
    }
    tl.lanes.forEach((lane, i) => {
      const y = AXIS_H + i * LANE_H;
      svg.append(s("rect", { class: "lane-bg", x: LABEL_W, y: y + 1, width: plotW, height: LANE_H - 2 }));
    });
    for (const e of tl.events) {
      const x = LABEL_W + (e.ts - tl.offset) * tl.scale, w = Math.max(1, (e.dur || 0) * tl.scale);
      if (x + w < LABEL_W || x > W) continue;
      const cls = ["kernel", "copy", "compile"].includes(e.cat) ? e.cat : "other";
      const r = s("rect", { class: `ev ${cls}`, x: Math.max(LABEL_W, x), y: AXIS_H + e.lane * LANE_H + 3, width: Math.min(w, W - Math.max(LABEL_W, x)), height: LANE_H - 6 });
      if (e.cat === "kernel") r.dataset.kernel = e.name;
      const title = s("title");
      title.textContent = `${e.name}\n${fmtTime(e.dur)} at ${fmtTime(e.ts - tl.t0)}\n${Object.entries(e.args || {}).map(([k, v]) => `${k}: ${JSON.stringify(v)}`).join("\n")}`;
      r.append(title);
      svg.append(r);
    }
    // labels last, over a white band, so that events panned left slide under them
    svg.append(s("rect", { x: 0, y: 0, width: LABEL_W, height: H, fill: "#fff" }));
    tl.lanes.forEach((lane, i) => {
      const t = s("text", { class: "lane-label", x: 8, y: AXIS_H + i * LANE_H + 15 }); t.textContent = clip(lane.label, 30);
      svg.append(t);
    });
  }

  // ---------- tabs, URL hash, keys ----------
  function setTab(tab) {
    if (tab === "timeline" && !state.trace.profile) tab = "graph";
    state.tab = tab;
    for (const b of $("tabs").querySelectorAll("button")) b.classList.toggle("active", b.dataset.tab === tab);
    $("graph-view").hidden = tab !== "graph";
    $("timeline-view").hidden = tab !== "timeline";
    if (tab === "timeline") buildTimeline();
    else if (current()) fitView();
    saveHash();
  }

  function saveHash() {
    const parts = [];
    if (state.sel) parts.push(`${state.sel.kind}=${state.sel.id}`, `pass=${state.pass}`);
    if (state.diff) parts.push("diff=1");
    if (state.tab !== "graph") parts.push(`tab=${state.tab}`);
    history.replaceState(null, "", `#${parts.join("&")}`);
  }

  function readHash() {
    const q = new URLSearchParams(location.hash.slice(1));
    return { kernel: q.get("kernel"), schedule: q.get("schedule"), pass: q.get("pass"), diff: q.get("diff") === "1", tab: q.get("tab") };
  }

  function init(trace) {
    trace.schedules = trace.schedules || [];
    trace.kernels = trace.kernels || [];
    trace._kernelsByAst = new Map();
    for (const k of trace.kernels) {
      if (k.ast === null || k.ast === undefined) continue;
      if (!trace._kernelsByAst.has(k.ast)) trace._kernelsByAst.set(k.ast, []);
      trace._kernelsByAst.get(k.ast).push(k);
    }
    state.trace = trace;
    const dropped = trace.dropped || {};
    const extra = (dropped.kernels || dropped.schedules) ? ` · past the limits: ${dropped.kernels || 0} kernels, ${dropped.schedules || 0} schedules not kept` : "";
    $("status").textContent = `${trace.kernels.length} kernels · ${trace.schedules.length} schedules${extra}${trace.created ? ` · ${trace.created}` : ""}${trace.argv && trace.argv.length ? ` · ${trace.argv.join(" ")}` : ""}`;
    $("timeline-tab").hidden = !trace.profile;
    buildList();
    setupPanZoom();
    $("filter").addEventListener("input", buildList);
    $("pass-slider").addEventListener("input", (e) => setPass(Number(e.target.value)));
    $("pass-prev").addEventListener("click", () => setPass(state.pass - 1));
    $("pass-next").addEventListener("click", () => setPass(state.pass + 1));
    $("diff-toggle").addEventListener("change", (e) => { state.diff = e.target.checked; renderGraph(false); saveHash(); });
    $("fit").addEventListener("click", fitView);
    $("timeline-fit").addEventListener("click", fitTimeline);
    for (const b of $("tabs").querySelectorAll("button")) b.addEventListener("click", () => setTab(b.dataset.tab));
    document.addEventListener("keydown", (ev) => {
      if (ev.target instanceof HTMLInputElement && ev.target.type !== "checkbox" && ev.target.type !== "range") return;
      if (ev.key === "ArrowLeft") setPass(state.pass - 1);
      else if (ev.key === "ArrowRight") setPass(state.pass + 1);
      else if (ev.key === "f") fitView();
      else if (ev.key === "d") { state.diff = !state.diff; $("diff-toggle").checked = state.diff; renderGraph(false); saveHash(); }
      else return;
      ev.preventDefault();
    });
    window.addEventListener("resize", () => { if (state.tab === "timeline") drawTimeline(); });

    const want = readHash();
    state.diff = want.diff;
    $("diff-toggle").checked = state.diff;
    const pass = want.pass !== null ? Number(want.pass) : undefined;
    if (want.kernel !== null && trace.kernels[Number(want.kernel)]) select({ kind: "kernel", id: Number(want.kernel) }, pass);
    else if (want.schedule !== null && trace.schedules[Number(want.schedule)]) select({ kind: "schedule", id: Number(want.schedule) }, pass);
    else if (trace.kernels.length) select({ kind: "kernel", id: trace.kernels.length - 1 });
    else if (trace.schedules.length) select({ kind: "schedule", id: 0 });
    setTab(want.tab || (!trace.kernels.length && !trace.schedules.length && trace.profile ? "timeline" : "graph"));
    document.body.dataset.ready = "1";  // for tests driving a headless browser: the first view is drawn
  }

  fetch("trace.json", { cache: "no-store" })
    .then((r) => { if (!r.ok) throw new Error(`trace.json: HTTP ${r.status}`); return r.json(); })
    .then(init)
    .catch((e) => {
      $("status").textContent = `could not load the trace: ${e.message}`;
      document.body.dataset.ready = "error";
    });
})();
