// A stand-in for the jobs page, so the job page's tests can walk from "/"
// (issue 27's three-click task): a "Failed" quick filter and the finished
// jobs, each linking to its page. The jobs page proper (branch cjobs)
// replaces this file whole.
"use strict";

(function () {
  const C = window.Console;
  const place = document.getElementById("jobs-console");
  const body = C.el("tbody", {});
  const table = C.el("table", {}, C.el("thead", {}, C.el("tr", {},
    C.el("th", {}, "Job"), C.el("th", {}, "Spider"), C.el("th", {}, "Outcome"),
    C.el("th", {}, "Ended"))), body);

  async function show(outcome) {
    const answer = await C.get("listjobs.json", {limit: 50, state: "finished", outcome});
    body.replaceChildren(...answer.finished.map((job) => C.el("tr", {"data-job": job.id},
      C.el("td", {class: "id"}, C.el("a", {href: C.jobHref(job.project, job.id)}, job.id)),
      C.el("td", {}, job.spider), C.el("td", {}, job.outcome),
      C.el("td", {}, C.time(job.at.ended)))));
  }

  place.replaceChildren(
    C.el("p", {}, C.el("button", {type: "button", onclick: () => show(null)}, "All"), " ",
         C.el("button", {type: "button", onclick: () => show("failed")}, "Failed")),
    table);
  show(null);
})();
