// The job page (/job/PROJECT/JOBID): one job's facts, why it ended, its
// attempts, its stats over time as a chart, its log (the tail, followed
// while it runs), its items, and Cancel, Kill and Run again for those who
// may write. Everything shown comes from the API: job.json, jobstats.json,
// /logs/ and /items/ (read by Range, never whole), /events.
"use strict";

(function () {
  const C = window.Console;
  const project = C.data("project"), jobid = C.data("job");

  // How much of a log is read at a time: the tail when the page opens (a
  // 100 MB log opens as fast as a small one), and each "Load earlier".
  const LOG_CHUNK = 262144;
  // "Go to the error" reads earlier chunks up to this much of a log.
  const ERROR_SEARCH_BYTES = 4 * 1048576;
  // While a job runs its log is asked for what was added since the last
  // read this often (and at each stats event), a Range from the last size.
  const LOG_POLL_MS = 1500;
  // The lines a followed log keeps: past this (and a batch more, so the
  // redraw is rare), the oldest go, and "Load earlier" reads them again.
  const LOG_LINES_KEPT = 20000, LOG_LINES_BATCH = 2000;
  // The longest line "Load earlier" reads whole (a chunk at a time, back
  // to its start): one longer is shown cut, its end alone and marked, so
  // every read moves the start of what is shown.
  const LONGEST_LINE = 4 * 1048576;
  // While /events is refused (the page is not live), job.json is asked
  // this often, so the page learns the job started or ended.
  const JOB_POLL_MS = 4000;
  // The search redraws the log this long after the last key pressed.
  const SEARCH_DELAY_MS = 150;
  // Items: bytes read from the items file at a time, rows shown at a time.
  const ITEMS_CHUNK = 65536, ITEMS_PAGE = 50;

  const LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"];
  // A level as Netweir writes it ("ERROR error in parse ..."), or after a
  // time and a [name] as the service's own lines are ("2026-... [netweir-serve] INFO: ...").
  const LEVEL_AT = /^(?:\d{4}-\d\d-\d\d[ T][\d:.,]+\s+)?(?:\[[^\]]*\]\s+)?(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\b/;
  const TRACEBACK = /^Traceback \(most recent call last\)/;

  const page = {job: null, canWrite: false, stats: null, points: [], charts: null,
                finalRead: false};
  const sections = {};

  document.head.append(C.el("link", {rel: "stylesheet", href: "/console/job.css"}));

  // -- the page's frame -----------------------------------------------------------

  function frame() {
    const main = C.main();
    sections.head = C.el("div", {class: "job-head"});
    sections.actions = C.el("div", {class: "job-actions", id: "job-actions"});
    sections.why = C.el("section", {id: "why", hidden: true});
    sections.facts = C.el("section", {id: "facts", "aria-label": "facts"});
    sections.attempts = C.el("section", {id: "attempts", hidden: true});
    sections.progress = C.el("section", {id: "progress"});
    sections.log = C.el("section", {id: "log"});
    sections.items = C.el("section", {id: "items"});
    main.replaceChildren(sections.head, sections.actions, sections.why, sections.facts,
                         sections.attempts, sections.progress, sections.log, sections.items);
  }

  // -- the job's facts --------------------------------------------------------------

  function chip(text, kind) {
    return text ? C.el("span", {class: `chip ${kind || text}`}, text) : null;
  }

  function drawHead() {
    const job = page.job;
    sections.head.replaceChildren(
      C.el("h1", {}, "Job ", C.el("span", {class: "mono job-id"}, job.id)),
      C.el("p", {class: "job-line"},
           chip(job.state, job.state), " ",
           job.outcome ? chip(job.outcome) : null, " ",
           job.health ? chip(job.health) : null, " ",
           C.el("span", {class: "muted"}, "project "), job.project,
           C.el("span", {class: "muted"}, " · spider "),
           C.el("a", {href: C.spiderHref(job.project, job.spider)}, job.spider)));
  }

  // One fact: a term and its value, grouped so the facts flow in columns.
  function fact(term, ...value) {
    return C.el("div", {class: "fact"}, C.el("dt", {}, term), C.el("dd", {}, ...value));
  }

  function wideFact(term, ...value) {
    const one = fact(term, ...value);
    one.classList.add("wide");
    return one;
  }

  function pairs(object, empty) {
    const keys = Object.keys(object || {});
    if (!keys.length) return C.el("span", {class: "muted"}, empty);
    return C.el("ul", {class: "pairs"}, keys.map((key) =>
      C.el("li", {}, C.el("code", {}, key), " = ", C.el("code", {}, String(object[key])))));
  }

  function timeAndAgo(seconds) {
    if (!seconds) return C.el("span", {class: "muted"}, "–");
    return C.el("span", {}, C.time(seconds), " ",
                C.el("span", {class: "muted"}, "(", C.ago(seconds), ")"));
  }

  function drawFacts() {
    const job = page.job, at = job.at || {};
    const runtime = at.started ? ((at.ended || Date.now() / 1000) - at.started) : null;
    const items = [
      fact("State", job.state, job.cancel_requested && job.state === "running"
        ? C.el("span", {class: "muted"}, job.kill_requested ? " (kill asked)" : " (cancel asked)")
        : null),
      job.outcome ? fact("Outcome", job.outcome,
                         job.exit_status === null || job.exit_status === undefined ? null
                           : C.el("span", {class: "muted"}, ` (exit status ${job.exit_status})`))
        : null,
      job.reason ? fact("Reason", job.reason) : null,
      job.detail ? fact("Detail", job.detail) : null,
      job.health ? fact("Health", job.health, job.health_reasons && job.health_reasons.length
        ? C.el("ul", {class: "reasons"}, job.health_reasons.map((r) => C.el("li", {}, r))) : null)
        : null,
      job.waiting_for ? fact("Waiting for", job.waiting_for) : null,
      fact("Queued", timeAndAgo(at.queued)),
      fact("Started", timeAndAgo(at.started)),
      fact("Ended", timeAndAgo(at.ended)),
      fact("Run time", C.el("span", {class: "num"}, runtime === null ? "–" : C.duration(runtime))),
      fact("Node", job.node || C.el("span", {class: "muted"}, "none (it never ran)")),
      fact("Queued by", queuedBy(job)),
      job.schedule ? fact("Schedule", C.el("a", {href: "/schedules#schedule-" + encodeURIComponent(job.schedule)},
                                            job.schedule)) : null,
      job.upstream ? fact("After job", C.el("a", {href: C.jobHref(job.project, job.upstream)},
                                             job.upstream)) : null,
      fact("Attempt", attemptText(job)),
      job.retry_of ? fact("Retry of", C.el("a", {href: C.jobHref(job.project, job.retry_of)},
                                            job.retry_of)) : null,
      fact("Priority", C.el("span", {class: "num"}, C.number(job.priority))),
      job.pid ? fact("Process", C.el("span", {class: "num"}, String(job.pid))) : null,
      wideFact("Settings", pairs(job.settings, "none")),
      wideFact("Arguments", pairs(job.arguments, "none")),
      wideFact("Policy", pairs(job.policy, "none")),
    ].filter(Boolean);
    sections.facts.replaceChildren(C.el("h2", {}, "Facts"), C.el("dl", {class: "job-facts"}, items));
  }

  function queuedBy(job) {
    if (!job.by) return C.el("span", {class: "muted"}, "not recorded (no credentials asked)");
    const schedule = /^schedule:(.+)$/.exec(job.by);
    if (schedule) {
      return C.el("span", {}, "schedule ", C.el("a", {href: "/schedules#schedule-" + encodeURIComponent(schedule[1])},
                                                schedule[1]));
    }
    return job.by;
  }

  function attemptText(job) {
    const attempts = job.attempts || [];
    const last = attempts.length ? attempts[attempts.length - 1].attempt : job.attempt;
    return `${job.attempt} of ${Math.max(last, job.attempt)}`;
  }

  function drawAttempts() {
    const attempts = page.job.attempts || [];
    sections.attempts.hidden = attempts.length < 2;
    if (attempts.length < 2) return;
    const rows = attempts.map((one) => C.el("tr", {class: one.id === page.job.id ? "current" : null},
      C.el("td", {"data-label": "attempt", class: "num"}, String(one.attempt)),
      C.el("td", {"data-label": "job", class: "id"},
           one.id === page.job.id ? C.el("strong", {}, one.id)
             : C.el("a", {href: C.jobHref(page.job.project, one.id)}, one.id)),
      C.el("td", {"data-label": "state"}, chip(one.state, one.state)),
      C.el("td", {"data-label": "outcome"}, one.outcome ? chip(one.outcome) : "–"),
      C.el("td", {"data-label": "reason"}, one.reason || "–"),
      C.el("td", {"data-label": "ended"}, one.at && one.at.ended ? C.time(one.at.ended) : "–")));
    sections.attempts.replaceChildren(
      C.el("h2", {}, "Attempts"),
      C.el("table", {class: "cards-narrow"},
           C.el("thead", {}, C.el("tr", {}, ["Attempt", "Job", "State", "Outcome", "Reason", "Ended"]
             .map((h, n) => C.el("th", {class: n === 0 ? "num" : null}, h)))),
           C.el("tbody", {}, rows)));
  }

  // Why a job that did not finish well ended, and the way to its error.
  function drawWhy() {
    const job = page.job;
    const bad = job.state === "finished" && job.outcome !== "finished";
    const degraded = job.health === "degraded";
    sections.why.hidden = !(bad || degraded);
    if (sections.why.hidden) return;
    const finish = page.stats && page.stats.finish_reason;
    const lines = [];
    if (bad) {
      lines.push(C.el("p", {}, `It ended ${job.outcome}: `, C.el("strong", {}, job.reason || "no reason recorded"),
                      job.exit_status !== null && job.exit_status !== undefined ? ` (exit status ${job.exit_status})` : "",
                      finish ? `; the crawl's finish reason: ${finish}` : "", "."));
    }
    if (job.detail) lines.push(C.el("p", {}, job.detail));
    if (degraded) {
      lines.push(C.el("p", {}, "It finished below its run health checks:"),
                 C.el("ul", {}, job.health_reasons.map((r) => C.el("li", {}, r))));
    }
    const go = C.el("button", {type: "button", id: "go-to-error", onclick: goToError}, "Go to the error");
    sections.why.replaceChildren(C.el("h2", {}, "Why it ended"), ...lines,
                                 C.el("p", {}, go, " ", C.el("span", {class: "muted", id: "error-note"})));
  }

  // -- the buttons ------------------------------------------------------------------

  // Redrawn only when what they offer changes (not at every stats event,
  // which would take a keyboard user's focus away); ``said`` stays.
  const said = C.el("span", {class: "result", role: "status"});
  let actionsDrawn = null;

  function drawActions() {
    const job = page.job;
    const place = sections.actions;
    const masked = job.masked || [];
    const key = JSON.stringify([page.canWrite, job.state, job.cancel_requested, masked]);
    if (key === actionsDrawn) return;
    actionsDrawn = key;
    if (!page.canWrite) { place.replaceChildren(); return; }
    const buttons = [];
    if (job.state === "pending" || job.state === "running") {
      buttons.push(C.el("button", {type: "button", id: "cancel", onclick: () => cancel(false, said)},
                        job.cancel_requested ? "Cancel again (kills)" : "Cancel"));
    }
    if (job.state === "running") {
      buttons.push(C.el("button", {type: "button", id: "kill", class: "danger",
                                   onclick: () => cancel(true, said)}, "Kill"));
    }
    buttons.push(C.el("button", {type: "button", id: "run-again", onclick: () => runAgain(said),
                                 disabled: masked.length > 0,
                                 "aria-describedby": masked.length ? "run-again-why" : null},
                      "Run again"));
    place.replaceChildren(...buttons, said);
    if (masked.length) {
      place.append(C.el("p", {class: "muted", id: "run-again-why"},
        `Run again is off: this job's ${masked.join(", ")} hold a secret the API never shows, `,
        "so the page cannot send it back. Schedule it with schedule.json, giving them in full."));
    }
  }

  async function cancel(kill, said) {
    said.textContent = kill ? "killing…" : "cancelling…";
    said.classList.remove("error");
    try {
      const answer = await C.post("cancel.json", {project: page.job.project, job: page.job.id,
                                                  signal: kill ? "KILL" : null});
      said.textContent = answer.prevstate
        ? `${kill ? "kill" : "cancel"} asked (it was ${answer.prevstate})` : "it had ended already";
    } catch (error) {
      said.textContent = error.message;
      said.classList.add("error");
    }
  }

  // Run again: schedule.json with the job's project, spider, settings,
  // arguments, priority and policy (as job.json shows them: the policy it
  // ran under, so the new job has the same deadlines, retries and checks).
  // Never with a masked value: the button is off when job.json says any is.
  async function runAgain(said) {
    const job = page.job;
    const form = {project: job.project, spider: job.spider,
                  setting: Object.entries(job.settings || {}).map(([k, v]) => `${k}=${v}`)};
    if (job.priority) form.priority = String(job.priority);
    for (const [key, value] of Object.entries(job.policy || {})) form["_" + key] = String(value);
    for (const [key, value] of Object.entries(job.arguments || {})) form[key] = value;
    said.textContent = "queueing…";
    said.classList.remove("error");
    try {
      const answer = await C.post("schedule.json", form);
      said.replaceChildren("queued as ", C.el("a", {href: C.jobHref(job.project, answer.jobid),
                                                    id: "run-again-job"}, answer.jobid));
    } catch (error) {
      said.textContent = error.message;
      said.classList.add("error");
    }
  }

  // -- the chart and the rates ---------------------------------------------------

  function countsOf(stats) {
    const whole = (v) => (typeof v === "number" && isFinite(v) ? v : null);
    const errors = [whole(stats.failed), whole(stats.callback_errors)].filter((v) => v !== null);
    return {pages: whole(stats.fetched), items: whole(stats.items),
            errors: errors.length ? errors.reduce((a, b) => a + b, 0) : null,
            bytes: whole(stats.bytes)};
  }

  function addPoint(time, stats) {
    if (!stats || typeof time !== "number") return false;
    const last = page.points[page.points.length - 1];
    if (last && time <= last.time) return false;
    page.points.push(Object.assign({time}, countsOf(stats)));
    return true;
  }

  function drawProgress() {
    const points = page.points;
    const place = sections.progress;
    if (!page.charts) {
      page.charts = {
        note: C.el("p", {class: "muted"}),
        rates: C.el("div", {class: "scroll"}),
        counts: C.el("div", {class: "chart", id: "chart-counts", "aria-label": "pages, items and errors over time"}),
        bytes: C.el("div", {class: "chart", id: "chart-bytes", "aria-label": "bytes over time"}),
      };
      place.replaceChildren(C.el("h2", {}, "Progress"), page.charts.note,
                            C.el("div", {class: "progress-grid"}, page.charts.rates,
                                 C.el("div", {class: "charts"}, page.charts.counts, page.charts.bytes)));
    }
    const parts = page.charts;
    parts.note.textContent = points.length ? ""
      : page.job.state === "pending" ? "No stats yet: the job has not started."
        : page.job.state === "running" ? "No stats yet: the crawl writes its first about 5 s after it starts."
          : "This job wrote no stats.";
    parts.counts.dataset.points = String(points.length);
    parts.bytes.dataset.points = String(points.length);
    drawRates(parts.rates);
    if (!points.length) return;
    const times = points.map((p) => p.time);
    const data = [times, points.map((p) => p.pages), points.map((p) => p.items),
                  points.map((p) => p.errors)];
    if (!parts.countsPlot) {
      parts.countsPlot = C.chart(parts.counts, times, [
        {label: "pages", values: data[1]}, {label: "items", values: data[2]},
        {label: "errors", values: data[3], color: "#c23c3c"}], {points: points.length < 3});
      parts.bytesPlot = C.chart(parts.bytes, times, [
        {label: "bytes", values: points.map((p) => p.bytes), unit: "B", color: "#2e9e6a"}],
        {height: 160, points: points.length < 3});
      // On their elements too, for whoever inspects the page (and its tests).
      parts.counts.plot = parts.countsPlot;
      parts.bytes.plot = parts.bytesPlot;
    } else {
      parts.countsPlot.setData(data);
      parts.bytesPlot.setData([times, points.map((p) => p.bytes)]);
    }
    if (points.length === 1) {
      // uPlot spreads a lone point's time axis over years: show the run's
      // own time, from its start to that point (a minute around it when
      // the two are one).
      const at = points[0].time, started = (page.job.at && page.job.at.started) || at;
      const range = at - started > 1 ? {min: started, max: at} : {min: at - 30, max: at + 30};
      parts.countsPlot.setScale("x", range);
      parts.bytesPlot.setScale("x", range);
    }
  }

  // Now (between the last two points) and on average (since the start).
  function drawRates(place) {
    const points = page.points;
    if (!points.length) { place.replaceChildren(); return; }
    const last = points[points.length - 1], before = points[points.length - 2];
    const started = (page.job.at && page.job.at.started) || points[0].time;
    const span = last.time - started;
    const rate = (key, a, b, seconds) =>
      (seconds > 0 && a[key] !== null && (b === null || b[key] !== null))
        ? (a[key] - (b ? b[key] : 0)) / seconds : null;
    const row = (label, key, unit, show) => C.el("tr", {},
      C.el("th", {scope: "row"}, label),
      C.el("td", {class: "num", "data-label": "total"}, show(last[key])),
      C.el("td", {class: "num", "data-label": "now"},
           before && page.job.state === "running"
             ? showRate(rate(key, last, before, last.time - before.time), unit) : "–"),
      C.el("td", {class: "num", "data-label": "average"}, showRate(rate(key, last, null, span), unit)));
    place.replaceChildren(C.el("table", {class: "rates cards-narrow", id: "rates"},
      C.el("thead", {}, C.el("tr", {}, C.el("th", {}, ""), C.el("th", {class: "num"}, "total"),
                              C.el("th", {class: "num"}, "now"), C.el("th", {class: "num"}, "average"))),
      C.el("tbody", {},
           row("pages", "pages", "pages", C.number), row("items", "items", "items", C.number),
           row("errors", "errors", "errors", C.number), row("bytes", "bytes", "B", C.bytes))));
  }

  function showRate(perSecond, unit) {
    if (perSecond === null || !isFinite(perSecond)) return "–";
    if (unit === "B") return C.bytes(Math.round(perSecond)) + "/s";
    return C.rate(perSecond, unit);
  }

  async function loadStats() {
    try {
      const answer = await C.get("jobstats.json", {job: page.job.id, history: 1});
      page.stats = answer.stats;
      page.points = [];
      for (const point of answer.history || []) addPoint(point.time, point.stats);
    } catch (error) {
      page.points = [];
    }
    drawProgress();
    drawWhy();
  }

  // -- the log ----------------------------------------------------------------------

  // The part of the log read so far: whole lines from byte ``start`` to
  // ``end`` (the next read begins at ``end``), and the file's size.
  // ``busy``: the read under way (pollLog's or loadEarlier's; a promise
  // that never fails), null when none is: one read at a time.
  const log = {lines: [], start: 0, end: 0, size: null, missing: false, busy: null,
               timer: null, target: -1};

  function oneRead(work) {
    const running = work();
    const settled = running.then(() => null, () => null);
    log.busy = settled;
    settled.then(() => { if (log.busy === settled) log.busy = null; });
    return running;
  }

  // A Range read: {status, bytes, first, total}; 416 (nothing there yet)
  // and 404 (no file yet) are answers, not errors.
  async function readRange(url, range) {
    const response = await fetch(url, {headers: {Range: range}, credentials: "same-origin",
                                       cache: "no-store"});
    if (response.status === 416 || response.status === 404) {
      const total = /\/(\d+)$/.exec(response.headers.get("content-range") || "");
      return {status: response.status, total: total ? Number(total[1]) : null};
    }
    if (!response.ok) throw new Error(`${url}: ${response.status} ${response.statusText}`);
    const bytes = new Uint8Array(await response.arrayBuffer());
    let first = 0, total = bytes.length;
    const range_ = /bytes (\d+)-(\d+)\/(\d+|\*)/.exec(response.headers.get("content-range") || "");
    if (response.status === 206 && range_) {
      first = Number(range_[1]);
      total = range_[3] === "*" ? null : Number(range_[3]);
    }
    return {status: response.status, bytes, first, total};
  }

  const decoder = new TextDecoder("utf-8"), encoder = new TextEncoder();

  // ``bytes``: the line's length in the file, its newline included, so
  // that dropping lines moves the start of what was read exactly.
  function lineObjects(text) {
    const lines = text.split("\n");
    if (lines.length && lines[lines.length - 1] === "") lines.pop();
    return lines.map((line) => {
      const own = LEVEL_AT.exec(line);
      return {text: line, own: own ? (own[1] === "WARN" ? "WARNING" : own[1]) : null,
              traceback: TRACEBACK.test(line), level: null,
              bytes: encoder.encode(line).length + 1};
    });
  }

  // A log followed for hours keeps its newest LOG_LINES_KEPT lines.
  function dropOldLines() {
    if (log.lines.length <= LOG_LINES_KEPT + LOG_LINES_BATCH) return false;
    const gone = log.lines.splice(0, log.lines.length - LOG_LINES_KEPT);
    log.start += gone.reduce((sum, line) => sum + line.bytes, 0);
    if (log.target >= 0) log.target = Math.max(-1, log.target - gone.length);
    return true;
  }

  // A line without a level of its own (a traceback's, a message's second
  // line) has the level of the line it continues.
  function settleLevels(from) {
    let level = from > 0 ? log.lines[from - 1].level : "INFO";
    for (let n = from; n < log.lines.length; n++) {
      const line = log.lines[n];
      level = line.own || (line.traceback ? "ERROR" : level);
      line.level = level;
    }
  }

  // The bytes read at ``first``: whole lines only, but for the end of a
  // finished job's log; ``skipPartial`` drops a first line cut by the read.
  function wholeLines(bytes, first, skipPartial, toTheEnd) {
    let from = 0;
    if (skipPartial) {
      const newline = bytes.indexOf(10);
      from = newline < 0 ? bytes.length : newline + 1;
    }
    let to = toTheEnd ? bytes.length : bytes.lastIndexOf(10) + 1;
    if (to < from) to = from;
    return {text: decoder.decode(bytes.subarray(from, to)), start: first + from, end: first + to};
  }

  function logUrl() { return page.job.log_url; }

  async function loadLogTail() {
    const finished = page.job.state === "finished";
    const got = await readRange(logUrl(), `bytes=-${LOG_CHUNK}`);
    if (got.status === 404 || got.status === 416) {
      log.missing = got.status === 404;
      log.lines = []; log.start = log.end = 0; log.size = got.total || 0;
      drawLog(); return;
    }
    log.missing = false;
    const part = wholeLines(got.bytes, got.first, got.first > 0, finished);
    log.lines = lineObjects(part.text);
    log.start = part.start; log.end = part.end; log.size = got.total;
    settleLevels(0);
    drawLog();
  }

  // What was added since the last read: a Range from the last end.
  function pollLog() {
    if (log.busy || !page.job) return Promise.resolve();
    return oneRead(readNewLog);
  }

  async function readNewLog() {
    try {
      const finished = page.job.state === "finished";
      const got = await readRange(logUrl(), `bytes=${log.end}-`);
      if (got.status === 404) return;
      if (got.status === 416) {
        if (got.total !== null && got.total < log.end) await loadLogTail(); // a new file
        else if (got.total !== null) log.size = got.total;
        return;
      }
      if (got.status === 200 && log.end > 0) { await loadLogTail(); return; }
      log.missing = false;
      const part = wholeLines(got.bytes, got.first, false, finished);
      log.size = got.total;
      if (part.end === part.start) { updateLogNote(); return; }
      const from = log.lines.length;
      log.lines.push(...lineObjects(part.text));
      log.end = part.end;
      settleLevels(from);
      if (dropOldLines()) drawLog(); else appendLog(from);
    } catch (error) {
      console.error(error);
    }
  }

  // Reads the lines before those shown; true when it did (the start of
  // what is shown moved), false when there was nothing to read, or another
  // read was under way.
  function loadEarlier() {
    if (log.start <= 0 || log.busy) return Promise.resolve(false);
    return oneRead(readEarlier);
  }

  async function readEarlier() {
    // Back a chunk at a time until the bytes read hold a newline before
    // the last (the one ending the line before those shown): the line it
    // ends is whole then, and the lines after it. A read without one
    // is all inside a single long line.
    let bytes = new Uint8Array(0), first = log.start;
    while (first > 0) {
      const from = Math.max(0, first - LOG_CHUNK);
      const got = await readRange(logUrl(), `bytes=${from}-${first - 1}`);
      if (!got.bytes) return false;
      const chunk = got.status === 200 ? got.bytes.subarray(from, first) : got.bytes;
      const joined = new Uint8Array(chunk.length + bytes.length);
      joined.set(chunk); joined.set(bytes, chunk.length);
      bytes = joined; first = from;
      const newline = bytes.indexOf(10);
      if (newline >= 0 && newline < bytes.length - 1) break;
      if (bytes.length >= LONGEST_LINE) break;
    }
    const newline = bytes.indexOf(10);
    let earlier, start;
    if (first === 0 || (newline >= 0 && newline < bytes.length - 1)) {
      const part = wholeLines(bytes, first, first > 0, true);
      earlier = lineObjects(part.text);
      start = part.start;
      // Read up to a cut line's end, the last is its start, with no newline.
      if (earlier.length && bytes[bytes.length - 1] !== 10) earlier[earlier.length - 1].bytes -= 1;
    } else {
      earlier = [cutLine(bytes, first)];
      start = first;
    }
    // Never a success that does not move: "Go to the error" reads until
    // one fails.
    if (start >= log.start || !earlier.length) return false;
    log.lines = earlier.concat(log.lines);
    log.start = start;
    if (log.target >= 0) log.target += earlier.length;
    settleLevels(0);
    drawLog();
    return true;
  }

  // The end of a line longer than LONGEST_LINE, read from byte ``first``:
  // shown marked as cut; ``bytes`` counts what was read, so that dropping
  // it moves the start exactly.
  function cutLine(bytes, first) {
    const end = bytes[bytes.length - 1] === 10 ? bytes.length - 1 : bytes.length;
    return {text: `[cut: this line starts before byte ${first}] ` + decoder.decode(bytes.subarray(0, end)),
            own: null, traceback: false, level: null, bytes: bytes.length, cut: true};
  }

  const logParts = {};

  function drawLogFrame() {
    const levelSelect = C.el("select", {id: "log-level", name: "level", onchange: () => drawLog()},
      C.el("option", {value: "DEBUG"}, "every line"),
      C.el("option", {value: "INFO"}, "INFO and up"),
      C.el("option", {value: "WARNING"}, "WARNING and up"),
      C.el("option", {value: "ERROR"}, "ERROR and up"),
      C.el("option", {value: "CRITICAL"}, "CRITICAL only"));
    const search = C.el("input", {type: "search", id: "log-search", name: "search",
                                  placeholder: "text in a line", oninput: searchTyped});
    const only = C.el("input", {type: "checkbox", id: "log-only", name: "only", onchange: () => drawLog()});
    const follow = C.el("input", {type: "checkbox", id: "log-follow", name: "follow", checked: true});
    logParts.level = levelSelect; logParts.search = search; logParts.only = only;
    logParts.follow = follow;
    logParts.earlier = C.el("button", {type: "button", id: "log-earlier",
                                       onclick: () => loadEarlier()}, "Load earlier");
    logParts.note = C.el("p", {class: "muted", id: "log-note"});
    logParts.errorNote = C.el("p", {class: "muted", id: "log-error-note"});
    logParts.pre = C.el("pre", {class: "log", id: "log-lines", tabindex: "0",
                                "aria-label": "the job's log"});
    logParts.download = C.el("a", {href: page.job.log_url, download: `${page.job.id}.log`},
                             "Download the whole log");
    sections.log.replaceChildren(
      C.el("h2", {}, "Log"),
      C.el("form", {class: "inline log-tools", role: "search", onsubmit: (e) => e.preventDefault()},
           C.el("label", {}, "Search", search),
           C.el("label", {class: "check"}, only, "only matching lines"),
           C.el("label", {}, "Level", levelSelect),
           C.el("label", {class: "check"}, follow, "follow the end")),
      logParts.note, logParts.errorNote, C.el("p", {}, logParts.earlier), logParts.pre,
      C.el("p", {}, logParts.download));
  }

  // A 100,000-line log is not redrawn at every key pressed.
  let searchTimer = null;
  function searchTyped() {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => { searchTimer = null; drawLog(); }, SEARCH_DELAY_MS);
  }

  function rank(level) { return LEVELS.indexOf(level || "INFO"); }

  function shownLine(line) {
    if (rank(line.level) < rank(logParts.level.value)) return false;
    const text = logParts.search.value;
    if (text && logParts.only.checked) return line.text.toLowerCase().includes(text.toLowerCase());
    return true;
  }

  function lineNode(line, n) {
    const node = C.el("span", {class: `line ${line.level}${line.cut ? " cut" : ""}`, "data-n": String(n)});
    if (n === log.target) { node.classList.add("target"); node.tabIndex = -1; }
    const text = logParts.search.value;
    if (!text) {
      node.append(line.text);
    } else {
      const lower = line.text.toLowerCase(), wanted = text.toLowerCase();
      let at = 0, found;
      while ((found = lower.indexOf(wanted, at)) >= 0) {
        node.append(line.text.slice(at, found), C.el("mark", {}, line.text.slice(found, found + text.length)));
        at = found + text.length;
      }
      node.append(line.text.slice(at));
    }
    node.append("\n");
    return node;
  }

  function drawLog() {
    if (!logParts.pre) return;
    const fragment = document.createDocumentFragment();
    log.lines.forEach((line, n) => { if (shownLine(line)) fragment.append(lineNode(line, n)); });
    logParts.pre.replaceChildren(fragment);
    updateLogNote();
    if (logParts.follow.checked && page.job.state === "running") scrollToEnd();
  }

  function appendLog(from) {
    const fragment = document.createDocumentFragment();
    for (let n = from; n < log.lines.length; n++) {
      if (shownLine(log.lines[n])) fragment.append(lineNode(log.lines[n], n));
    }
    logParts.pre.append(fragment);
    updateLogNote();
    if (logParts.follow.checked) scrollToEnd();
  }

  function scrollToEnd() { logParts.pre.scrollTop = logParts.pre.scrollHeight; }

  function updateLogNote() {
    const pre = logParts.pre;
    pre.dataset.start = String(log.start);
    pre.dataset.end = String(log.end);
    pre.dataset.lines = String(log.lines.length);
    logParts.earlier.hidden = log.start <= 0;
    if (log.missing) {
      logParts.note.textContent = page.job.state === "pending"
        ? "No log yet: the job has not started." : "No log: the job wrote none, or it was forgotten.";
      return;
    }
    const shown = pre.childElementCount;
    const size = log.size === null ? "" : ` of ${C.bytes(log.size)}`;
    const read = log.start > 0 ? `the last ${C.bytes(log.end - log.start)}${size}` : `all ${C.bytes(log.end)}`;
    const matches = logParts.search.value
      ? `; ${C.number(log.lines.filter((l) => l.text.toLowerCase().includes(logParts.search.value.toLowerCase())).length)} matching`
      : "";
    logParts.note.textContent = `${C.number(log.lines.length)} lines (${read})` +
      (shown !== log.lines.length ? `, ${C.number(shown)} shown` : "") + matches +
      (page.job.state === "running" ? "; new lines appear as the crawl writes them" : "");
  }

  function firstError() {
    let warning = -1;
    for (let n = 0; n < log.lines.length; n++) {
      const line = log.lines[n];
      if (line.own === "ERROR" || line.own === "CRITICAL" || line.traceback) return {n, kind: "error"};
      if (warning < 0 && line.own === "WARNING") warning = n;
    }
    return warning >= 0 ? {n: warning, kind: "warning"} : {n: -1};
  }

  // The first ERROR, CRITICAL or traceback line: in a log of up to
  // ERROR_SEARCH_BYTES the whole of it is read first (so it is the first
  // of the log, not of its tail); in a longer one, earlier chunks are read
  // until one is found or that much was read.
  async function goToError() {
    // A job that ended well has no "why" section: its note goes below the log's tools.
    const note = document.getElementById("error-note") || logParts.errorNote;
    note.textContent = "";
    if (log.size !== null && log.size <= ERROR_SEARCH_BYTES) {
      while (log.start > 0 && await loadEarlier()) { /* read it all */ }
    }
    let found = firstError();
    while (found.kind !== "error" && log.start > 0 && log.end - log.start < ERROR_SEARCH_BYTES) {
      if (!await loadEarlier()) break;
      found = firstError();
    }
    if (found.n < 0) {
      note.textContent = log.start > 0 ? `No error in the last ${C.bytes(log.end - log.start)} of the log.`
        : "The log has no ERROR, CRITICAL or traceback line.";
      return;
    }
    if (found.kind === "warning") note.textContent = "No ERROR line: this is its first warning.";
    log.target = found.n;
    // Every line shown, so the error's neighbours are there too.
    logParts.level.value = "DEBUG";
    logParts.only.checked = false;
    logParts.follow.checked = false;
    drawLog();
    const line = logParts.pre.querySelector(`[data-n="${found.n}"]`);
    if (line) {
      line.scrollIntoView({block: "center"});
      line.focus({preventScroll: true});
    }
  }

  function startFollowingLog() {
    if (log.timer === null && page.job.state === "running") {
      log.timer = setInterval(pollLog, LOG_POLL_MS);
    }
  }

  async function finalLogRead() {
    if (log.timer !== null) { clearInterval(log.timer); log.timer = null; }
    // Its last lines, and the stats the service adds at its end. A read
    // under way may have asked before they were written: wait for it, then
    // read once more.
    while (log.busy) await log.busy;
    await pollLog();
  }

  // -- the items --------------------------------------------------------------------

  // ``values``: whether a shown item is not a JSON object (a string, a
  // number, an array...), which the "(value)" column shows.
  const items = {rows: [], offset: 0, rest: new Uint8Array(0), shown: 0, size: null,
                 missing: false, busy: false, columns: [], values: false};
  const itemParts = {};

  function drawItemsFrame() {
    itemParts.note = C.el("p", {class: "muted", id: "items-note"});
    itemParts.table = C.el("table", {class: "items-table", id: "items-table"});
    itemParts.more = C.el("button", {type: "button", id: "items-more", onclick: moreItems},
                          "Show more");
    itemParts.download = C.el("a", {href: page.job.items_url, download: `${page.job.id}.jl`},
                              "Download the items (JSON Lines)");
    sections.items.replaceChildren(C.el("h2", {}, "Items"), itemParts.note,
                                   C.el("div", {class: "scroll"}, itemParts.table),
                                   C.el("p", {}, itemParts.more, " ", itemParts.download));
  }

  // Reads the next chunk of the items file: whole lines become rows; a
  // line cut at the chunk's end waits for the next.
  async function readItems() {
    const got = await readRange(page.job.items_url,
                                `bytes=${items.offset}-${items.offset + ITEMS_CHUNK - 1}`);
    if (got.status === 404) { items.missing = true; return false; }
    items.missing = false;
    if (got.status === 416) { if (got.total !== null) items.size = got.total; return false; }
    const bytes = got.status === 200 ? got.bytes.subarray(items.offset) : got.bytes;
    items.size = got.total;
    const joined = new Uint8Array(items.rest.length + bytes.length);
    joined.set(items.rest); joined.set(bytes, items.rest.length);
    items.offset += bytes.length;
    const atEnd = items.size !== null && items.offset >= items.size && page.job.state === "finished";
    const cut = atEnd ? joined.length : joined.lastIndexOf(10) + 1;
    items.rest = joined.slice(cut);
    for (const line of decoder.decode(joined.subarray(0, cut)).split("\n")) {
      if (!line.trim()) continue;
      let item;
      try { item = JSON.parse(line); } catch (e) { item = {"(not JSON)": line}; }
      items.rows.push(item);
    }
    return bytes.length > 0;
  }

  async function moreItems() {
    if (items.busy) return;
    items.busy = true;
    try {
      const wanted = items.shown + ITEMS_PAGE;
      while (items.rows.length < wanted) {
        if (!await readItems()) break;
      }
      items.shown = Math.min(wanted, items.rows.length);
      drawItems();
    } catch (error) {
      C.showError(itemParts.note, error);
    } finally {
      items.busy = false;
    }
  }

  function cellText(value) {
    if (value === null || value === undefined) return "";
    return typeof value === "object" ? JSON.stringify(value) : String(value);
  }

  function isObject(item) {
    return item !== null && typeof item === "object" && !Array.isArray(item);
  }

  function cell(label, value) {
    const text = cellText(value);
    return C.el("td", {"data-label": label, class: typeof value === "number" ? "num" : "cell",
                       title: text.length > 80 ? text.slice(0, 2000) : null}, text);
  }

  function drawItems() {
    const shown = items.rows.slice(0, items.shown);
    for (const item of shown) {
      if (isObject(item)) {
        for (const key of Object.keys(item)) if (!items.columns.includes(key)) items.columns.push(key);
      } else {
        items.values = true;
      }
    }
    const columns = items.columns;
    const head = C.el("thead", {}, C.el("tr", {}, C.el("th", {class: "num"}, "#"),
                                         items.values ? C.el("th", {}, "(value)") : null,
                                         columns.map((key) => C.el("th", {}, key))));
    const body = C.el("tbody", {});
    shown.forEach((item, n) => {
      const open = C.el("button", {type: "button", class: "expand", "aria-expanded": "false",
                                   "aria-label": `item ${n + 1} as JSON`}, `▸ ${n + 1}`);
      const row = C.el("tr", {class: "item", "data-n": String(n)},
        C.el("td", {class: "num"}, open),
        items.values ? cell("(value)", isObject(item) ? undefined : item) : null,
        columns.map((key) => cell(key, isObject(item) ? item[key] : undefined)));
      open.addEventListener("click", () => toggleItem(row, open, item,
                                                      columns.length + (items.values ? 2 : 1)));
      body.append(row);
    });
    itemParts.table.replaceChildren(head, body);
    itemParts.table.classList.toggle("cards-narrow", true);
    const total = page.stats && typeof page.stats.items === "number" ? page.stats.items : null;
    const more = items.rows.length > items.shown || (items.size !== null && items.offset < items.size) ||
      page.job.state === "running";
    itemParts.more.hidden = !more;
    itemParts.table.dataset.rows = String(items.shown);
    if (items.missing) {
      itemParts.note.textContent = page.job.state === "pending" ? "No items yet: the job has not started."
        : "No items file: the crawl wrote none.";
    } else if (!items.shown) {
      itemParts.note.textContent = page.job.state === "running"
        ? "No items written yet (Netweir writes them out in batches while it runs)." : "No items.";
    } else {
      itemParts.note.textContent = `The first ${C.number(items.shown)}` +
        (total !== null ? ` of ${C.number(total)} items` : " items") +
        (items.size !== null ? ` (${C.bytes(items.offset)} of ${C.bytes(items.size)} read)` : "") + ".";
    }
  }

  function toggleItem(row, button, item, span) {
    const next = row.nextElementSibling;
    if (next && next.classList.contains("item-json")) {
      next.remove();
      button.setAttribute("aria-expanded", "false");
      button.textContent = button.textContent.replace("▾", "▸");
      return;
    }
    row.after(C.el("tr", {class: "item-json"},
                   C.el("td", {colspan: String(span)}, C.el("pre", {class: "json"}, JSON.stringify(item, null, 2)))));
    button.setAttribute("aria-expanded", "true");
    button.textContent = button.textContent.replace("▸", "▾");
  }

  // -- live -------------------------------------------------------------------------

  function sameJob(entry) {
    return entry && typeof entry.id === "string" && entry.id.toLowerCase() === jobid.toLowerCase();
  }

  let statsPoll = 0;
  function heard(entry) {
    if (!sameJob(entry) || !page.job) return;
    const job = page.job;
    const was = job.state;
    const fields = ["state", "outcome", "reason", "exit_status", "health", "health_reasons",
                    "node", "pid", "at", "cancel_requested", "start_time", "end_time"];
    const before = JSON.stringify(fields.map((key) => job[key]));
    for (const key of fields) {
      if (key in entry) job[key] = entry[key];
    }
    const changed = JSON.stringify(fields.map((key) => job[key])) !== before;
    if (entry.stats) {
      page.stats = entry.stats;
      if (addPoint(entry.time, entry.stats)) drawProgress();
      // A stats snapshot: the log has likely grown too.
      if (job.state === "running" && Date.now() - statsPoll > 500) { statsPoll = Date.now(); pollLog(); }
    }
    if (was !== job.state) {
      if (job.state === "running") startFollowingLog();
      if (job.state === "finished") { finished().catch(failedReload); return; }
      refreshFacts();
    } else if (changed) {
      // Not at every stats event: a redraw takes a keyboard user's focus.
      drawHead(); drawFacts(); drawActions();
    }
  }

  // While the page is not live (/events refused), job.json now and then:
  // what the events would have said, the state above all (a job that ends
  // is read again whole, its last lines too).
  let jobPoll = null;
  function notLive() {
    if (jobPoll === null && page.job && page.job.state !== "finished") {
      jobPoll = setInterval(pollJob, JOB_POLL_MS);
    }
  }

  function liveAgain() {
    if (jobPoll !== null) { clearInterval(jobPoll); jobPoll = null; }
  }

  async function pollJob() {
    if (!page.job || page.job.state === "finished") { liveAgain(); return; }
    try {
      const answer = await C.get("job.json", {job: jobid, project});
      const entry = Object.assign({}, answer.job);
      delete entry.stats;     // the chart's points come from events alone
      heard(entry);
    } catch (error) {
      failedReload(error);
    }
  }

  // A failure of a reload, shown at the top of the page.
  function failedReload(error) {
    console.error(error);
    // One note, replaced: a pruned job fails every reload (each reconnection).
    const note = C.el("p", {class: "error reload-error", role: "alert"},
                      error instanceof Error ? error.message : String(error));
    const old = sections.head.querySelector(".reload-error");
    if (old) old.replaceWith(note); else sections.head.append(note);
  }

  async function finished() {
    await reloadJob();
    await loadStats();
    await finalLogRead();
    if (items.shown === 0 || items.missing) { items.shown = 0; await moreItems(); } else drawItems();
  }

  function refreshFacts() {
    drawHead(); drawFacts(); drawAttempts(); drawWhy(); drawActions();
  }

  async function reloadJob() {
    const answer = await C.get("job.json", {job: jobid, project});
    page.job = answer.job;
    refreshFacts();
  }

  // -- start ------------------------------------------------------------------------

  async function start() {
    frame();
    let answer;
    try {
      answer = await C.get("job.json", {job: jobid, project});
    } catch (error) {
      C.showError(C.main(), error);
      document.body.dataset.ready = "error";
      return;
    }
    page.job = answer.job;
    document.title = `Job ${page.job.id} · netweir-serve`;
    page.canWrite = await C.canWrite(page.job.project);
    drawLogFrame();
    drawItemsFrame();
    refreshFacts();
    C.follow({job: heard, lost: notLive, resync: () => {
      liveAgain();
      reloadJob().then(loadStats).then(pollLog).catch(failedReload);
    }});
    await Promise.all([loadStats(), loadLogTail().catch((e) => C.showError(logParts.note, e)),
                       moreItems()]);
    startFollowingLog();
    if (page.job.state === "finished" && location.hash === "#error") await goToError();
    document.body.dataset.ready = "1";
  }

  start();
})();
