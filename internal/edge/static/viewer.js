// flybus edge viewer: no build step, no dependencies. It speaks the
// protocol of docs/edge.md over /ws and draws what it gets.
"use strict";

(() => {
  const PROTOCOL = "flybus-edge.v1";
  const params = new URLSearchParams(location.search);
  const watchParam = params.getAll("topic");
  const attParam = (params.get("attachments") || "*").split(",").filter((s) => s);
  const slowMs = Number(params.get("slow") || 0); // a test hook: a page this slow per message
  const sizeParam = /^(\d+)x(\d+)$/.exec(params.get("size") || "");

  // What the page shows, also read by tests.
  const viewer = {
    connected: false, bus: "unknown", busReason: "", welcome: null, subscribed: null,
    topics: {}, // name -> per-topic figures, below
    clockOffsetMs: 0, // edge clock minus ours
    errors: [],
  };
  window.flybusViewer = viewer;

  const $ = (id) => document.getElementById(id);
  const el = (tag, attrs = {}, ...kids) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (k === "text") e.textContent = v;
      else if (k === "class") e.className = v;
      else e.setAttribute(k, v);
    }
    for (const k of kids) e.append(k);
    return e;
  };
  const now = () => performance.timeOrigin + performance.now();

  // --- token: #token=... once, then kept for this tab only.
  let token = sessionStorage.getItem("flybus-edge-token") || "";
  if (location.hash.startsWith("#token=")) {
    token = decodeURIComponent(location.hash.slice(7));
    sessionStorage.setItem("flybus-edge-token", token);
    history.replaceState(null, "", location.pathname + location.search);
  }
  $("token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    token = $("token").value;
    sessionStorage.setItem("flybus-edge-token", token);
    $("token-form").hidden = true;
    connect();
  });

  // --- selection
  const watched = new Map(); // topic -> attachment list
  for (const t of watchParam) watched.set(t, attParam);
  let routerOn = params.get("router") !== "0";
  $("router-on").checked = routerOn;
  $("router-on").addEventListener("change", () => { routerOn = $("router-on").checked; sendSelection(); });

  let ws = null;
  let retry = 250;
  let timeTimer = 0;

  function send(obj) {
    if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(obj));
  }
  function sendSelection() {
    const topics = {};
    for (const [t, atts] of watched) topics[t] = atts;
    send({ op: "subscribe", topics, router: routerOn && !!(viewer.welcome && viewer.welcome.routerView) });
  }
  function askTime() { send({ op: "time", t: now() }); }

  function setConn(text, cls) { const c = $("conn"); c.textContent = text; c.className = "state " + cls; }
  function setFeed() {
    const f = $("feed");
    if (viewer.bus === "up") { f.textContent = "feed up"; f.className = "state up"; }
    else if (viewer.bus === "down") { f.textContent = "feed down" + (viewer.busReason ? ": " + viewer.busReason : ""); f.className = "state down"; }
    else { f.textContent = "feed: waiting"; f.className = "state"; }
  }

  function connect() {
    const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws";
    ws = new WebSocket(url, PROTOCOL);
    ws.binaryType = "arraybuffer";
    setConn("connecting…", "");
    ws.onopen = () => {
      retry = 250;
      ws.send(JSON.stringify({ op: "hello", version: 1, token }));
    };
    ws.onmessage = (ev) => {
      if (typeof ev.data === "string") notice(JSON.parse(ev.data));
      else publication(ev.data);
      if (slowMs > 0) { const end = performance.now() + slowMs; while (performance.now() < end) { /* a slow page */ } }
    };
    ws.onclose = (ev) => {
      viewer.connected = false;
      clearInterval(timeTimer);
      if (ev.code === 4001) {
        setConn("the edge needs a token", "down");
        $("token-form").hidden = false;
        $("token").focus();
        return;
      }
      setConn("edge disconnected (" + ev.code + (ev.reason ? ": " + ev.reason : "") + "), reconnecting", "down");
      setTimeout(connect, retry);
      retry = Math.min(retry * 2, 5000);
    };
  }

  function notice(m) {
    switch (m.type) {
      case "welcome":
        viewer.welcome = m;
        viewer.connected = true;
        setConn("connected", "up");
        viewer.clockOffsetMs = m.now - now();
        $("router-toggle").hidden = !m.routerView;
        $("router").hidden = !(m.routerView && routerOn);
        sendSelection();
        askTime();
        timeTimer = setInterval(askTime, 10000);
        break;
      case "status":
        viewer.bus = m.bus;
        viewer.busReason = m.reason || "";
        setFeed();
        break;
      case "topics": topicsNotice(m); break;
      case "time": {
        const t1 = now();
        viewer.clockOffsetMs = m.now - (m.t + t1) / 2;
        break;
      }
      case "router": routerNotice(m); break;
      case "subscribed":
        viewer.subscribed = m.topics;
        $("router").hidden = !m.router;
        break;
      case "error":
        viewer.errors.push(m);
        console.warn("flybus edge:", m.code, m.message);
        break;
    }
  }

  // --- the topics table
  const rows = new Map();
  function fmtRate(n) { return n >= 100 ? n.toFixed(0) : n.toFixed(1); }
  function fmtBytes(n) {
    const u = ["B", "KiB", "MiB", "GiB"];
    let i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i === 0 ? n.toFixed(0) : n.toFixed(1)) + " " + u[i];
  }
  function topicsNotice(m) {
    const body = $("topics").tBodies[0];
    for (const t of m.topics) {
      let r = rows.get(t.name);
      if (!r) {
        const box = el("input", { type: "checkbox" });
        box.checked = watched.has(t.name);
        box.addEventListener("change", () => {
          if (box.checked) watched.set(t.name, attParam); else { watched.delete(t.name); dropPanel(t.name); }
          sendSelection();
        });
        r = { tr: el("tr"), cells: [] };
        r.tr.append(el("td", {}, box));
        for (let i = 0; i < 7; i++) { const td = el("td"); if (i >= 2 && i <= 5) td.className = "num"; r.tr.append(td); r.cells.push(td); }
        r.cells[0].textContent = t.name;
        rows.set(t.name, r);
        body.append(r.tr);
      }
      const c = r.cells;
      c[1].textContent = t.state;
      c[2].textContent = fmtRate(t.rate);
      c[3].textContent = String(t.sequence);
      c[4].textContent = fmtBytes(t.bytesRate) + "/s";
      c[5].textContent = String(t.replaced);
      c[6].textContent = t.attachments.map((a) => a.name + " (" + a.contentType + ", " + fmtBytes(a.size) + ")").join(", ");
    }
  }

  // --- publications
  const textDecoder = new TextDecoder();
  function publication(buf) {
    const dv = new DataView(buf);
    const n = dv.getUint32(0, true);
    const h = JSON.parse(textDecoder.decode(new Uint8Array(buf, 4, n)));
    const st = topicState(h.topic);
    st.messages++;
    st.lastSeq = h.sequence;
    st.incarnation = h.incarnation;
    st.skipped += h.skipped;
    st.replaced += h.replaced;
    st.windowBytes += buf.byteLength;
    const p = panel(h.topic);
    for (const a of h.attachments) {
      if (!a.offset) continue;
      draw(p, h, a, buf);
    }
    st.drawn++;
    const published = publishedMs(h);
    st.latencyMs = now() + viewer.clockOffsetMs - published;
    st.latencies.push(st.latencyMs);
    if (st.latencies.length > 120) st.latencies.shift();
    const t = performance.now();
    st.draws.push(t);
    // Text is slow to lay out: at most a few times a second.
    p.latest = h.payload;
    if (!(t - p.shown < 250)) {
      p.shown = t;
      showPayload(p);
      renderStats(h.topic);
    }
  }

  function showPayload(p) {
    if (p.latest === undefined) return;
    p.payload.textContent = JSON.stringify(p.latest, null, 2).slice(0, 8192);
    p.latest = undefined;
  }

  // When the payload has t (as flybus perf writes: Unix nanoseconds; ms, µs
  // and s are told apart by size), latency counts from it; otherwise from
  // when the edge took the publication.
  function publishedMs(h) {
    const t = h.payload && typeof h.payload.t === "number" ? h.payload.t : 0;
    if (t > 1e17) return t / 1e6;
    if (t > 1e14) return t / 1e3;
    if (t > 1e11) return t;
    if (t > 1e8) return t * 1e3;
    return h.receivedUs / 1e3;
  }

  function topicState(name) {
    let st = viewer.topics[name];
    if (!st) {
      st = viewer.topics[name] = { messages: 0, drawn: 0, lastSeq: 0, incarnation: "", skipped: 0, replaced: 0,
        latencyMs: 0, latencies: [], draws: [], windowBytes: 0, fps: 0, bytesRate: 0, sizes: {} };
    }
    return st;
  }

  const panels = new Map();
  function panel(name) {
    let p = panels.get(name);
    if (p) return p;
    p = { box: el("div", { class: "panel" }), stats: el("div", { class: "stats" }), frames: el("div", { class: "frames" }),
      payload: el("pre", { class: "payload" }), canvases: new Map() };
    p.box.append(el("h3", { text: name }), p.stats, p.frames, p.payload);
    p.box.dataset.topic = name;
    $("panels").append(p.box);
    panels.set(name, p);
    return p;
  }
  function dropPanel(name) {
    const p = panels.get(name);
    if (p) { p.box.remove(); panels.delete(name); }
  }

  function renderStats(name) {
    const st = viewer.topics[name];
    const p = panels.get(name);
    if (!p) return;
    const sorted = [...st.latencies].sort((a, b) => a - b);
    const med = sorted.length ? sorted[Math.floor(sorted.length / 2)] : 0;
    p.stats.replaceChildren(
      "#" + st.lastSeq + " (" + st.incarnation + ")  ",
      el("b", { text: fmtRate(st.fps) }), " fps  latency ",
      el("b", { text: st.latencyMs.toFixed(1) + " ms" }), " (median " + med.toFixed(1) + ")  ",
      el("b", { text: fmtBytes(st.bytesRate) + "/s" }), "  skipped ",
      el("b", { text: String(st.skipped) }), "  replaced by the router " + st.replaced + "  drawn " + st.drawn);
  }
  setInterval(() => {
    const t = performance.now();
    for (const [name, st] of Object.entries(viewer.topics)) {
      while (st.draws.length && st.draws[0] < t - 1000) st.draws.shift();
      st.fps = st.draws.length;
      st.bytesRate = st.windowBytes;
      st.windowBytes = 0;
      renderStats(name);
      const p = panels.get(name);
      if (p) showPayload(p);
    }
  }, 1000);

  // --- drawing
  const formats = {
    "image/x-rgba": 4, "image/x-bgra": 4, "image/x-rgbx": 4, "image/x-rgb": 3, "image/x-bgr": 3,
    "image/x-gray": 1, "image/x-gray8": 1, "image/x-l8": 1, "image/x-gray16": 2, "image/x-gray16le": 2,
  };
  const encoded = /^image\/(png|jpeg|webp|gif|bmp)$/;

  function parseType(ct) {
    const [base, ...ps] = ct.split(";");
    const out = { base: base.trim().toLowerCase(), params: {} };
    for (const p of ps) {
      const [k, v] = p.split("=");
      if (k && v) out.params[k.trim().toLowerCase()] = v.trim().replace(/^"|"$/g, "");
    }
    return out;
  }

  // size says where width and height came from, in this order.
  function frameSize(h, a, ct, bpp) {
    const w = Number(ct.params.width), hh = Number(ct.params.height);
    if (w > 0 && hh > 0) return { w, h: hh, from: "content type" };
    const p = h.payload || {};
    for (const o of [p[a.name], p]) {
      if (o && typeof o === "object" && o.width > 0 && o.height > 0) return { w: o.width, h: o.height, from: "payload" };
    }
    if (sizeParam) return { w: Number(sizeParam[1]), h: Number(sizeParam[2]), from: "?size" };
    const px = a.size / bpp;
    for (const [x, y] of [[4, 3], [16, 9], [16, 10], [3, 2], [5, 4], [1, 1], [10, 9], [2, 1], [21, 9]]) {
      const ww = Math.round(Math.sqrt(px * x / y));
      const hg = Math.round(ww * y / x);
      if (ww * hg === px) return { w: ww, h: hg, from: "guessed " + x + ":" + y };
    }
    return null;
  }

  function draw(p, h, a, buf) {
    const ct = parseType(a.contentType);
    const bpp = formats[ct.base];
    let fig = p.canvases.get(a.name);
    if (!fig) {
      fig = { figure: el("figure"), canvas: el("canvas"), caption: el("figcaption") };
      fig.canvas.dataset.attachment = a.name;
      fig.figure.append(fig.canvas, fig.caption);
      p.frames.append(fig.figure);
      p.canvases.set(a.name, fig);
    }
    const bytes = new Uint8Array(buf, a.offset, a.size);
    if (encoded.test(ct.base)) {
      createImageBitmap(new Blob([bytes], { type: ct.base })).then((bmp) => {
        sizeCanvas(fig, bmp.width, bmp.height);
        fig.canvas.getContext("2d").drawImage(bmp, 0, 0);
        fig.caption.textContent = a.name + "  " + a.contentType + "  " + bmp.width + "x" + bmp.height;
        bmp.close();
      }, () => { fig.caption.textContent = a.name + ": cannot decode " + ct.base; });
      return;
    }
    if (!bpp) {
      fig.canvas.hidden = true;
      fig.caption.textContent = a.name + "  " + a.contentType + "  " + fmtBytes(a.size) + " (not drawn)";
      return;
    }
    const sz = frameSize(h, a, ct, bpp);
    if (!sz || sz.w * sz.h * bpp > a.size) {
      fig.canvas.hidden = true;
      fig.caption.textContent = a.name + "  " + a.contentType + "  " + a.size + " bytes: no width and height (give ?size=WxH)";
      return;
    }
    fig.canvas.hidden = false;
    sizeCanvas(fig, sz.w, sz.h);
    const n = sz.w * sz.h;
    let px;
    if (ct.base === "image/x-rgba" && a.size === n * 4) {
      px = new Uint8ClampedArray(buf, a.offset, n * 4); // the message's own bytes: no copy
    } else {
      px = fig.scratch && fig.scratch.length === n * 4 ? fig.scratch : (fig.scratch = new Uint8ClampedArray(n * 4));
      convert(ct.base, bytes, px, n);
    }
    fig.ctx.putImageData(new ImageData(px, sz.w, sz.h), 0, 0);
    fig.caption.textContent = a.name + "  " + a.contentType + "  " + sz.w + "x" + sz.h + " (size from " + sz.from + ")";
    viewer.topics[h.topic].sizes[a.name] = sz;
  }

  function sizeCanvas(fig, w, h) {
    if (fig.canvas.width !== w || fig.canvas.height !== h || !fig.ctx) {
      fig.canvas.width = w;
      fig.canvas.height = h;
      fig.ctx = fig.canvas.getContext("2d", { willReadFrequently: true });
    }
  }

  function convert(base, src, dst, n) {
    switch (base) {
      case "image/x-rgba":
        dst.set(src.subarray(0, n * 4));
        break;
      case "image/x-rgbx":
        for (let i = 0; i < n; i++) { dst[4 * i] = src[4 * i]; dst[4 * i + 1] = src[4 * i + 1]; dst[4 * i + 2] = src[4 * i + 2]; dst[4 * i + 3] = 255; }
        break;
      case "image/x-bgra":
        for (let i = 0; i < n; i++) { dst[4 * i] = src[4 * i + 2]; dst[4 * i + 1] = src[4 * i + 1]; dst[4 * i + 2] = src[4 * i]; dst[4 * i + 3] = src[4 * i + 3]; }
        break;
      case "image/x-rgb":
        for (let i = 0; i < n; i++) { dst[4 * i] = src[3 * i]; dst[4 * i + 1] = src[3 * i + 1]; dst[4 * i + 2] = src[3 * i + 2]; dst[4 * i + 3] = 255; }
        break;
      case "image/x-bgr":
        for (let i = 0; i < n; i++) { dst[4 * i] = src[3 * i + 2]; dst[4 * i + 1] = src[3 * i + 1]; dst[4 * i + 2] = src[3 * i]; dst[4 * i + 3] = 255; }
        break;
      case "image/x-gray16":
      case "image/x-gray16le":
        for (let i = 0; i < n; i++) { const v = src[2 * i + 1]; dst[4 * i] = v; dst[4 * i + 1] = v; dst[4 * i + 2] = v; dst[4 * i + 3] = 255; }
        break;
      default: // one byte of gray a pixel
        for (let i = 0; i < n; i++) { const v = src[i]; dst[4 * i] = v; dst[4 * i + 1] = v; dst[4 * i + 2] = v; dst[4 * i + 3] = 255; }
    }
  }

  // --- the router's live view (what flybus top shows)
  function routerNotice(m) {
    const box = $("router-tables");
    if (m.error) {
      $("router-head").textContent = m.addr + ": " + m.error;
      box.replaceChildren();
      return;
    }
    const s = m.store;
    const store = s.mode === "pool" ? "slots " + s.slots + " (free " + s.freeSlots + ", quarantined " + s.quarantinedSlots + ")" : "files " + s.files;
    const lat = (l) => (l.count ? "p50 <=" + l.p50Us + "µs p99 <=" + l.p99Us + "µs (" + l.count + ")" : "-");
    $("router-head").textContent = m.addr + "  " + new Date(m.taken).toLocaleTimeString() + "  rates over " + m.interval.toFixed(1) + "s  store " +
      s.mode + ": " + store + ", " + fmtBytes(s.bytes) + " reserved, seals " + s.leaseSeals + " lease / " + s.copySeals + " copy\n" +
      "latency (bucket bounds)  admission " + lat(m.admission) + "  lane wait " + lat(m.laneWait);
    box.replaceChildren(
      table(["TOPIC", "PUB/S", "LAST SEQ", "SUBS", "RETAINED"], m.topics, (t) => [t.name, fmtRate(t.rate), t.lastSequence, t.subscribers, fmtBytes(t.retainedBytes)]),
      table(["SUBSCRIPTION", "CLIENT", "TOPIC", "MODE", "DLV/S", "QUEUED", "IN FLIGHT", "COALESCED", "REFUSED", "OLDEST"], m.subscriptions,
        (x) => [x.id, x.client, x.topic, x.mode, fmtRate(x.rate), x.queued, x.inFlight, x.coalesced, x.refusedPublications,
          x.oldestQueuedAgeNs ? (x.oldestQueuedAgeNs / 1e6).toFixed(1) + "ms" : "-"]),
      table(["SERVICE", "CLIENT", "QUEUED", "IN FLIGHT", "CALLS", "FAILED"], m.services, (x) => [x.name, x.client, x.queued, x.inFlight, x.calls, x.failedCalls]),
      table(["CLIENT", "CONNECTION", "OWNERS", "CONTROL", "QUEUED", "CALLS", "OUT", "IN"], m.clients,
        (c) => [c.id, c.connection, c.owners + "/" + c.ownerBudget, c.controlDepth, fmtBytes(c.queuedBytes), c.activeCalls,
          fmtBytes(c.bytesWritten) + " (" + c.framesWritten + ")", fmtBytes(c.bytesRead) + " (" + c.framesRead + ")"]));
  }
  function table(head, list, cells) {
    const t = el("table");
    t.append(el("thead", {}, el("tr", {}, ...head.map((h) => el("th", { text: h })))));
    const b = el("tbody");
    if (!list || list.length === 0) b.append(el("tr", {}, el("td", { text: "(none)", class: "muted" })));
    for (const x of list || []) b.append(el("tr", {}, ...cells(x).map((v) => el("td", { text: String(v) }))));
    t.append(b);
    return t;
  }

  setFeed();
  connect();
})();
