// The video grid of `fsbench compare --html`: rows built from the embedded JSON, shown a page at a time, sorted,
// filtered and searched in place. Only the rows on screen hold a video source: a row that scrolls into view gets its
// sources and one that leaves gives them up, so a page of 248 prompts decodes what a screen shows, not 1240 videos.
// Every video on screen follows one clock of the page's own (no video leads, so none shows another frame when the
// loop wraps). No network: everything the page needs sits beside it.
(() => {
  "use strict";
  const data = JSON.parse(document.getElementById("data").textContent);
  const $ = (id) => document.getElementById(id);
  const frame = 1 / data.fps;
  const PAGE_SIZES = [24, 48, 96, 0];  // rows per page; 0: every prompt that matches on one page
  // a playing video further off than a frame is seeked (the clock waits for it); nearer, it is sped up or slowed
  const SEEK_BEYOND = frame;
  // rows this far outside the window already get their sources, so a video is ready when it scrolls in
  const MARGIN = "150px 0px";
  const state = { playing: true, view: "video", page: 0, shown: [], duration: 0, waited: false,
    lastFix: new WeakMap() };
  const clock = { at: 0, since: performance.now() };  // seconds at `since`; runs on from there while playing
  const whenIdle = (task) => (window.requestIdleCallback ? requestIdleCallback(task, { timeout: 1000 })
    : setTimeout(task, 200));  // Safari has no requestIdleCallback
  const live = new Set();  // the videos that hold a source: those of rows on (or near) the screen
  const number = (v) => (v === "inf" ? Infinity : v === "-inf" ? -Infinity : typeof v === "number" ? v : null);
  const fmt = (v, digits) => (v === null ? "–" : Number.isFinite(v) ? v.toFixed(digits) : "inf");
  if (data.frame) document.documentElement.style.setProperty("--aspect", `${data.frame[0]} / ${data.frame[1]}`);
  $("grid").style.setProperty("--columns", data.columns.length);

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

  // -- rows and cells ----------------------------------------------------------------------------------------------

  function rowOf(prompt) {  // built the first time the row is shown, so prompts never shown cost nothing
    if (prompt.row) return prompt.row;
    const tr = document.createElement("tr");
    tr.dataset.prompt = prompt.text;
    tr.dataset.index = prompt.index;
    const td = document.createElement("td");
    td.className = "prompt";
    td.innerHTML = `<div></div><div class="metrics">${metricSummary(prompt)}</div>`;
    td.firstChild.textContent = prompt.text;
    tr.appendChild(td);
    prompt.boxes = prompt.cells.map((cell, i) => {
      const cellTd = document.createElement("td");
      const box = document.createElement("div");
      box.className = "cell";
      box.dataset.column = data.columns[i].label;
      box.dataset.view = state.view;
      const missing = document.createElement("div");
      missing.className = "missing";
      const tag = document.createElement("span");
      tag.className = "tag";
      box.append(missing, tag);
      box.addEventListener("click", () => {
        box.dataset.view = box.dataset.view === "video" ? "diff" : "video";
        dress(prompt, i);
      });
      cellTd.appendChild(box);
      tr.appendChild(cellTd);
      return { box, video: null, missing, tag };
    });
    prompt.row = tr;
    return tr;
  }

  function source(prompt, i) {  // what cell i shows in its view: [url or null, tag, why there is none]
    const cell = prompt.cells[i];
    const view = prompt.boxes[i].box.dataset.view;
    if (!cell.video) return [null, "", cell.missing || "no video"];
    if (view === "video") return [cell.video, "", ""];
    if (data.columns[i].reference) return [cell.video, "reference", ""];  // its difference is black by definition
    return cell.diff ? [cell.diff, "difference", ""] : [null, "", cell.no_diff || "no difference video"];
  }

  function dress(prompt, i) {  // a cell's tag, its reason for no video, and its video while its row is on screen
    const slot = prompt.boxes[i];
    const [url, label, why] = source(prompt, i);
    slot.tag.textContent = label;
    slot.missing.textContent = why;
    slot.missing.hidden = Boolean(url);
    const want = prompt.onScreen && url ? url : null;
    if (want === (slot.video && slot.video.getAttribute("src"))) return;
    release(slot);
    if (want) {
      slot.video = media(want);
      slot.box.prepend(slot.video);
      live.add(slot.video);
    }
  }

  function media(src) {  // made when its row comes on screen, with its source: no off-screen row holds a player
    const video = document.createElement("video");
    Object.assign(video, { muted: true, loop: $("loop").checked, playsInline: true, preload: "auto" });
    video.addEventListener("loadeddata", () => {
      video.currentTime = Math.min(clockTime(), video.duration || 0);
      play(video);
    });
    video.addEventListener("loadedmetadata", () => {
      if (Number.isFinite(video.duration)) state.duration = Math.max(state.duration, video.duration);
    });
    video.src = src;
    return video;
  }

  function release(slot) {  // the video leaves the page at once (which pauses it); its decoder and buffers go when
    // the page is idle, so a sort or a search shows its rows before dozens of players are taken down
    const video = slot.video;
    if (!video) return;
    slot.video = null;
    live.delete(video);
    video.remove();
    whenIdle(() => {
      video.removeAttribute("src");
      video.load();
    });
  }

  function setOnScreen(prompt, on) {
    if (prompt.onScreen === on) return;
    prompt.onScreen = on;
    prompt.cells.forEach((_, i) => dress(prompt, i));
  }

  const observer = new IntersectionObserver((entries) => {
    for (const entry of entries) setOnScreen(data.prompts[Number(entry.target.dataset.index)], entry.isIntersecting);
  }, { rootMargin: MARGIN });

  // -- the clock ---------------------------------------------------------------------------------------------------

  function clockTime() {
    return state.playing ? clock.at + (performance.now() - clock.since) / 1000 : clock.at;
  }

  function setClock(t) {
    clock.at = t;
    clock.since = performance.now();
  }

  function duration() {  // the longest video on screen's (else the longest seen): the clock wraps (or stops) there
    const known = [...live].map((v) => v.duration).filter((d) => Number.isFinite(d) && d > 0);
    return known.length ? Math.max(...known) : state.duration;
  }

  function play(video) {
    if (state.playing && !video.ended) video.play().catch(() => {});
    else video.pause();
  }

  function seekAll(t) {
    setClock(t);
    for (const v of live) if (v.readyState >= 1) v.currentTime = Math.min(t, v.duration || t);
  }

  function syncPlayState() {
    for (const v of live) play(v);
    $("play").textContent = state.playing ? "Pause" : "Play";
  }

  function tick() {  // one clock: every video on screen follows it, corrected when it drifts
    const end = duration();
    const now = performance.now();
    // the clock waits while a video on screen loads or seeks (the others pause), so no video is chased by a clock
    // that ran on while it caught up; off-screen videos hold no source, and a broken one has an error, so neither
    // ever makes it wait
    const waiting = state.playing && [...live].some((v) => !v.error && (v.seeking || v.readyState < 2));
    if (waiting) setClock(state.waited ? clock.at : clockTime());  // frozen where it stood when the wait began
    state.waited = waiting;
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
    for (const v of live) {
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

  // -- sort, filter, pages -----------------------------------------------------------------------------------------

  function buildSort() {
    const options = [["order", "prompt order"], ["az", "prompt A–Z"]];
    for (const m of data.metrics) options.push([m.key, `${m.label}, worst first`]);
    for (const [value, text] of options) $("sort").add(new Option(text, value));
    for (const size of PAGE_SIZES) $("page-size").add(new Option(size ? String(size) : "all", String(size)));
  }

  function matching() {
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
    return shown;
  }

  function arrange() {  // a new sort, filter or search: back to the first page of what matches
    state.shown = matching();
    state.page = 0;
    render();
  }

  function render() {
    const size = Number($("page-size").value) || state.shown.length;
    const pages = Math.max(1, Math.ceil(state.shown.length / Math.max(size, 1)));
    state.page = Math.min(Math.max(state.page, 0), pages - 1);
    const first = state.page * size;
    const rows = state.shown.slice(first, first + size);
    const keep = new Set(rows);
    const body = document.querySelector("#grid tbody");
    for (const tr of body.children) {  // rows leaving the page give up their videos at once
      const prompt = data.prompts[Number(tr.dataset.index)];
      if (!keep.has(prompt)) {
        observer.unobserve(tr);
        setOnScreen(prompt, false);
      }
    }
    body.replaceChildren(...rows.map(rowOf));
    for (const prompt of rows) observer.observe(prompt.row);
    const total = data.prompts.length;
    $("count").textContent = state.shown.length
      ? `${first + 1}–${first + rows.length} of ${state.shown.length} matching prompts (${total} in all)`
      : `no prompt matches (${total} in all)`;
    $("page").textContent = `page ${state.page + 1} of ${pages}`;
    $("prev").disabled = state.page === 0;
    $("next").disabled = state.page >= pages - 1;
  }

  function turn(by) {
    state.page += by;
    render();
    $("videos").scrollIntoView();
  }

  function setView(view) {
    state.view = view;
    $("view-video").classList.toggle("on", view === "video");
    $("view-diff").classList.toggle("on", view === "diff");
    for (const prompt of data.prompts) {
      if (!prompt.boxes) continue;
      prompt.boxes.forEach(({ box }, i) => {
        box.dataset.view = view;
        dress(prompt, i);
      });
    }
  }

  buildHead();
  buildSort();
  $("play").addEventListener("click", () => {
    const t = clockTime();
    state.playing = !state.playing;
    seekAll(state.playing && t >= duration() ? 0 : t);  // paused, every video shows the clock's frame
    syncPlayState();
  });
  $("seek").addEventListener("input", () => seekAll(Number($("seek").value) * duration()));
  $("loop").addEventListener("change", () => {
    for (const v of live) v.loop = $("loop").checked;
  });
  $("view-video").addEventListener("click", () => setView("video"));
  $("view-diff").addEventListener("click", () => setView("diff"));
  $("sort").addEventListener("change", arrange);
  for (const id of ["search", "threshold"]) $(id).addEventListener("input", arrange);
  $("page-size").addEventListener("change", () => { state.page = 0; render(); });
  $("prev").addEventListener("click", () => turn(-1));
  $("next").addEventListener("click", () => turn(1));
  arrange();
  requestAnimationFrame(tick);
})();
