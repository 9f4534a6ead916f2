// The nodes page: every node sharing the job table (or this one alone),
// up or dead, its last heartbeat, running jobs, free slots and projects,
// from listnodes.json. Read again every few seconds: a node goes dead by
// staying silent, which no event announces.
"use strict";

(function () {
  const C = window.Console;
  const el = C.el;
  const EVERY_MS = 3000;
  let place = null;
  let summary = null;

  function chip(up) {
    return el("span", {class: `chip ${up ? "finished" : "failed"} node-state`}, up ? "up" : "dead");
  }

  function row(node) {
    return el("tr", {dataset: {node: node.name, up: node.up ? "1" : "0"}},
      el("td", {class: "id", "data-label": "node"}, el("strong", {}, node.name),
         node.this ? el("span", {class: "muted"}, " (answering)") : "",
         node.url ? el("div", {class: "muted mono"}, node.url) : ""),
      el("td", {"data-label": "state"}, chip(node.up)),
      el("td", {"data-label": "last beat"},
         node.heartbeat === null ? el("span", {class: "muted"}, "– (no shared table)")
           : [C.time(node.heartbeat),
              el("div", {class: "muted"}, `${C.duration(node.age)} ago`)]),
      el("td", {"data-label": "started"}, node.started === null ? "–" : C.time(node.started, true)),
      el("td", {class: "num", "data-label": "running"}, C.number(node.running)),
      el("td", {class: "num", "data-label": "free slots",
                title: node.slots_free === null ? "known to that node: open its own /nodes" : null},
         node.slots_free === null ? "–" : C.number(node.slots_free)),
      el("td", {"data-label": "projects"}, node.projects.length ? node.projects.join(", ")
                                                                : el("span", {class: "muted"}, "none")));
  }

  async function load() {
    const answer = await C.get("listnodes.json");
    const up = answer.nodes.filter((node) => node.up).length;
    summary.textContent = answer.shared
      ? `${up} of ${answer.nodes.length} node(s) up, sharing one job table.`
      : "This service keeps a job table of its own: it is the only node.";
    place.replaceChildren(el("table", {class: "cards-narrow", id: "nodes"},
      el("thead", {}, el("tr", {},
        ["node", "state", "last beat", "started"].map((h) => el("th", {}, h)),
        el("th", {class: "num"}, "running"), el("th", {class: "num"}, "free slots"),
        el("th", {}, "projects"))),
      el("tbody", {}, answer.nodes.map(row))));
  }

  async function tick() {
    try {
      await load();
      document.body.dataset.ready = "1";
    } catch (error) {
      C.showError(place, error);
    }
    setTimeout(tick, EVERY_MS);
  }

  document.addEventListener("DOMContentLoaded", () => {
    summary = el("p", {id: "nodes-summary"});
    place = el("div", {});
    C.main().append(el("h1", {}, "Nodes"), summary, place);
    tick();
  });
})();
