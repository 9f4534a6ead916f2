// netweir-serve's live dashboard: reads the listings once, then follows
// GET /events (server-sent events) and redraws what changed. Charts are
// SVG drawn here from each job's stats over time (jobstats.json?history=1,
// then the stats of each "job" event). No build step, no library.
"use strict";

(function () {
  const FINISHED_SHOWN = 20;     // recent finished jobs on the page, each with a chart
  const HISTORIES_AT_ONCE = 3;   // stats histories asked for at a time
  const RATE_WINDOW = 60;        // seconds the "rates now" look back
  const MAX_POINTS = 600;        // points kept per chart in the page

  const jobs = new Map();        // id -> entry (with state)
  const series = new Map();      // id -> [{t, items, pages}]
  const unavailable = new Map(); // id -> why its history cannot be had (its node is down)
  const schedules = new Map();   // name -> entry
  let thisNode = null;           // the node answering (listjobs.json's node_name)
  const historyQueue = [];       // ids whose history is still to be asked for
  const historyAsked = new Set(); // ids queued or being asked for
  let historiesOpen = 0;
  let drawing = false;

  // -- helpers ----------------------------------------------------------------

  function esc(value) {
    return String(value === null || value === undefined ? "" : value)
      .replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;").replace(/'/g, "&#39;");
  }

  function parseTime(text) {
    // scrapyd's "YYYY-MM-DD HH:MM:SS.ffffff", local time.
    if (!text) return null;
    const t = Date.parse(text.replace(" ", "T").slice(0, 23));
    return isNaN(t) ? null : t / 1000;
  }

  function clock(seconds) {
    seconds = Math.max(0, Math.floor(seconds));
    const h = Math.floor(seconds / 3600), m = Math.floor(seconds / 60) % 60, s = seconds % 60;
    return h + ":" + String(m).padStart(2, "0") + ":" + String(s).padStart(2, "0");
  }

  // Every time on the page in one format, /jobs's: YYYY-MM-DD HH:MM:SS,
  // local time (durations are H:MM:SS, as /jobs's Runtime).
  function shownTime(seconds) {
    if (seconds === null || isNaN(seconds)) return "";
    const d = new Date(seconds * 1000), two = n => String(n).padStart(2, "0");
    return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())} ` +
      `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}`;
  }

  function timeCell(seconds, title) {
    return `<td class="time"${title ? ` title="${esc(title)}"` : ""}>${esc(shownTime(seconds))}</td>`;
  }

  function number(stats, key) {
    const v = stats ? stats[key] : null;
    return typeof v === "number" ? v : null;
  }

  async function getJSON(url) {
    const answer = await fetch(url, {cache: "no-store", credentials: "same-origin"});
    return answer.json();
  }

  async function post(url, fields) {
    const answer = await fetch(url, {method: "POST", body: new URLSearchParams(fields),
                                     credentials: "same-origin"});
    let body;
    try { body = await answer.json(); } catch (e) { body = {message: answer.statusText}; }
    return body;
  }

  // -- the data ---------------------------------------------------------------

  function addPoint(id, time, stats) {
    const items = number(stats, "items"), pages = number(stats, "fetched");
    if (items === null && pages === null) return;
    const points = series.get(id) || [];
    const last = points[points.length - 1];
    if (last && last.t >= time) return;
    if (last && last.items === items && last.pages === pages && time - last.t < 5) return;
    points.push({t: time, items: items || 0, pages: pages || 0});
    if (points.length > MAX_POINTS) points.splice(0, points.length - MAX_POINTS);
    series.set(id, points);
  }

  // jobstats.json's answer when the node that ran a job (and holds its
  // history) is down: "job ID is on node NAME, which is down".
  const NODE_DOWN = /is on node (.+), which is down$/;

  async function loadHistory(id) {
    const answer = await getJSON("/jobstats.json?history=1&job=" + encodeURIComponent(id));
    const down = answer.status === "error" ? NODE_DOWN.exec(answer.message || "") : null;
    if (down) {
      // Its stats are in the shared job table all the same.
      unavailable.set(id, {node: down[1], message: answer.message});
      const plain = await getJSON("/jobstats.json?job=" + encodeURIComponent(id));
      const entry = jobs.get(id);
      if (plain.status === "ok" && entry && entry.state === plain.state) entry.stats = plain.stats;
      redraw();
      return;
    }
    if (answer.status !== "ok") return;
    unavailable.delete(id);
    const points = [];
    series.set(id, points);
    for (const point of answer.history || []) addPoint(id, point.time, point.stats);
    if (answer.stats) {
      // A running job's stats are as of now; a finished job's as of its
      // end (its series ends there already: not stretched to this moment).
      const entry = jobs.get(id);
      const asOf = answer.state === "finished" ? (entry ? parseTime(entry.end_time) : null)
        : Date.now() / 1000;
      if (asOf !== null) addPoint(id, asOf, answer.stats);
      if (entry && entry.state === answer.state && !entry.stats) entry.stats = answer.stats;
    }
    redraw();
  }

  // Histories are asked for a few at a time, the running jobs' first and
  // then the finished jobs' from the most recent: a page with 20 finished
  // jobs sends 20 requests, never 20 at once to a busy service (which lets
  // one address hold 8 connections: this page's stream holds one).
  function wantHistory(id) {
    if (series.has(id) || unavailable.has(id) || historyAsked.has(id)) return;
    historyAsked.add(id);
    historyQueue.push(id);
    nextHistory();
  }

  function nextHistory() {
    while (historiesOpen < HISTORIES_AT_ONCE && historyQueue.length) {
      const id = historyQueue.shift();
      historiesOpen++;
      loadHistory(id).catch(() => {}).finally(() => {
        historiesOpen--;
        historyAsked.delete(id);
        nextHistory();
      });
    }
  }

  async function reload() {
    const listing = await getJSON("/listjobs.json");
    if (listing.status !== "ok") { setLive("error: " + listing.message); return; }
    thisNode = listing.node_name;
    const seen = new Set();
    for (const state of ["pending", "running", "finished"]) {
      for (const entry of listing[state]) {
        const known = jobs.get(entry.id);
        jobs.set(entry.id, Object.assign({}, entry, {state: state,
          stats: known && known.state === state ? known.stats : entry.stats}));
        seen.add(entry.id);
      }
    }
    for (const id of Array.from(jobs.keys())) if (!seen.has(id)) jobs.delete(id);
    unavailable.clear();  // a node may be back: ask again
    for (const entry of listing.running) wantHistory(entry.id);
    for (const entry of ordered("finished")) wantHistory(entry.id);
    const listed = await getJSON("/listschedules.json");
    if (listed.status === "ok") {
      schedules.clear();
      for (const entry of listed.schedules) schedules.set(entry.name, entry);
    }
    redraw();
  }

  function jobEvent(entry) {
    const known = jobs.get(entry.id);
    jobs.set(entry.id, entry);
    if (entry.stats && (entry.state === "running" || entry.state === "finished")) {
      addPoint(entry.id, entry.time, entry.stats);
    }
    if (entry.state === "running" && !series.has(entry.id) && !(known && known.state === "running")) {
      series.set(entry.id, []);
    }
    // One that ended unseen (before the page's listing, or on another node).
    if (entry.state === "finished") wantHistory(entry.id);
    redraw();
  }

  function scheduleEvent(entry) {
    if (entry.deleted) schedules.delete(entry.name);
    else schedules.set(entry.name, entry);
    redraw();
  }

  // -- drawing ----------------------------------------------------------------

  function chart(id, width, height) {
    const points = series.get(id) || [];
    const pad = 2;
    let lines = "";
    if (points.length) {
      const t0 = points[0].t, t1 = Math.max(points[points.length - 1].t, t0 + 1);
      const top = Math.max(1, ...points.map(p => Math.max(p.items, p.pages)));
      const x = t => pad + (t - t0) / (t1 - t0) * (width - 2 * pad);
      const y = v => height - pad - v / top * (height - 2 * pad);
      const line = key => points.map(p => x(p.t).toFixed(1) + "," + y(p[key]).toFixed(1))
        .join(" ");
      const one = points.length === 1;
      for (const [key, cls] of [["pages", "pages"], ["items", "items"]]) {
        lines += one
          ? `<circle class="${cls}" cx="${x(points[0].t).toFixed(1)}" cy="${y(points[0][key]).toFixed(1)}" r="2"></circle>`
          : `<polyline class="${cls}" points="${line(key)}"></polyline>`;
      }
    }
    const last = points[points.length - 1];
    const title = last ? `${last.items} items, ${last.pages} pages` : "no stats yet";
    return `<svg class="chart" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}"` +
      ` role="img" aria-label="items and pages over time"><title>${esc(title)}</title>` +
      `<rect class="frame" x="0.5" y="0.5" width="${width - 1}" height="${height - 1}"></rect>${lines}</svg>`;
  }

  function chartOrWhyNot(id, width, height) {
    const why = unavailable.get(id);
    if (why) {
      return `<span class="unavailable" title="${esc(why.message)}">unavailable: node` +
        ` ${esc(why.node)} is down</span>`;
    }
    return series.has(id) ? chart(id, width, height) : "";
  }

  function ratesNow(id) {
    const points = series.get(id) || [];
    if (points.length < 2) return "";
    const last = points[points.length - 1];
    let first = points[0];
    for (const p of points) { if (last.t - p.t <= RATE_WINDOW) { first = p; break; } }
    if (first === last) first = points[points.length - 2];
    const minutes = (last.t - first.t) / 60;
    if (minutes <= 0) return "";
    const rate = (a, b) => Math.max(0, (a - b) / minutes).toFixed(1);
    return `${rate(last.items, first.items)} items/min<br>${rate(last.pages, first.pages)} pages/min`;
  }

  function cancelButton(entry) {
    const asked = entry.cancel_requested ? " (asked)" : "";
    return `<button type="button" class="cancel" data-action="cancel" data-project="${esc(entry.project)}"` +
      ` data-id="${esc(entry.id)}">Cancel${asked}</button>`;
  }

  function jobCell(entry) {
    // Nodes sharing a job table: a job another node runs or ran says which.
    const elsewhere = entry.node && thisNode !== null && entry.node !== thisNode
      ? ` <span class="node">on ${esc(entry.node)}</span>` : "";
    return `<a href="${esc(entry.log_url)}">${esc(entry.id)}</a>${elsewhere}`;
  }

  function spiderCell(entry) {
    return esc(entry.project) + "/" + esc(entry.spider);
  }

  const rows = {
    running(entry, now) {
      const start = parseTime(entry.start_time);
      const stats = entry.stats;
      return `<td class="job">${jobCell(entry)}</td><td>${spiderCell(entry)}</td>` +
        `${timeCell(start)}<td>${start === null ? "" : clock(now - start)}</td>` +
        `<td class="items">${esc(number(stats, "items") ?? "")}</td><td>${esc(number(stats, "fetched") ?? "")}</td>` +
        `<td class="rates">${ratesNow(entry.id)}</td><td>${chartOrWhyNot(entry.id, 200, 40)}</td>` +
        `<td>${cancelButton(entry)}</td>`;
    },
    pending(entry) {
      return `<td class="job">${jobCell(entry)}</td><td>${spiderCell(entry)}</td>` +
        `<td>${esc(entry.priority)}</td><td class="why">${esc(entry.waiting_for || "a free slot")}</td>` +
        `<td>${cancelButton(entry)}</td>`;
    },
    finished(entry) {
      const start = parseTime(entry.start_time), end = parseTime(entry.end_time);
      const items = number(entry.stats, "items");
      return `<td class="job">${jobCell(entry)}</td><td>${spiderCell(entry)}</td>` +
        `<td class="outcome ${esc(entry.outcome)}" title="${esc(entry.reason || "")}">${esc(entry.outcome)}` +
        `${entry.reason ? ` <span class="reason">${esc(entry.reason)}</span>` : ""}` +
        `${entry.health === "degraded" ? ` <span class="degraded" title="${esc((entry.health_reasons || []).join("; "))}">(degraded)</span>` : ""}</td>` +
        `${timeCell(end)}<td>${start !== null && end !== null ? clock(end - start) : ""}</td>` +
        `<td class="items">${esc(items ?? "")}</td><td>${chartOrWhyNot(entry.id, 120, 24)}</td>`;
    },
  };

  function ordered(state) {
    const list = Array.from(jobs.values()).filter(e => e.state === state);
    if (state === "pending") list.sort((a, b) => (b.priority || 0) - (a.priority || 0));
    if (state === "running") list.sort((a, b) => (parseTime(a.start_time) || 0) - (parseTime(b.start_time) || 0));
    if (state === "finished") {
      list.sort((a, b) => (parseTime(b.end_time) || 0) - (parseTime(a.end_time) || 0));
      return list.slice(0, FINISHED_SHOWN);
    }
    return list;
  }

  // Rows are kept by key and rewritten only when their markup changed, so a
  // button being clicked is not replaced under the pointer for nothing.
  function sync(section, keyed) {
    const body = document.querySelector(`#${section} tbody`);
    const labels = Array.from(document.querySelectorAll(`#${section} thead th`),
                              th => th.textContent);
    const existing = new Map();
    for (const tr of Array.from(body.rows)) existing.set(tr.dataset.key, tr);
    let previous = null;
    for (const [key, attrs, html] of keyed) {
      let tr = existing.get(key);
      if (!tr) {
        tr = document.createElement("tr");
        tr.dataset.key = key;
        for (const [name, value] of Object.entries(attrs)) tr.setAttribute(name, value);
      }
      existing.delete(key);
      if (tr.dataset.html !== html) {
        tr.innerHTML = html;
        tr.dataset.html = html;
        // Each cell's column, for a phone's layout (dashboard.css).
        Array.from(tr.cells).forEach((td, i) => { if (labels[i]) td.dataset.label = labels[i]; });
      }
      const next = previous ? previous.nextSibling : body.firstChild;
      if (next !== tr) body.insertBefore(tr, next);
      previous = tr;
    }
    for (const tr of existing.values()) tr.remove();
    document.querySelector(`#${section} .count`).textContent = keyed.length ? `(${keyed.length})` : "";
  }

  function draw() {
    drawing = false;
    const now = Date.now() / 1000;
    for (const state of ["running", "pending", "finished"]) {
      sync(state, ordered(state).map(e => [e.id, {"data-job": e.id, "class": state},
                                           rows[state](e, now)]));
    }
    sync("schedules", Array.from(schedules.values()).map(s => [s.name, {"data-schedule": s.name},
      `<td>${esc(s.name)}</td><td>${spiderCell(s)}</td>` +
      `<td>${esc(s.cron ? "cron " + s.cron : "every " + s.every)} (${esc(s.tz)})</td>` +
      // next_run is ISO 8601 in the schedule's zone (kept as the cell's title).
      `${timeCell(s.next_run ? Date.parse(s.next_run) / 1000 : null, s.next_run)}` +
      `<td>${esc(s.runs)}${s.skipped ? ", " + esc(s.skipped) + " skipped" : ""}</td>` +
      `<td>${s.paused ? "paused" : s.error ? "error: " + esc(s.error) : "active"}</td>`]));
  }

  function redraw() {
    if (!drawing) { drawing = true; requestAnimationFrame(draw); }
  }

  function setLive(text) {
    document.getElementById("live-state").textContent = text;
    document.getElementById("dashboard").dataset.state = text;
  }

  // -- the run form -----------------------------------------------------------

  // No spider is chosen for the user: the first in the list is only the
  // first alphabetically (in the example project, "audit", made to fail),
  // and a Run pressed by mistake starts a real crawl. Run waits for a choice.
  function canRun(form) {
    form.querySelector("button[type=submit]").disabled = !form.spider.value;
  }

  async function loadSpiders(form) {
    const project = form.project.value;
    form.spider.innerHTML = "";
    form.spider.add(new Option("choose a spider", ""));
    canRun(form);
    if (!project) return;
    const answer = await getJSON("/listspiders.json?project=" + encodeURIComponent(project));
    for (const name of answer.spiders || []) form.spider.add(new Option(name, name));
  }

  async function setUpForm() {
    const form = document.getElementById("run");
    const answer = await getJSON("/listprojects.json");
    for (const name of answer.projects || []) form.project.add(new Option(name, name));
    form.project.addEventListener("change", () => loadSpiders(form));
    form.spider.addEventListener("change", () => canRun(form));
    await loadSpiders(form);
    form.addEventListener("submit", async event => {
      event.preventDefault();
      if (!form.spider.value) return;
      const result = form.querySelector(".result");
      const answer = await post("/schedule.json", {project: form.project.value,
                                                  spider: form.spider.value});
      result.textContent = answer.status === "ok" ? "queued " + answer.jobid : answer.message;
    });
  }

  document.addEventListener("click", async event => {
    const button = event.target.closest("button[data-action=cancel]");
    if (!button) return;
    button.disabled = true;
    const answer = await post("/cancel.json", {project: button.dataset.project,
                                              job: button.dataset.id});
    if (answer.status !== "ok") { button.disabled = false; button.title = answer.message; }
  });

  // -- the stream -------------------------------------------------------------

  function connect() {
    const events = new EventSource("/events");
    events.addEventListener("open", () => {
      setLive("live");
      reload().catch(e => setLive("error: " + e));
    });
    events.addEventListener("error", () => setLive("reconnecting"));
    events.addEventListener("job", e => jobEvent(JSON.parse(e.data)));
    events.addEventListener("schedule", e => scheduleEvent(JSON.parse(e.data)));
    // Changes may have been missed (a node's link to the shared job table
    // came back): read the listings again, as on connecting.
    events.addEventListener("resync", () => reload().catch(e => setLive("error: " + e)));
  }

  setUpForm().catch(() => {});
  connect();
  // Runtimes move on between events.
  setInterval(redraw, 1000);
})();
