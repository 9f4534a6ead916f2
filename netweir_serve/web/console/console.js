// What every console page shares: asking the API, making elements, showing
// times, numbers and errors, knowing who is looking, following /events.
// Each page's own script (jobs.js, job.js...) uses window.Console.
"use strict";

(function () {
  const C = {};

  // -- the API ------------------------------------------------------------------

  // An answer the API refused: ``status`` (HTTP), ``message`` (its sentence),
  // ``field``: the parameter the sentence names ("parameter 'cron': ..."), if any.
  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
      const named = /(?:parameter|setting|argument) '([^']+)'/.exec(message) ||
        /^'?([a-z_]+)'?:/.exec(message);
      this.field = named ? named[1] : null;
    }
  }
  C.ApiError = ApiError;

  function query(params) {
    const search = new URLSearchParams();
    for (const [key, value] of Object.entries(params || {})) {
      if (value === null || value === undefined || value === "") continue;
      for (const one of Array.isArray(value) ? value : [value]) search.append(key, one);
    }
    const text = search.toString();
    return text ? "?" + text : "";
  }
  C.query = query;

  async function answerOf(response) {
    let body = null;
    try { body = await response.json(); } catch (e) { body = null; }
    if (!response.ok || (body && body.status === "error")) {
      const message = body && body.message ? body.message : `${response.status} ${response.statusText}`;
      throw new ApiError(response.status, message);
    }
    return body;
  }

  // GET /PATH?params, its JSON; ApiError when refused.
  C.get = async function (path, params) {
    return answerOf(await fetch("/" + path + query(params), {credentials: "same-origin"}));
  };

  // POST /PATH with form data (an object, or a FormData), its JSON.
  C.post = async function (path, form) {
    const body = new URLSearchParams();
    const pairs = form instanceof FormData ? form.entries() : Object.entries(form || {});
    for (const [key, value] of pairs) {
      if (value === null || value === undefined) continue;
      for (const one of Array.isArray(value) ? value : [value]) body.append(key, one);
    }
    return answerOf(await fetch("/" + path, {
      method: "POST", credentials: "same-origin", body,
      headers: {"content-type": "application/x-www-form-urlencoded"},
    }));
  };

  // -- who is looking -----------------------------------------------------------

  let whoami = null;
  // {name, role, projects, writes, shared}: writes lists the projects whose
  // buttons are shown (an operator's, an admin's; none for a viewer).
  C.whoami = function () {
    if (!whoami) {
      whoami = C.get("whoami.json").catch(() => ({name: null, role: "viewer", projects: [],
                                                    writes: [], shared: false}));
      whoami.then((me) => {
        const who = document.getElementById("who");
        if (who && me.name) who.textContent = `${me.name} (${me.role})`;
      });
    }
    return whoami;
  };
  C.canWrite = async function (project) {
    const me = await C.whoami();
    return me.writes.some((name) => name.toLowerCase() === String(project).toLowerCase());
  };

  // -- elements -----------------------------------------------------------------

  // el("a", {href: "/x", class: "y", onclick: f}, "text", child...)
  C.el = function (tag, attributes, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attributes || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key.startsWith("on") && typeof value === "function") node.addEventListener(key.slice(2), value);
      else if (key === "dataset") Object.assign(node.dataset, value);
      else node.setAttribute(key, value === true ? "" : value);
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  };

  C.main = () => document.getElementById("main");
  C.data = (name) => document.body.dataset[name];

  C.jobHref = (project, job) => `/job/${encodeURIComponent(project)}/${encodeURIComponent(job)}`;
  C.spiderHref = (project, spider) =>
    `/spider/${encodeURIComponent(project)}/${encodeURIComponent(spider)}`;

  // A message in ``place`` (an element): ApiError's sentence, or another's.
  C.showError = function (place, error) {
    place.replaceChildren(C.el("p", {class: "error", role: "alert"},
                               error instanceof Error ? error.message : String(error)));
  };

  // The API's refusal shown beside the form's field it names (or at the
  // form's foot); clears earlier ones. Returns the element it wrote in.
  C.formError = function (form, error) {
    for (const old of form.querySelectorAll(".field-error")) old.remove();
    for (const old of form.querySelectorAll("[aria-invalid]")) old.removeAttribute("aria-invalid");
    if (!error) return null;
    const message = error instanceof Error ? error.message : String(error);
    const field = error.field && form.elements.namedItem(error.field);
    const note = C.el("span", {class: "field-error", role: "alert"}, message);
    if (field && field.insertAdjacentElement) {
      field.setAttribute("aria-invalid", "true");
      (field.closest("label") || field).insertAdjacentElement("afterend", note);
    } else {
      form.append(note);
    }
    return note;
  };

  // -- numbers and times --------------------------------------------------------

  const numberFormat = new Intl.NumberFormat();
  C.number = (n) => (typeof n === "number" && isFinite(n)) ? numberFormat.format(n) : "–";
  C.bytes = function (n) {
    if (typeof n !== "number" || !isFinite(n)) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let unit = 0;
    while (Math.abs(n) >= 1024 && unit < units.length - 1) { n /= 1024; unit += 1; }
    return (unit ? n.toFixed(n < 10 ? 1 : 0) : String(n)) + " " + units[unit];
  };
  C.rate = (perSecond, unit) =>
    (typeof perSecond === "number" && isFinite(perSecond))
      ? `${perSecond >= 10 ? Math.round(perSecond) : perSecond.toFixed(1)} ${unit}/s` : "–";
  // Seconds as "1 h 02 min", "3 min 05 s", "12 s".
  C.duration = function (seconds) {
    if (typeof seconds !== "number" || !isFinite(seconds) || seconds < 0) return "–";
    seconds = Math.round(seconds);
    const h = Math.floor(seconds / 3600), m = Math.floor(seconds / 60) % 60, s = seconds % 60;
    const two = (n) => String(n).padStart(2, "0");
    if (h) return `${h} h ${two(m)} min`;
    if (m) return `${m} min ${two(s)} s`;
    return `${s} s`;
  };
  C.ago = function (seconds) {
    const delta = Date.now() / 1000 - seconds;
    const future = delta < 0, d = Math.abs(delta);
    let text;
    if (d < 45) text = `${Math.round(d)} s`;
    else if (d < 2700) text = `${Math.round(d / 60)} min`;
    else if (d < 86400 * 1.5) text = `${Math.round(d / 3600)} h`;
    else text = `${Math.round(d / 86400)} days`;
    return future ? `in ${text}` : `${text} ago`;
  };
  // An epoch time (seconds) or ISO 8601 text as a <time>: the browser's
  // zone on the page, UTC on hover; ``relative`` adds "3 min ago".
  C.time = function (value, relative) {
    const seconds = typeof value === "number" ? value : (value ? Date.parse(value) / 1000 : NaN);
    if (!isFinite(seconds)) return C.el("span", {class: "time none"}, "–");
    const date = new Date(seconds * 1000);
    const two = (n) => String(n).padStart(2, "0");
    const local = `${date.getFullYear()}-${two(date.getMonth() + 1)}-${two(date.getDate())} ` +
      `${two(date.getHours())}:${two(date.getMinutes())}:${two(date.getSeconds())}`;
    const utc = date.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
    return C.el("time", {datetime: date.toISOString(), title: utc, class: "time"},
                relative ? `${C.ago(seconds)}` : local);
  };

  // -- live: /events ------------------------------------------------------------

  // While /events is closed for good (the service refused the stream: it
  // takes 4 from one address, see web/limits.py, and EventSource never
  // retries an HTTP error), the page asks again after these many seconds,
  // doubling up to the last.
  const FOLLOW_RETRY_S = [5, 10, 20, 40, 60];

  // Follows /events; ``handlers``: {job(entry), schedule(entry), resync(),
  // lost()}. Shows the stream's state in the bar. EventSource reconnects by
  // itself after a dropped stream ("reconnecting…"); a refused one is closed
  // ("not live": ``lost`` is called, so a page may poll meanwhile) and opened
  // again by this, later and later. Every reconnection is a resync (changes
  // may have been missed).
  C.follow = function (handlers) {
    const live = document.getElementById("live");
    const say = (text, state) => { if (live) { live.textContent = text; live.dataset.state = state; } };
    let opened = false, retries = 0, source = null;
    const connect = () => {
      source = new EventSource("/events");
      source.addEventListener("open", () => {
        say("live", "live");
        if (live) live.removeAttribute("title");
        retries = 0;
        if (opened && handlers.resync) handlers.resync();
        opened = true;
      });
      source.addEventListener("error", () => {
        if (source.readyState !== EventSource.CLOSED) { say("reconnecting…", "down"); return; }
        const wait = FOLLOW_RETRY_S[Math.min(retries, FOLLOW_RETRY_S.length - 1)];
        retries += 1;
        say("not live", "off");
        if (live) live.title = `the service refused the event stream; trying again in ${wait} s`;
        // A later open is a reconnection: whatever changed meanwhile is read again.
        opened = true;
        if (handlers.lost) { try { handlers.lost(); } catch (e) { console.error(e); } }
        setTimeout(connect, wait * 1000);
      });
      for (const kind of ["job", "schedule"]) {
        if (!handlers[kind]) continue;
        source.addEventListener(kind, (event) => {
          try { handlers[kind](JSON.parse(event.data)); } catch (e) { console.error(e); }
        });
      }
      if (handlers.resync) source.addEventListener("resync", () => handlers.resync());
    };
    connect();
    return {get live() { return source.readyState === EventSource.OPEN; }};
  };

  // -- charts -------------------------------------------------------------------

  // A uPlot time chart in ``place`` of ``series`` ([{label, values, unit}])
  // over ``times`` (epoch seconds); colours follow the light or dark theme.
  const PALETTE = ["#2f7ed8", "#d9822b", "#c23c3c", "#2e9e6a", "#8e5ec4"];
  C.chart = function (place, times, series, options) {
    options = options || {};
    const width = Math.max(240, place.clientWidth || 600);
    const dark = matchMedia("(prefers-color-scheme: dark)").matches;
    const axis = {stroke: dark ? "#bbb" : "#444", grid: {stroke: dark ? "#333" : "#e5e5e5"}};
    const plot = new uPlot({
      width, height: options.height || 220,
      scales: {x: {time: options.time !== false}},
      axes: [Object.assign({}, axis), Object.assign({}, axis, {size: 60})],
      series: [{label: options.xLabel || "time"}].concat(series.map((one, n) => ({
        label: one.label, stroke: one.color || PALETTE[n % PALETTE.length], width: 2,
        points: {show: options.points === true},
        value: (u, v) => v === null || v === undefined ? "–" : C.number(v) + (one.unit ? " " + one.unit : ""),
      }))),
    }, [times].concat(series.map((one) => one.values)), place);
    const resized = new ResizeObserver(
      () => plot.setSize({width: Math.max(240, place.clientWidth), height: plot.height}));
    resized.observe(place);
    // Its destroy lets go of the observer too, so a page drawing its
    // charts again leaves none behind.
    const destroy = plot.destroy.bind(plot);
    plot.destroy = () => { resized.disconnect(); destroy(); };
    return plot;
  };

  window.Console = C;
  document.addEventListener("DOMContentLoaded", () => {
    C.whoami();
    const here = location.pathname;
    for (const link of document.querySelectorAll("header nav a")) {
      if (link.getAttribute("href") === here) link.setAttribute("aria-current", "page");
    }
  });
})();
