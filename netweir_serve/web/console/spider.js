// The spider page: a spider's last runs as charts (items and pages per
// run, runtime per run; degraded runs marked), the medians its run health
// checks compare with, its effective policy, its schedules, and each run
// linked to its job page. From runs.json, listpolicies.json and
// listschedules.json; read again when one of its jobs ends (/events).
"use strict";

(function () {
  const C = window.Console;
  const el = C.el;
  const project = C.data("project");
  const spider = C.data("spider");
  const LIMIT = 50;
  let parts = null;

  function style() {
    document.head.append(el("style", {}, `
      .spider-charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(17rem, 1fr));
                       gap: 1rem; }
      .spider-charts figure { margin: 0; min-width: 0; }
      .spider-charts figcaption { color: var(--muted); font-size: .9em; margin-bottom: .2rem; }
      dl.medians { display: flex; flex-wrap: wrap; gap: .3rem 1.5rem; margin: 0; }
      dl.medians div { display: flex; flex-direction: column; }
      dl.medians dt { color: var(--muted); font-size: .88em; }
      dl.medians dd { margin: 0; font-size: 1.3rem; font-variant-numeric: tabular-nums; }
    `));
  }

  // A run's end as epoch seconds: runs.json's ``at`` (its start_time and
  // end_time are the service's local time without a zone, which a browser
  // in another zone would misplace by the difference).
  const ended = (run) => (run.at && typeof run.at.ended === "number" ? run.at.ended : NaN);

  function chip(text) {
    return el("span", {class: `chip ${text}`}, text);
  }

  function medians(answer) {
    const m = answer.medians;
    const history = answer.history;
    return [
      el("dl", {class: "medians", id: "medians"},
        el("div", {}, el("dt", {}, "items"), el("dd", {class: "num"}, C.number(m.items))),
        el("div", {}, el("dt", {}, "pages"), el("dd", {class: "num"}, C.number(m.pages))),
        el("div", {}, el("dt", {}, "runtime"), el("dd", {class: "num"}, C.duration(m.runtime)))),
      el("p", {class: "muted"},
         `Over its last ${C.number(history.runs)} healthy run(s) of the ${C.number(history.size)}` +
         " the checks compare with; a median shows once 3 runs have it, and no drop or" +
         " slower check applies before that.")];
  }

  // The charts drawn last: each reload destroys them (and their resize
  // observers) before drawing new ones.
  let drawnCharts = [];

  // The runs oldest first, those that started (a chart needs a time).
  function charts(place, runs) {
    for (const chart of drawnCharts) chart.destroy();
    drawnCharts = [];
    const drawn = runs.filter((run) => isFinite(ended(run))).reverse();
    if (drawn.length < 1) {
      place.replaceChildren(el("p", {class: "muted"}, "No finished runs to draw yet."));
      return;
    }
    const times = drawn.map(ended);
    const degradedAt = (values) => drawn.map((run, n) => (run.health === "degraded" ? values[n] : null));
    const items = drawn.map((run) => run.items);
    const pages = drawn.map((run) => run.pages);
    const runtime = drawn.map((run) => run.runtime);
    const counts = el("div", {class: "chart", id: "chart-counts"});
    const times2 = el("div", {class: "chart", id: "chart-runtime"});
    place.replaceChildren(
      el("figure", {}, el("figcaption", {}, "Items and pages per run (by end time)"), counts),
      el("figure", {}, el("figcaption", {}, "Runtime per run"), times2));
    const bad = "#c23c3c";
    drawnCharts.push(C.chart(counts, times, [
      {label: "items", values: items},
      {label: "pages", values: pages},
      {label: "degraded", values: degradedAt(items), color: bad},
    ], {points: true, height: 200}));
    drawnCharts.push(C.chart(times2, times, [
      {label: "runtime", values: runtime, unit: "s"},
      {label: "degraded", values: degradedAt(runtime), unit: "s", color: bad},
    ], {points: true, height: 200}));
  }

  function runsTable(runs) {
    if (!runs.length) return el("p", {class: "muted"}, "No finished runs yet.");
    return el("table", {class: "cards-narrow", id: "runs"},
      el("thead", {}, el("tr", {},
        ["job", "ended", "outcome", "health"].map((h) => el("th", {}, h)),
        ["items", "pages", "errors", "runtime"].map((h) => el("th", {class: "num"}, h)))),
      el("tbody", {}, runs.map((run) => el("tr", {class: run.health === "degraded" ? "degraded" : null},
        el("td", {class: "id", "data-label": "job"}, el("a", {href: C.jobHref(project, run.id)}, run.id)),
        el("td", {"data-label": "ended"}, C.time(ended(run))),
        el("td", {"data-label": "outcome"}, run.outcome ? chip(run.outcome) : "–",
           run.reason ? el("span", {class: "muted"}, " ", run.reason) : ""),
        el("td", {"data-label": "health"}, run.health ? chip(run.health) : "–",
           run.health_reasons.length ? el("div", {class: "muted"}, run.health_reasons.join("; ")) : ""),
        el("td", {class: "num", "data-label": "items"}, C.number(run.items)),
        el("td", {class: "num", "data-label": "pages"}, C.number(run.pages)),
        el("td", {class: "num", "data-label": "errors"}, C.number(run.errors)),
        el("td", {class: "num", "data-label": "runtime"}, C.duration(run.runtime))))));
  }

  function policy(answer) {
    const own = (answer.spiders || {})[spider] || {};
    const keys = Object.entries(own);
    if (!keys.length) {
      return el("p", {class: "muted", id: "policy"},
                "No --policy rule for it: its jobs get the service's defaults.");
    }
    return el("dl", {class: "facts", id: "policy"},
              keys.map(([key, value]) => [el("dt", {}, key), el("dd", {}, String(value))]).flat());
  }

  function schedules(answer) {
    const mine = answer.schedules.filter((s) => s.spider === spider);
    if (!mine.length) return el("p", {class: "muted"}, "No schedule runs it.");
    return el("ul", {}, mine.map((s) => el("li", {},
      el("a", {href: `/schedules#schedule-${encodeURIComponent(s.name)}`}, s.name), ": ", s.in_words,
      s.paused ? " (paused)" : "")));
  }

  async function load() {
    const [runs, policies, listed] = await Promise.all([
      C.get("runs.json", {project, spider, limit: LIMIT}),
      C.get("listpolicies.json", {project}),
      C.get("listschedules.json", {project}),
    ]);
    parts.medians.replaceChildren(...medians(runs));
    charts(parts.charts, runs.runs);
    parts.runs.replaceChildren(runsTable(runs.runs));
    parts.policy.replaceChildren(policy(policies));
    parts.schedules.replaceChildren(schedules(listed));
  }

  async function start() {
    style();
    const main = C.main();
    parts = {
      medians: el("div", {}), charts: el("div", {class: "spider-charts"}),
      runs: el("div", {class: "scroll-narrow"}), policy: el("div", {}), schedules: el("div", {}),
    };
    main.append(
      el("h1", {}, "Spider ", el("code", {}, spider), el("span", {class: "muted"}, " in ", project)),
      el("section", {}, el("h2", {}, "Medians the health checks use"), parts.medians),
      el("section", {}, el("h2", {}, `Last runs`), parts.charts),
      el("section", {}, parts.runs),
      el("section", {}, el("h2", {}, "Effective policy"), parts.policy),
      el("section", {}, el("h2", {}, "Schedules"), parts.schedules));
    try {
      await load();
    } catch (error) {
      C.showError(parts.medians, error);
    }
    let again = null;
    C.follow({
      job: (entry) => {
        if (entry.spider === spider && entry.project.toLowerCase() === project.toLowerCase()
            && entry.state === "finished" && !again) {
          again = setTimeout(() => { again = null; load().catch((e) => console.error(e)); }, 500);
        }
      },
      resync: () => load().catch((e) => console.error(e)),
    });
    document.body.dataset.ready = "1";
  }

  document.addEventListener("DOMContentLoaded", start);
})();
