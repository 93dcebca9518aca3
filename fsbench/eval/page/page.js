// The video grid of `fsbench compare --html`: rows built from the embedded JSON, every shown video kept in step
// with one clock of the page's own (no video leads, so none shows another frame when the loop wraps), sorted,
// filtered and searched in place. No network: everything the page needs sits beside it.
(() => {
  "use strict";
  const data = JSON.parse(document.getElementById("data").textContent);
  const $ = (id) => document.getElementById(id);
  const frame = 1 / data.fps;
  const LIMIT = 24;  // rows shown before "Show all prompts": each row holds a video per schedule
  // a playing video further off than a frame is seeked (the clock waits for it); nearer, it is sped up or slowed
  const SEEK_BEYOND = frame;
  // view: what the "Video" / "Difference" buttons chose, for every row, shown now or later
  const state = { playing: true, showAll: false, view: "video", lastFix: new WeakMap() };
  const clock = { at: 0, since: performance.now() };  // seconds at `since`; runs on from there while playing
  const number = (v) => (v === "inf" ? Infinity : v === "-inf" ? -Infinity : typeof v === "number" ? v : null);
  const fmt = (v, digits) => (v === null ? "–" : Number.isFinite(v) ? v.toFixed(digits) : "inf");

  function worst(prompt, metric) {
    const values = Object.values(prompt.metrics).map((m) => number(m[metric.key])).filter((v) => v !== null);
    if (!values.length) return null;
    return metric.higher_better ? Math.min(...values) : Math.max(...values);
  }

  function metricSummary(prompt) {
    const parts = [];
    for (const [label, values] of Object.entries(prompt.metrics)) {
      const shown = data.metrics.map((m) =>
        `${m.label.split(" ")[0]} ${fmt(number(values[m.key]), m.key === "psnr" ? 2 : 3)}`);
      if (shown.length) parts.push(`${label}: ${shown.join(", ")}`);
    }
    return parts.join("<br>");
  }

  function buildHead() {
    const tr = document.createElement("tr");
    tr.innerHTML = "<th>Prompt</th>";
    for (const column of data.columns) {
      const th = document.createElement("th");
      th.textContent = column.label + (column.reference ? " (reference)" : "");
      tr.appendChild(th);
    }
    document.querySelector("#grid thead").appendChild(tr);
  }

  function buildRow(prompt) {
    const tr = document.createElement("tr");
    tr.dataset.prompt = prompt.text;
    const td = document.createElement("td");
    td.className = "prompt";
    td.innerHTML = `<div></div><div class="metrics">${metricSummary(prompt)}</div>`;
    td.firstChild.textContent = prompt.text;
    tr.appendChild(td);
    prompt.cells.forEach((cell, i) => {
      const cellTd = document.createElement("td");
      const box = document.createElement("div");
      box.className = "cell";
      box.dataset.view = state.view;
      box.dataset.column = data.columns[i].label;
      cellTd.appendChild(box);
      tr.appendChild(cellTd);
      prompt.boxes = prompt.boxes || [];
      prompt.boxes.push({ box, cell });
    });
    prompt.row = tr;
  }

  function media(src, kind, missing) {
    if (!src) {
      const div = document.createElement("div");
      div.className = `missing ${kind}`;
      div.textContent = missing;
      return div;
    }
    const video = document.createElement("video");
    Object.assign(video, { src, muted: true, loop: $("loop").checked, playsInline: true, preload: "auto" });
    video.addEventListener("loadeddata", () => { video.currentTime = clockTime(); syncPlayState(); });
    video.className = kind;
    return video;
  }

  function fillRow(prompt) {  // videos are created when a row is first shown, so hidden rows cost nothing
    if (prompt.filled) return;
    prompt.filled = true;
    for (const { box, cell } of prompt.boxes) {
      box.appendChild(media(cell.video, "video", cell.missing || "no video"));
      box.appendChild(media(cell.diff, "diff", cell.no_diff || cell.missing || "no difference video"));
      const tag = document.createElement("span");
      tag.className = "tag";
      box.appendChild(tag);
      box.addEventListener("click", () => setView(box.dataset.view === "video" ? "diff" : "video", [box]));
      label(box);
    }
  }

  function label(box) {  // a row not shown yet has no videos and no tag: it takes the view when it is filled
    const tag = box.querySelector(".tag");
    if (tag) tag.textContent = box.dataset.view === "diff" ? "difference" : "";
  }

  function activeVideos() {
    const boxes = document.querySelectorAll("#grid tbody tr:not([hidden]) .cell");
    return [...boxes].map((b) => b.querySelector(b.dataset.view === "diff" ? ".diff" : ".video"))
      .filter((el) => el && el.tagName === "VIDEO");
  }

  function allVideos() { return [...document.querySelectorAll("#grid video")]; }

  function clockTime() {
    return state.playing ? clock.at + (performance.now() - clock.since) / 1000 : clock.at;
  }

  function setClock(t) {
    clock.at = t;
    clock.since = performance.now();
  }

  function duration() {  // the longest shown video's: the clock wraps (or stops) there
    const known = activeVideos().map((v) => v.duration).filter((d) => Number.isFinite(d) && d > 0);
    return known.length ? Math.max(...known) : 0;
  }

  function seekAll(t) {
    setClock(t);
    for (const v of allVideos()) v.currentTime = Math.min(t, v.duration || t);
  }

  function setView(view, boxes) {
    const t = clockTime();
    if (!boxes) {
      state.view = view;
      $("view-video").classList.toggle("on", view === "video");
      $("view-diff").classList.toggle("on", view === "diff");
    }
    for (const box of boxes || document.querySelectorAll("#grid .cell")) {
      box.dataset.view = view;
      label(box);
    }
    seekAll(t);
    syncPlayState();
  }

  function syncPlayState() {
    const active = new Set(activeVideos());
    for (const v of allVideos()) {
      if (active.has(v) && state.playing) v.play().catch(() => {});
      else v.pause();
    }
    $("play").textContent = state.playing ? "Pause" : "Play";
  }

  function tick() {  // one clock: every shown video follows it, corrected when it drifts half a frame
    const videos = activeVideos();
    const end = duration();
    // the clock waits while a shown video loads or seeks (the others pause), so no video is chased by a clock
    // that ran on while it caught up
    const waiting = state.playing && videos.some((v) => v.seeking || v.readyState < 2);
    if (waiting) setClock(clock.at);
    let t = clockTime();
    if (end > 0 && t >= end) {
      if ($("loop").checked) {
        t %= end;
        setClock(t);
      } else {
        setClock(end);
        state.playing = false;
        syncPlayState();
        t = end;
      }
    }
    const now = performance.now();
    for (const v of videos) {
      if (v.seeking || v.readyState < 2) continue;
      const target = Math.min(t, v.duration);
      let ahead = v.currentTime - target;
      if (v.loop && Math.abs(ahead) > v.duration / 2) ahead -= Math.sign(ahead) * v.duration;  // 0 s meets the end
      const drift = Math.abs(ahead);
      if (drift > (state.playing ? SEEK_BEYOND : frame / 2) && now - (state.lastFix.get(v) || 0) > 100) {
        v.currentTime = target;
        state.lastFix.set(v, now);
      }
      // a small drift is played away (a seek would leave the video behind the clock again by the time it lands)
      v.playbackRate = state.playing && drift > frame / 4 ? Math.min(1.5, Math.max(0.5, 1 - 2 * ahead)) : 1;
      if (waiting && !v.paused) v.pause();
      else if (!waiting && state.playing && v.paused && !v.ended) v.play().catch(() => {});
    }
    if (end > 0) $("seek").value = t / end;
    $("time").textContent = `${t.toFixed(2)} s`;
    requestAnimationFrame(tick);
  }

  function buildSort() {
    const options = [["order", "prompt order"], ["az", "prompt A–Z"]];
    for (const m of data.metrics) options.push([m.key, `${m.label}, worst first`]);
    for (const [value, text] of options) $("sort").add(new Option(text, value));
  }

  function arrange() {
    const key = $("sort").value;
    const metric = data.metrics.find((m) => m.key === key);
    const query = $("search").value.trim().toLowerCase();
    const threshold = $("threshold").value === "" ? null : Number($("threshold").value);
    $("threshold-label").hidden = !metric;
    let shown = data.prompts.filter((p) => p.text.toLowerCase().includes(query));
    if (metric) {
      shown = shown.map((p) => ({ p, v: worst(p, metric) }));
      if (threshold !== null) {
        shown = shown.filter(({ v }) => v !== null && (metric.higher_better ? v < threshold : v > threshold));
      }
      const badness = (v) => (v === null ? -Infinity : metric.higher_better ? -v : v);
      shown = shown.sort((a, b) => badness(b.v) - badness(a.v) || a.p.index - b.p.index).map(({ p }) => p);
    } else if (key === "az") {
      shown = shown.sort((a, b) => a.text.localeCompare(b.text));
    }
    const visible = state.showAll ? shown : shown.slice(0, LIMIT);
    const body = document.querySelector("#grid tbody");
    const t = clockTime();
    for (const p of data.prompts) p.row.hidden = true;
    for (const p of shown) body.appendChild(p.row);
    for (const p of visible) {
      fillRow(p);
      p.row.hidden = false;
    }
    $("more").hidden = visible.length === shown.length;
    $("count").textContent = `${visible.length} of ${data.prompts.length} prompts shown`;
    seekAll(t);
    syncPlayState();
  }

  buildHead();
  buildSort();
  data.prompts.forEach(buildRow);
  $("play").addEventListener("click", () => {
    const t = clockTime();
    state.playing = !state.playing;
    seekAll(state.playing && t >= duration() ? 0 : t);  // paused, every video shows the clock's frame
    syncPlayState();
  });
  $("seek").addEventListener("input", () => seekAll(Number($("seek").value) * duration()));
  $("loop").addEventListener("change", () => { for (const v of allVideos()) v.loop = $("loop").checked; });
  $("view-video").addEventListener("click", () => setView("video"));
  $("view-diff").addEventListener("click", () => setView("diff"));
  $("more").addEventListener("click", () => { state.showAll = true; arrange(); });
  $("sort").addEventListener("change", arrange);
  for (const id of ["search", "threshold"]) $(id).addEventListener("input", arrange);
  arrange();
  requestAnimationFrame(tick);
})();
