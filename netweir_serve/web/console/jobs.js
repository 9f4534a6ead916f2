// The jobs page (/): running, queued and finished jobs, filtered and paged
// through listjobs.json (limit, before, next_before and its filters), live
// over /events, with a Run form and Cancel buttons for those who may write.
//
// The page asks for one page of finished jobs at a time (PAGE of them) and
// for the running and queued jobs (at most BUSY each), three requests, and
// never one per job: with 10,000 finished jobs in the table the first paint
// costs what a page of 50 costs. Everything that picks what is shown (the
// filters, the page's cursor, the sort) is in the address's query, so a
// filtered view can be bookmarked or sent, and Back goes to the view before.
"use strict";

(function () {
  const C = window.Console;
  const PAGE = 50;          // finished jobs a page
  const BUSY = 200;         // running or queued jobs shown at most
  const SPARK_POINTS = 60;  // items points kept per running job's sparkline
  const RUNNING_HISTORIES = 20;  // running jobs whose stats so far are asked for

  // listjobs.json's filters, as the address names them too.
  const FILTERS = ["project", "spider", "schedule", "outcome", "reason", "health", "node", "q"];
  // Filters only a finished job can match (a running one has no outcome):
  // with one of them the running and queued sections are left out.
  const FINISHED_ONLY = ["outcome", "reason", "health"];
  const OUTCOMES = ["finished", "failed", "cancelled", "lost"];
  const REASONS = ["exit 0", "exit 1", "signal 9", "signal 15", "cancel.json", "service stopped",
                   "timeout", "stalled", "expired", "memory", "not started", "node lost", "lost"];
  // One click from the front page: [label, the filters it sets].
  const QUICK = [["All", {}], ["Failed", {outcome: "failed"}], ["Degraded", {health: "degraded"}],
                 ["Cancelled", {outcome: "cancelled"}], ["Lost", {outcome: "lost"}]];

  // The finished table's columns: [key, label, value for sorting, numeric].
  const FINISHED_COLUMNS = [
    ["job", "Job", (j) => j.id.toLowerCase(), false],
    ["spider", "Spider", (j) => `${j.project}/${j.spider}`.toLowerCase(), false],
    ["outcome", "Outcome", (j) => `${j.outcome || ""} ${j.health || ""}`, false],
    ["ended", "Ended", (j) => at(j, "ended"), true],
    ["duration", "Duration", (j) => duration(j), true],
    ["items", "Items", (j) => count(j, "items"), true],
    ["pages", "Pages", (j) => count(j, "pages"), true],
    ["errors", "Errors", (j) => count(j, "errors"), true],
    ["node", "Node", (j) => (j.node || "").toLowerCase(), false],
  ];

  // What is shown: the jobs of each section, the page's cursors.
  const view = {
    running: [], pending: [], finished: [], morePending: false, moreRunning: false,
    next: null, newer: 0, filters: {}, before: null, sort: null,
  };
  const spark = new Map();   // job id (folded) -> [[time, items]]
  let writes = new Set();    // projects (folded) whose buttons are shown

  // -- values ---------------------------------------------------------------------

  const fold = (text) => String(text || "").toLowerCase();
  const key = (job) => fold(job.id);
  function at(job, which) { return job.at && typeof job.at[which] === "number" ? job.at[which] : null; }
  function duration(job) {
    const start = at(job, "started"), end = at(job, "ended");
    return start !== null && end !== null ? end - start : null;
  }
  // A job's count: the listing's (items, pages, errors of a finished job),
  // else its latest stats from /events (Netweir's names: fetched for pages).
  function count(job, name) {
    if (typeof job[name] === "number") return job[name];
    const stats = job.stats || {};
    if (name === "pages") return typeof stats.fetched === "number" ? stats.fetched : null;
    if (name === "errors") {
      const parts = ["failed", "callback_errors"].filter((k) => typeof stats[k] === "number");
      return parts.length ? parts.reduce((sum, k) => sum + stats[k], 0) : null;
    }
    return typeof stats[name] === "number" ? stats[name] : null;
  }

  // Whether ``job`` (a listing's entry or an event's) passes the filters,
  // as listjobs.json judges it (web/paging.py): names compared folded, q as
  // text anywhere in the id.
  function matches(job) {
    const f = view.filters;
    if (f.q && !fold(job.id).includes(fold(f.q))) return false;
    for (const name of FILTERS) {
      if (name === "q" || !f[name]) continue;
      if (job[name] === null || job[name] === undefined || fold(job[name]) !== fold(f[name])) return false;
    }
    return true;
  }

  // -- the address ----------------------------------------------------------------

  function readAddress() {
    const search = new URLSearchParams(location.search);
    view.filters = {};
    for (const name of FILTERS) {
      const value = (search.get(name) || "").trim();
      if (value) view.filters[name] = value;
    }
    view.before = search.get("before") || null;
    const sort = search.get("sort") || "";
    const column = FINISHED_COLUMNS.find(([name]) => name === sort.replace(/^-/, ""));
    view.sort = column ? {column: column[0], descending: sort.startsWith("-")} : null;
  }

  // The address of a view: ``filters``, the page ``before``, ``sort`` text.
  function addressOf(filters, before, sort) {
    return "/" + C.query(Object.assign({}, filters, {before: before || null, sort: sort || null}));
  }

  function sortText() {
    return view.sort ? (view.sort.descending ? "-" : "") + view.sort.column : null;
  }

  // Goes to another view: a new history entry (Back returns), then reads it.
  // ``stack``: the cursors of the pages before it (for Previous).
  function go(address, stack) {
    history.pushState({stack: stack || []}, "", address);
    load();
  }

  function stack() { return (history.state && history.state.stack) || []; }

  // -- asking the API -------------------------------------------------------------

  let generation = 0;   // answers to an earlier view are dropped

  function ask(state, limit, before) {
    const params = Object.assign({}, view.filters, {state, limit, before: before || null});
    return C.get("listjobs.json", params);
  }

  // The last event of each job (folded id): {job, at}, ``at`` when it came.
  const heard = new Map();

  // ``jobs``, a list of ``state`` a listing answered, with what events said
  // since it was asked (``asked``, a time): a job that moved on meanwhile
  // leaves it, one that came into it joins it (first: the newest).
  function reconcile(state, jobs, asked) {
    const listed = new Set(jobs.map(key));
    const since = (job) => {
      const last = heard.get(key(job));
      return last && last.at >= asked ? last.job : null;
    };
    const kept = jobs.filter((job) => !since(job) || since(job).state === state)
      .map((job) => since(job) || job);
    if (state === "finished" && view.before) return kept;   // newer than this page
    const joined = [];
    for (const [id, last] of heard) {
      if (last.at >= asked && last.job.state === state && !listed.has(id) && matches(last.job)) {
        joined.push(last.job);
      }
    }
    return state === "finished" ? joined.reverse().concat(kept) : kept.concat(joined);
  }

  // Reads the view from the address and asks for its three lists.
  function load() {
    readAddress();
    const mine = ++generation;
    const asked = Date.now();
    view.newer = 0;
    drawFilters();
    const finishedOnly = FINISHED_ONLY.some((name) => view.filters[name]);
    sections.running.hidden = sections.pending.hidden = finishedOnly;
    const answers = [ask("finished", PAGE, view.before).then((answer) => {
      if (mine !== generation) return;
      view.finished = reconcile("finished", answer.finished, asked);
      view.next = answer.next_before;
      performance.mark("jobs:finished-answer");
      drawFinished();
      performance.mark("jobs:finished-drawn");
    }, (error) => mine === generation && C.showError(sections.finished.body, error))];
    if (finishedOnly) {
      view.running = [];
      view.pending = [];
    } else {
      answers.push(ask("running", BUSY).then((answer) => {
        if (mine !== generation) return;
        view.running = reconcile("running", answer.running, asked);
        view.moreRunning = answer.next_before !== null;
        drawRunning();
        runningStats(view.running.slice(0, RUNNING_HISTORIES).map((job) => job.id), mine);
      }, (error) => mine === generation && C.showError(sections.running.body, error)));
      answers.push(ask("pending", BUSY).then((answer) => {
        if (mine !== generation) return;
        view.pending = reconcile("pending", answer.pending, asked);
        view.morePending = answer.next_before !== null;
        drawPending();
      }, (error) => mine === generation && C.showError(sections.pending.body, error)));
    }
    return Promise.all(answers);
  }

  // The running jobs' stats so far (their counts and sparklines), one
  // request at a time once the lists are drawn: the listing has no stats,
  // and /events brings the next only when the crawl writes them (5 s).
  async function runningStats(ids, mine) {
    for (const id of ids) {
      if (mine !== generation) return;
      let answer;
      try {
        answer = await C.get("jobstats.json", {job: id, history: 1});
      } catch (error) {
        continue;   // ended and pruned, or on a node that is down: no line
      }
      const job = view.running.find((one) => key(one) === key({id}));
      if (!job || answer.state !== "running") continue;
      const points = (answer.history || []).filter((point) => point.stats &&
        typeof point.stats.items === "number").map((point) => [point.time, point.stats.items]);
      const later = spark.get(key(job)) || [];
      const merged = points.filter((point) => !later.length || point[0] < later[0][0]).concat(later);
      spark.set(key(job), merged.slice(-SPARK_POINTS));
      if (!job.stats && answer.stats) job.stats = answer.stats;
      drawRunning();
    }
  }

  // -- live -----------------------------------------------------------------------

  // A job changed (an /events "job"): it leaves the section it was in and
  // joins the one of its state, if it passes the filters.
  function jobEvent(job) {
    const id = key(job);
    heard.set(id, {job, at: Date.now()});
    if (heard.size > 1000) heard.delete(heard.keys().next().value);
    if (job.state === "running") {
      const items = count(job, "items");
      if (items !== null) {
        const points = spark.get(id) || [];
        points.push([job.time, items]);
        if (points.length > SPARK_POINTS) points.splice(0, points.length - SPARK_POINTS);
        spark.set(id, points);
      }
    } else {
      spark.delete(id);
    }
    const was = {};
    let place = -1;   // where a finished job shown already stood
    for (const state of ["running", "pending", "finished"]) {
      const index = view[state].findIndex((one) => key(one) === id);
      if (state === "finished") place = index;
      if (index >= 0) view[state].splice(index, 1);
      was[state] = index >= 0;
    }
    const shown = matches(job) && !(job.state !== "finished" && sections.running.hidden);
    if (shown && job.state === "running") {
      view.running.push(job);
      view.running.sort((a, b) => (at(a, "started") || 0) - (at(b, "started") || 0));
    } else if (shown && job.state === "pending") {
      // Queue order: higher priority first, then in the order queued.
      view.pending.push(job);
      view.pending.sort((a, b) => (b.priority || 0) - (a.priority || 0) ||
                        (at(a, "queued") || 0) - (at(b, "queued") || 0));
    } else if (shown && job.state === "finished") {
      if (place >= 0) {
        view.finished.splice(place, 0, job);
      } else if (!view.before) {
        // The first page grows rather than drops its last row: the next
        // page's cursor was given after that row, which would then be
        // shown on neither page.
        view.finished.unshift(job);
      } else {
        view.newer += 1;
      }
    }
    if (was.running || job.state === "running") drawRunning();
    if (was.pending || job.state === "pending") drawPending();
    if (was.finished || job.state === "finished") drawFinished();
  }

  // -- drawing --------------------------------------------------------------------

  const root = C.el("div", {class: "jobs"});
  const sections = {};

  function section(id, title) {
    const heading = C.el("h2", {id: id + "-title"}, title, " ", C.el("span", {class: "count muted"}));
    const body = C.el("div", {class: "section-body"});
    const node = C.el("section", {id, "aria-labelledby": id + "-title"}, heading, body);
    return {node, heading, body, count: heading.querySelector(".count"), set hidden(v) { node.hidden = v; },
            get hidden() { return node.hidden; }};
  }

  function jobLink(job) {
    return C.el("a", {href: C.jobHref(job.project, job.id), class: "job-link"}, job.id);
  }

  function spiderLink(job) {
    return C.el("span", {class: "spider"},
                C.el("span", {class: "muted"}, job.project + "/"),
                C.el("a", {href: C.spiderHref(job.project, job.spider)}, job.spider));
  }

  function cell(label, content, extra) {
    return C.el("td", Object.assign({"data-label": label || null}, extra || {}), content);
  }

  function numberCell(label, value, unit) {
    return cell(label, value === null ? "–" : C.number(value) + (unit ? " " + unit : ""),
                {class: "num"});
  }

  function when(seconds) {
    if (seconds === null) return C.el("span", {class: "muted"}, "–");
    return C.el("span", {class: "when"}, C.time(seconds), " ",
                C.el("span", {class: "muted ago"}, C.ago(seconds)));
  }

  function table(name, columns, rows) {
    const head = C.el("tr", null, columns.map((column) =>
      typeof column === "string" ? C.el("th", {scope: "col"}, column) : column));
    return C.el("table", {class: "cards-narrow jobs-table", id: name + "-table"},
                C.el("thead", null, head), C.el("tbody", null, rows));
  }

  function cancelButton(job) {
    if (!writes.has(fold(job.project))) return null;
    const kill = job.state === "running" && job.cancel_requested;
    const button = C.el("button", {type: "button", class: "danger cancel",
                                   title: kill ? "Cancel asked: kill it now (a second cancel)" : null},
                        kill ? "Kill" : "Cancel");
    button.addEventListener("click", async () => {
      button.disabled = true;
      const form = {project: job.project, job: job.id};
      if (kill) form.signal = "KILL";
      try {
        await C.post("cancel.json", form);
        button.textContent = kill ? "Killing…" : "Cancelling…";
      } catch (error) {
        button.disabled = false;
        const note = button.parentNode.querySelector(".field-error") ||
          C.el("span", {class: "field-error", role: "alert"});
        note.textContent = error.message;
        button.after(note);
      }
    });
    return button;
  }

  // A running job's items since the page opened, as a line.
  function sparkline(job) {
    const points = spark.get(key(job)) || [];
    if (points.length < 2) return C.el("span", {class: "muted"}, "–");
    const width = 90, height = 22;
    const t0 = points[0][0], t1 = Math.max(points[points.length - 1][0], t0 + 1);
    const low = points[0][1], high = Math.max(low + 1, ...points.map((p) => p[1]));
    const xy = points.map(([t, v]) =>
      `${((t - t0) / (t1 - t0) * (width - 2) + 1).toFixed(1)},` +
      `${(height - 1 - (v - low) / (high - low) * (height - 2)).toFixed(1)}`).join(" ");
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.setAttribute("width", width);
    svg.setAttribute("height", height);
    svg.setAttribute("class", "spark");
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", `items: ${C.number(points[0][1])} to ${C.number(points[points.length - 1][1])}`);
    const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    line.setAttribute("points", xy);
    svg.append(line);
    return svg;
  }

  function drawRunning() {
    const s = sections.running;
    s.count.textContent = `(${view.running.length}${view.moreRunning ? "+" : ""})`;
    if (!view.running.length) {
      s.body.replaceChildren(C.el("p", {class: "muted empty"}, "No job runs now."));
      return;
    }
    const now = Date.now() / 1000;
    const rows = view.running.map((job) => C.el("tr", {"data-job": job.id},
      cell("Job", jobLink(job), {class: "id"}),
      cell("Spider", spiderLink(job)),
      cell("Started", when(at(job, "started"))),
      cell("Runtime", C.duration(at(job, "started") === null ? null : now - at(job, "started")),
           {class: "num"}),
      numberCell("Items", count(job, "items")),
      numberCell("Pages", count(job, "pages")),
      cell("Items over time", sparkline(job)),
      cell("Node", job.node || "–"),
      cell("", cancelButton(job), {class: "actions"})));
    s.body.replaceChildren(table("running", ["Job", "Spider", "Started",
      C.el("th", {class: "num"}, "Runtime"), C.el("th", {class: "num"}, "Items"),
      C.el("th", {class: "num"}, "Pages"), "Items over time", "Node", ""], rows),
      view.moreRunning ? C.el("p", {class: "muted"}, `The first ${BUSY} are shown.`) : "");
  }

  function drawPending() {
    const s = sections.pending;
    s.count.textContent = `(${view.pending.length}${view.morePending ? "+" : ""})`;
    if (!view.pending.length) {
      s.body.replaceChildren(C.el("p", {class: "muted empty"}, "The queue is empty."));
      return;
    }
    const rows = view.pending.map((job) => C.el("tr", {"data-job": job.id},
      cell("Job", jobLink(job), {class: "id"}),
      cell("Spider", spiderLink(job)),
      numberCell("Priority", typeof job.priority === "number" ? job.priority : null),
      cell("Queued", when(at(job, "queued"))),
      cell("Waiting for", job.waiting_for || (job.not_before ? `its retry time` : "a free slot"),
           {class: "why"}),
      cell("", cancelButton(job), {class: "actions"})));
    s.body.replaceChildren(table("pending", ["Job", "Spider", C.el("th", {class: "num"}, "Priority"),
      "Queued", "Waiting for", ""], rows),
      view.morePending ? C.el("p", {class: "muted"}, `The first ${BUSY} are shown.`) : "");
  }

  function outcomeCell(job) {
    const parts = [C.el("span", {class: `chip ${job.outcome || ""}`}, job.outcome || "–")];
    if (job.reason) parts.push(" ", C.el("span", {class: "muted reason"}, job.reason));
    if (job.health === "degraded") {
      parts.push(" ", C.el("span", {class: "chip degraded", title: (job.health_reasons || []).join("; ") || null},
                           "degraded"));
    }
    return cell("Outcome", parts, {class: "outcome"});
  }

  function sortHeader([name, label, , numeric]) {
    const active = view.sort && view.sort.column === name;
    const descending = active ? view.sort.descending : null;
    // A first click sorts numbers and times largest first, text A to Z.
    const next = active ? !descending : numeric;
    const button = C.el("button", {type: "button", class: "sort", "data-sort": name,
                                   title: `Sort this page by ${label.toLowerCase()}`},
                        label, active ? (descending ? " ▼" : " ▲") : "");
    button.addEventListener("click", () => {
      const sort = (next ? "-" : "") + name;
      history.replaceState(history.state, "", addressOf(view.filters, view.before, sort));
      readAddress();
      drawFinished();
    });
    return C.el("th", {scope: "col", class: numeric && name !== "ended" ? "num" : null,
                       "aria-sort": active ? (descending ? "descending" : "ascending") : null}, button);
  }

  function sorted(jobs) {
    if (!view.sort) return jobs;
    const [, , value] = FINISHED_COLUMNS.find(([name]) => name === view.sort.column);
    const sign = view.sort.descending ? -1 : 1;
    return jobs.map((job, index) => [job, value(job), index]).sort((a, b) => {
      // Jobs without a value go last either way; ties keep the server's order.
      if (a[1] === null && b[1] !== null) return 1;
      if (b[1] === null && a[1] !== null) return -1;
      if (a[1] < b[1]) return -sign;
      if (a[1] > b[1]) return sign;
      return a[2] - b[2];
    }).map(([job]) => job);
  }

  function drawFinished() {
    const s = sections.finished;
    const page = stack().length + 1;
    s.count.textContent = view.finished.length
      ? `(page ${page}${view.sort ? ", this page sorted by " + view.sort.column : ""})` : "";
    const parts = [];
    if (view.newer) {
      parts.push(C.el("p", {class: "newer"}, `${view.newer} more finished since this page was read: `,
                      C.el("a", {href: addressOf(view.filters, null, sortText()), class: "to-newest"},
                           "show the newest")));
    }
    if (!view.finished.length) {
      parts.push(C.el("p", {class: "muted empty"},
                      Object.keys(view.filters).length ? "No finished job matches these filters."
                                                       : "No job has finished yet."));
    } else {
      const rows = sorted(view.finished).map((job) => C.el("tr", {
        "data-job": job.id, class: job.health === "degraded" ? "degraded" : null},
        cell("Job", jobLink(job), {class: "id"}),
        cell("Spider", spiderLink(job)),
        outcomeCell(job),
        cell("Ended", when(at(job, "ended"))),
        cell("Duration", C.duration(duration(job)), {class: "num"}),
        numberCell("Items", count(job, "items")),
        numberCell("Pages", count(job, "pages")),
        numberCell("Errors", count(job, "errors")),
        cell("Node", job.node || "–", {class: "node"})));
      parts.push(C.el("div", {class: "scroll"}, table("finished", FINISHED_COLUMNS.map(sortHeader), rows)));
    }
    parts.push(pager());
    s.body.replaceChildren(...parts);
  }

  function pager() {
    const earlier = stack();
    const newest = C.el("button", {type: "button", class: "newest", disabled: !view.before}, "Newest");
    newest.addEventListener("click", () => go(addressOf(view.filters, null, sortText()), []));
    const previous = C.el("button", {type: "button", class: "previous", disabled: !view.before}, "← Previous");
    previous.addEventListener("click", () => {
      // Back to the page before: its cursor is the stack's last (null for
      // the first page); a page opened from a bookmark has none, and goes
      // to the newest.
      const cursors = earlier.slice();
      const before = cursors.length ? cursors.pop() : null;
      go(addressOf(view.filters, before, sortText()), cursors);
    });
    const next = C.el("button", {type: "button", class: "next", disabled: !view.next}, "Next →");
    next.addEventListener("click", () =>
      go(addressOf(view.filters, view.next, sortText()), earlier.concat([view.before])));
    return C.el("nav", {class: "pager", "aria-label": "finished jobs pages"}, newest, previous, next,
                C.el("span", {class: "muted"}, `${PAGE} a page, newest first`));
  }

  // -- filters --------------------------------------------------------------------

  let filterForm = null;
  let quickLinks = null;

  function field(label, name, control) {
    control.name = name;
    control.id = "filter-" + name;
    return C.el("label", {for: control.id}, label, control);
  }

  function choice(options, empty) {
    return C.el("select", null, C.el("option", {value: ""}, empty),
                options.map((value) => C.el("option", {value}, value)));
  }

  function makeFilters() {
    const list = (id, values) => C.el("datalist", {id}, values.map((value) => C.el("option", {value})));
    const text = (placeholder, listId) => C.el("input", {type: "search", placeholder, list: listId || null,
                                                         autocomplete: "off", spellcheck: "false"});
    filterForm = C.el("form", {class: "filters", method: "get", action: "/", role: "search"},
      field("Project", "project", choice([], "any")),
      field("Spider", "spider", text("any")),
      field("Schedule", "schedule", text("any")),
      field("Outcome", "outcome", choice(OUTCOMES, "any")),
      field("Reason", "reason", text("any", "reasons")),
      field("Health", "health", choice(["healthy", "degraded"], "any")),
      field("Node", "node", text("any")),
      field("Job id contains", "q", text("text")),
      list("reasons", REASONS),
      C.el("button", {type: "submit"}, "Apply"),
      C.el("a", {href: "/", class: "button clear"}, "Clear"));
    filterForm.addEventListener("submit", (event) => {
      event.preventDefault();
      const filters = {};
      for (const name of FILTERS) {
        const value = filterForm.elements[name].value.trim();
        if (value) filters[name] = value;
      }
      go(addressOf(filters, null, sortText()), []);
    });
    for (const select of filterForm.querySelectorAll("select")) {
      select.addEventListener("change", () => filterForm.requestSubmit());
    }
    filterForm.querySelector("a.clear").addEventListener("click", (event) => {
      event.preventDefault();
      go("/", []);
    });
    quickLinks = C.el("nav", {class: "quick", "aria-label": "quick filters"});
    const box = C.el("details", {class: "filter-box"}, C.el("summary", null, "Filters"), filterForm);
    if (!matchMedia("(max-width: 40rem)").matches) box.open = true;
    return [quickLinks, box];
  }

  function drawFilters() {
    for (const name of FILTERS) {
      const control = filterForm.elements[name];
      const value = view.filters[name] || "";
      if (control.tagName === "SELECT" && value &&
          !Array.from(control.options).some((option) => option.value === value)) {
        control.append(C.el("option", {value}, value));
      }
      control.value = value;
    }
    if (Object.keys(view.filters).length) filterForm.parentNode.open = true;
    quickLinks.replaceChildren(...QUICK.map(([label, set]) => {
      // Keeps the project and the text; sets the outcome or health.
      const filters = Object.assign({}, view.filters, {outcome: null, health: null}, set);
      for (const name of Object.keys(filters)) if (!filters[name]) delete filters[name];
      const current = FINISHED_ONLY.every((name) => (view.filters[name] || "") === (filters[name] || ""));
      const link = C.el("a", {href: addressOf(filters, null, sortText()), class: "quick-filter",
                              "aria-current": current ? "true" : null}, label);
      link.addEventListener("click", (event) => {
        if (event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey) return;
        event.preventDefault();
        go(link.getAttribute("href"), []);
      });
      return link;
    }));
  }

  async function fillProjects() {
    let projects = [];
    try {
      projects = (await C.get("listprojects.json")).projects;
    } catch (error) {
      return;
    }
    const select = filterForm.elements.project;
    const chosen = select.value;
    for (const name of projects) {
      if (!Array.from(select.options).some((option) => option.value === name)) {
        select.append(C.el("option", {value: name}, name));
      }
    }
    select.value = chosen;
    return projects;
  }

  // -- the Run form ---------------------------------------------------------------

  function makeRunForm(projects) {
    const mine = projects.filter((name) => writes.has(fold(name)));
    if (!mine.length) return null;
    const project = C.el("select", {name: "project", id: "run-project", required: true},
                         mine.map((name) => C.el("option", {value: name}, name)));
    const spider = C.el("select", {name: "spider", id: "run-spider", required: true});
    const submit = C.el("button", {type: "submit", disabled: true}, "Run");
    const result = C.el("span", {class: "result", "aria-live": "polite"});
    const form = C.el("form", {class: "inline run", id: "run"},
                      C.el("label", {for: "run-project"}, "Project", project),
                      C.el("label", {for: "run-spider"}, "Spider", spider),
                      submit, result);
    async function spiders() {
      submit.disabled = true;
      spider.replaceChildren(C.el("option", {value: ""}, "choose a spider"));
      try {
        const answer = await C.get("listspiders.json", {project: project.value});
        spider.append(...answer.spiders.map((name) => C.el("option", {value: name}, name)));
      } catch (error) {
        C.formError(form, error);
      }
    }
    project.addEventListener("change", spiders);
    spider.addEventListener("change", () => { submit.disabled = !spider.value; });
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      C.formError(form, null);
      submit.disabled = true;
      result.replaceChildren("queuing…");
      try {
        const answer = await C.post("schedule.json", {project: project.value, spider: spider.value});
        result.replaceChildren("queued ", C.el("a", {href: C.jobHref(project.value, answer.jobid)},
                                               answer.jobid));
      } catch (error) {
        result.replaceChildren();
        C.formError(form, error);
      } finally {
        submit.disabled = !spider.value;
      }
    });
    spiders();
    return C.el("section", {id: "run-section", "aria-labelledby": "run-title"},
                C.el("h2", {id: "run-title"}, "Run a spider"), form);
  }

  // -- start ----------------------------------------------------------------------

  const STYLE = `
#jobs-console .quick { display: flex; flex-wrap: wrap; gap: .4rem; margin: 0 0 .6rem; }
#jobs-console .quick a { padding: .2rem .7rem; border: 1px solid var(--line); border-radius: 999px;
  text-decoration: none; }
#jobs-console .quick a[aria-current] { background: var(--chip); color: var(--fg); font-weight: 600; }
#jobs-console details.filter-box > summary { cursor: pointer; color: var(--muted); margin-bottom: .4rem; }
#jobs-console .filters input { width: 9rem; }
#jobs-console .filters label { min-width: 0; }
#jobs-console .filters .button { align-self: end; }
#jobs-console h2 .count { font-weight: normal; font-size: .9em; }
#jobs-console td .ago { font-size: .85em; }
#jobs-console td.actions { text-align: right; white-space: nowrap; }
#jobs-console td.why { overflow-wrap: anywhere; }
#jobs-console svg.spark polyline { fill: none; stroke: var(--accent); stroke-width: 1.5; }
#jobs-console .newer { background: var(--panel); border: 1px solid var(--line); padding: .3rem .6rem;
  border-radius: 6px; }
#jobs-console .scroll { overflow-x: auto; }
@media (max-width: 40rem) {
  #jobs-console .filters input, #jobs-console .filters select { width: 100%; }
  #jobs-console .filters label { flex: 1 1 45%; }
  #jobs-console td.actions { text-align: left; }
  #jobs-console td .when { white-space: normal; }
}`;

  async function start() {
    performance.mark("jobs:start");
    const place = document.getElementById("jobs-console");
    document.head.append(C.el("style", null, STYLE));
    sections.running = section("running", "Running");
    sections.pending = section("queued", "Queued");
    sections.finished = section("finished", "Finished");
    const [quick, filters] = makeFilters();
    const runPlace = C.el("div", {id: "run-place"});
    root.append(C.el("h1", null, "Jobs"), quick, filters, runPlace, sections.running.node,
                sections.pending.node, sections.finished.node);
    place.replaceChildren(root);
    readAddress();
    if (!history.state) history.replaceState({stack: []}, "");
    window.addEventListener("popstate", () => load());
    // The jobs first: who is looking only adds the buttons.
    performance.mark("jobs:asking");
    const loaded = load();
    C.follow({job: jobEvent, resync: () => load()});
    // Then the rest, once the lists came: a browser opens few connections
    // to one address at a time, and the service takes 8 from one.
    await loaded;
    const me = await C.whoami();
    writes = new Set((me.writes || []).map(fold));
    const projects = await fillProjects();
    drawRunning();
    drawPending();
    const form = makeRunForm(projects || []);
    if (form) runPlace.replaceChildren(form);
    // Drawn with what who is looking may do (tests wait for this).
    place.dataset.ready = "true";
    // Runtimes and "3 min ago" move on without events.
    setInterval(() => { if (view.running.length) drawRunning(); }, 5000);
  }

  document.addEventListener("DOMContentLoaded", start);
})();
