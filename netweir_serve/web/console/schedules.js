// The schedules page: every schedule with its rule in words, its next
// runs, its last runs and counts; forms to add, edit, pause with a note,
// resume, run now, backfill and delete, each checked by the API as any
// request is (its refusal shown beside the field it names). Live over
// /events "schedule" events. Everything shown comes from listschedules.json
// (upcoming=5) and runs.json.
"use strict";

(function () {
  const C = window.Console;
  const el = C.el;
  const UPCOMING = 5;
  const RUNS = 5;
  const cards = new Map();   // folded schedule name -> {card, entry, parts}
  let list = null;           // the element the cards live in
  let me = null;             // whoami

  const fold = (name) => String(name).toLowerCase();

  // The kinds of rule and the parameter each is given as.
  const KINDS = [["cron", "cron"], ["every", "every"], ["after", "after (a chain)"]];
  const OVERLAPS = ["skip", "buffer_one", "buffer_all", "cancel_other", "terminate_other", "allow"];

  function style() {
    document.head.append(el("style", {}, `
      .schedules { display: grid; gap: 1rem; }
      .schedule h2 { margin: 0 0 .3rem; font-size: 1.1rem; overflow-wrap: anywhere; }
      .schedule .rule { font-size: 1.05rem; margin: .1rem 0 .5rem; }
      .schedule .actions { display: flex; flex-wrap: wrap; gap: .4rem; margin-top: .6rem; }
      .schedule form { margin-top: .6rem; }
      .schedule ol.upcoming { margin: 0; padding-left: 1.2rem; }
      .schedule .note { border-left: 3px solid var(--warn); padding-left: .5rem; }
      .schedule .said { margin: .4rem 0 0; }
      .schedule .runs { margin-top: .5rem; }
      .schedule dl.counts { display: flex; flex-wrap: wrap; gap: .2rem 1rem; margin: .3rem 0; }
      .schedule dl.counts div { display: flex; gap: .3rem; }
      .schedule dl.counts dt { color: var(--muted); }
      .schedule dl.counts dd { margin: 0; font-variant-numeric: tabular-nums; }
      form.inline label.wide { flex: 1 1 12rem; }
      form.inline label.wide input { width: 100%; }
      #add-schedule summary { cursor: pointer; font-weight: 600; }
    `));
  }

  // -- the API's refusals beside their fields ---------------------------------

  // C.formError places an error by its ``field``; the rule's refusals name
  // their parameter first ("cron '61 * * * *' is not a cron expression",
  // "tz 'Mars/Base' is not a time zone"), as does a taken name.
  function showError(form, error) {
    if (error && !error.field && error.message) {
      const named = /^([a-z_]+) '/.exec(error.message);
      if (named && form.elements.namedItem(named[1])) error.field = named[1];
      else if (/^a schedule named /.test(error.message)) error.field = "name";
    }
    return C.formError(form, error);
  }

  // Submits ``form`` to ``path`` with ``extra`` (an object) added; on a
  // refusal shows it beside its field. Resolves to the answer or null.
  async function send(form, path, extra) {
    const data = new FormData(form);
    // "_kind" picks the rule's parameter (the input's name); not sent.
    for (const [key, value] of [...data.entries()]) {
      if (value === "" || key === "_kind") data.delete(key);
    }
    for (const [key, value] of Object.entries(extra || {})) data.set(key, value);
    const buttons = form.querySelectorAll("button");
    buttons.forEach((b) => { b.disabled = true; });
    try {
      const answer = await C.post(path, data);
      showError(form, null);
      return answer;
    } catch (error) {
      showError(form, error);
      return null;
    } finally {
      buttons.forEach((b) => { b.disabled = false; });
    }
  }

  // -- the rule's fields (shared by the add and edit forms) -------------------

  function ruleFields(entry) {
    const kind = entry ? (entry.cron !== undefined ? "cron" : entry.every !== undefined ? "every"
                                                                                         : "after")
                       : "cron";
    const select = el("select", {name: "_kind"},
                      KINDS.map(([value, label]) => el("option", {value, selected: value === kind},
                                                       label)));
    const rule = el("input", {name: kind, required: true, value: entry ? entry[kind] : "",
                              placeholder: "0 3 * * *", autocomplete: "off", spellcheck: "false"});
    const ruleLabel = el("label", {class: "wide"}, el("span", {}, "rule"), rule);
    const hints = {cron: "0 3 * * *", every: "15m", after: "books or schedule:nightly"};
    const on = el("input", {name: "on", value: entry && entry.on ? entry.on.join(",") : "",
                            placeholder: "healthy"});
    const onLabel = el("label", {}, "on (a chain's ends)", on);
    const tz = el("input", {name: "tz", value: entry ? entry.tz : "", placeholder: "Europe/Berlin",
                            autocomplete: "off"});
    const follow = () => {
      rule.name = select.value;
      rule.placeholder = hints[select.value];
      ruleLabel.firstChild.textContent = select.value === "after" ? "after" : select.value;
      onLabel.hidden = select.value !== "after";
      on.disabled = select.value !== "after";
    };
    select.addEventListener("change", follow);
    follow();
    return [el("label", {}, "kind", select), ruleLabel, onLabel, el("label", {}, "tz", tz)];
  }

  function overlapField(entry) {
    const current = entry ? entry.overlap : "";
    return el("label", {}, "overlap", el("select", {name: "overlap"},
      el("option", {value: ""}, entry ? `(${current})` : "(skip)"),
      OVERLAPS.map((value) => el("option", {value}, value))));
  }

  // -- adding ------------------------------------------------------------------

  function addForm() {
    const projects = me.writes;
    const project = el("select", {name: "project", required: true},
                       projects.map((name) => el("option", {value: name}, name)));
    const spider = el("select", {name: "spider", required: true});
    const loadSpiders = async () => {
      spider.replaceChildren();
      try {
        const answer = await C.get("listspiders.json", {project: project.value});
        spider.append(...answer.spiders.map((name) => el("option", {value: name}, name)));
      } catch (error) {
        showError(form, error);
      }
    };
    project.addEventListener("change", loadSpiders);
    const form = el("form", {class: "inline", id: "add-form"},
      el("label", {}, "project", project),
      el("label", {}, "spider", spider),
      el("label", {}, "name", el("input", {name: "name", placeholder: "nightly", autocomplete: "off"})),
      ruleFields(null),
      overlapField(null),
      el("label", {}, "jitter", el("input", {name: "jitter", placeholder: "10m", size: 6})),
      el("button", {type: "submit"}, "Add schedule"));
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const answer = await send(form, "addschedule.json");
      if (answer) {
        form.reset();
        form.querySelector("select[name=_kind]").dispatchEvent(new Event("change"));
        await refresh(answer.name);
      }
    });
    if (projects.length) loadSpiders();
    return el("details", {id: "add-schedule", class: "card"}, el("summary", {}, "Add a schedule"), form);
  }

  // -- one schedule --------------------------------------------------------------

  function chip(text, kind) {
    return el("span", {class: `chip ${kind || text}`}, text);
  }

  function facts(entry) {
    const rows = [];
    const fact = (term, ...value) => rows.push(el("dt", {}, term), el("dd", {}, ...value));
    const upcoming = entry.upcoming || [];
    if (entry.paused) fact("next runs", el("span", {class: "muted"}, "none while paused"));
    else if (entry.after !== undefined) fact("next runs", el("span", {class: "muted"},
      "when its upstream's jobs end"));
    else {
      fact("next runs", el("ol", {class: "upcoming"}, upcoming.map((due, n) => el("li", {},
        C.time(due), " ", el("span", {class: "muted"}, `(${C.ago(Date.parse(due) / 1000)})`),
        entry.upcoming_starts ? el("span", {class: "muted"}, ", its job starting " + C.duration(
          (Date.parse(entry.upcoming_starts[n]) - Date.parse(due)) / 1000) + " later") : null))));
    }
    fact("rule", el("code", {}, entry.cron || entry.every || entry.after),
         entry.on ? ` on ${entry.on.join(", ")}` : "", entry.jitter ? `, jitter ${entry.jitter}` : "");
    fact("policies", `overlap ${entry.overlap}, misfire ${entry.misfire}`,
         entry.pause_after ? `, pauses after ${entry.pause_after} bad runs in a row` +
                             ` (${entry.failed_in_row} now)` : "");
    fact("last run", entry.last_run ? C.time(entry.last_run) : "–",
         entry.last_job ? [" ", el("a", {href: C.jobHref(entry.project, entry.last_job)},
                                   entry.last_job)] : "");
    const args = Object.entries(entry.arguments || {}).map(([k, v]) => `${k}=${v}`);
    const settings = Object.entries(entry.settings || {}).map(([k, v]) => `${k}=${v}`);
    if (args.length || settings.length) {
      fact("given", [...settings.map((s) => `setting ${s}`), ...args].join(", "));
    }
    const counts = el("dl", {class: "counts"},
      [["runs", entry.runs], ["skipped", entry.skipped], ["buffered", entry.buffered],
       ["caught up", entry.caught_up]].map(([term, n]) =>
        el("div", {}, el("dt", {}, term), el("dd", {class: "num"}, C.number(n)))));
    return [el("dl", {class: "facts"}, rows), counts];
  }

  async function lastRuns(entry, place) {
    if (!entry.spider) return;
    try {
      const answer = await C.get("runs.json", {project: entry.project, spider: entry.spider,
                                               schedule: entry.name, limit: RUNS});
      if (!answer.runs.length) {
        place.replaceChildren(el("p", {class: "muted"}, "No finished runs yet."));
        return;
      }
      place.replaceChildren(el("p", {class: "muted"}, "Last runs"), el("table", {class: "cards-narrow"},
        el("thead", {}, el("tr", {}, el("th", {}, "job"), el("th", {}, "ended"),
                               el("th", {}, "outcome"), el("th", {}, "health"),
                               el("th", {class: "num"}, "items"), el("th", {class: "num"}, "runtime"))),
        el("tbody", {}, answer.runs.map((run) => el("tr", {class: run.health === "degraded" ? "degraded" : null},
          el("td", {class: "id", "data-label": "job"}, el("a", {href: C.jobHref(entry.project, run.id)}, run.id)),
          el("td", {"data-label": "ended"}, C.time(run.at ? run.at.ended : null)),
          el("td", {"data-label": "outcome"}, run.outcome ? chip(run.outcome) : "–"),
          el("td", {"data-label": "health", title: (run.health_reasons || []).join("; ")},
             run.health ? chip(run.health) : "–"),
          el("td", {class: "num", "data-label": "items"}, C.number(run.items)),
          el("td", {class: "num", "data-label": "runtime"}, C.duration(run.runtime)))))));
    } catch (error) {
      C.showError(place, error);
    }
  }

  function actions(entry, card) {
    const place = el("div", {class: "actions-place"});
    const said = el("p", {class: "said", "aria-live": "polite"});
    const forms = el("div", {});
    const open = (form) => {
      forms.replaceChildren(form);
      const first = form.querySelector("input, select, textarea");
      if (first) first.focus();
    };
    const target = {project: entry.project, name: entry.name};
    const simple = async (path, button, done) => {
      button.disabled = true;
      try {
        const answer = await C.post(path, target);
        said.textContent = "";
        if (done) done(answer);
      } catch (error) {
        C.showError(said, error);
      } finally {
        button.disabled = false;
      }
    };

    const edit = el("button", {type: "button", onclick: () => {
      const form = el("form", {class: "inline edit-form"},
        ruleFields(card.entry), overlapField(card.entry),
        el("label", {}, "jitter", el("input", {name: "jitter", placeholder: card.entry.jitter || "0",
                                               size: 6})),
        el("button", {type: "submit"}, "Save"),
        el("button", {type: "button", onclick: () => forms.replaceChildren()}, "Cancel"));
      form.addEventListener("submit", async (event) => {
        event.preventDefault();
        const answer = await send(form, "editschedule.json", target);
        if (answer) { forms.replaceChildren(); await refresh(entry.name); }
      });
      open(form);
    }}, "Edit");

    const pause = el("button", {type: "button", class: "pause", onclick: () => {
      const form = el("form", {class: "inline pause-form"},
        el("label", {class: "wide"}, "note (why; optional)",
           el("input", {name: "note", maxlength: 500, placeholder: "site down for maintenance"})),
        el("button", {type: "submit"}, "Pause"),
        el("button", {type: "button", onclick: () => forms.replaceChildren()}, "Cancel"));
      form.addEventListener("submit", async (event) => {
        event.preventDefault();
        const answer = await send(form, "pauseschedule.json", target);
        if (answer) { forms.replaceChildren(); await refresh(entry.name); }
      });
      open(form);
    }}, "Pause…");

    const resume = el("button", {type: "button", class: "resume", onclick: (event) =>
      simple("resumeschedule.json", event.currentTarget, () => refresh(entry.name))}, "Resume");

    const run = el("button", {type: "button", class: "run", onclick: (event) =>
      simple("runschedule.json", event.currentTarget, (answer) => {
        said.replaceChildren(answer.queued
          ? el("span", {}, "Queued ", el("a", {href: C.jobHref(entry.project, answer.jobid)},
                                         answer.jobid))
          : el("span", {class: "error"}, `Queued nothing: ${answer.why}`));
        refresh(entry.name);
      })}, "Run now");

    const backfill = el("button", {type: "button", onclick: () => {
      const form = el("form", {class: "inline backfill-form"},
        el("label", {}, `from (${card.entry.tz})`, el("input", {name: "from", type: "datetime-local",
                                                              required: true})),
        el("label", {}, "to", el("input", {name: "to", type: "datetime-local", required: true})),
        el("button", {type: "submit"}, "Backfill"),
        el("button", {type: "button", onclick: () => forms.replaceChildren()}, "Cancel"));
      form.addEventListener("submit", async (event) => {
        event.preventDefault();
        const answer = await send(form, "backfillschedule.json", target);
        if (answer) {
          forms.replaceChildren();
          said.textContent = `Queued ${answer.queued.length} job(s)` +
            (answer.already.length ? `; ${answer.already.length} existed already` : "");
          refresh(entry.name);
        }
      });
      open(form);
    }}, "Backfill…");

    const remove = el("button", {type: "button", class: "danger", onclick: (event) => {
      const button = event.currentTarget;
      if (button.dataset.armed !== "1") {
        button.dataset.armed = "1";
        button.textContent = "Delete: sure?";
        return;
      }
      simple("delschedule.json", button, () => forget(entry.name));
    }}, "Delete");

    place.append(el("div", {class: "actions"}, edit, pause, resume, run, backfill, remove), forms, said);
    return {place, pause, resume, backfill};
  }

  function makeCard(entry) {
    const card = {entry, element: el("article", {class: "card schedule", id: `schedule-${entry.name}`,
                                                 dataset: {name: entry.name}})};
    card.head = el("header", {});
    card.body = el("div", {});
    card.runs = el("div", {class: "runs"});
    card.element.append(card.head, card.body, card.runs);
    C.canWrite(entry.project).then((may) => {
      if (!may) return;
      card.controls = actions(entry, card);
      card.element.append(card.controls.place);
      draw(card);
    });
    return card;
  }

  function draw(card) {
    const entry = card.entry;
    card.head.replaceChildren(
      el("h2", {}, entry.name, " ",
         entry.paused ? chip("paused", "cancelled") : chip("active", "finished"),
         entry.error ? [" ", chip("error", "failed")] : ""),
      el("p", {class: "rule"}, entry.in_words),
      el("p", {class: "muted"}, "project ", entry.project, ", spider ",
         el("a", {href: C.spiderHref(entry.project, entry.spider)}, entry.spider)));
    card.body.replaceChildren(
      entry.note ? el("p", {class: "note"}, el("strong", {}, "Note: "), entry.note) : "",
      entry.error ? el("p", {class: "error"}, entry.error) : "",
      ...facts(entry));
    if (card.controls) {
      card.controls.pause.hidden = entry.paused;
      card.controls.resume.hidden = !entry.paused;
      card.controls.backfill.hidden = entry.after !== undefined;
    }
  }

  function show(entry) {
    const key = fold(entry.name);
    let card = cards.get(key);
    if (!card) {
      card = makeCard(entry);
      cards.set(key, card);
      list.append(card.element);
    }
    card.entry = entry;
    draw(card);
    lastRuns(entry, card.runs);
    empty();
  }

  function forget(name) {
    const card = cards.get(fold(name));
    if (card) card.element.remove();
    cards.delete(fold(name));
    empty();
  }

  function empty() {
    const none = document.getElementById("no-schedules");
    if (none) none.hidden = cards.size > 0;
  }

  // One schedule read again (after a change here or an event).
  async function refresh(name) {
    try {
      const answer = await C.get("listschedules.json", {name, upcoming: UPCOMING});
      if (answer.schedules.length) show(answer.schedules[0]);
      else forget(name);
    } catch (error) {
      console.error(error);
    }
  }

  async function loadAll() {
    const answer = await C.get("listschedules.json", {upcoming: UPCOMING});
    const seen = new Set(answer.schedules.map((entry) => fold(entry.name)));
    for (const key of [...cards.keys()]) if (!seen.has(key)) forget(key);
    for (const entry of answer.schedules) show(entry);
  }

  // /schedules#schedule-NAME (the job and spider pages link so): the
  // browser looked for that card before it was drawn, so this scrolls to it
  // (the name in any case, as the service compares them).
  function toTheLinkedCard() {
    const named = /^#schedule-(.+)$/.exec(location.hash);
    if (!named) return;
    let name;
    try { name = decodeURIComponent(named[1]); } catch (e) { return; }
    const card = cards.get(fold(name));
    if (card) card.element.scrollIntoView({block: "start"});
  }

  async function start() {
    style();
    const main = C.main();
    main.append(el("h1", {}, "Schedules"));
    me = await C.whoami();
    if (me.writes.length) main.append(addForm());
    list = el("div", {class: "schedules", id: "schedules"});
    main.append(el("p", {id: "no-schedules", class: "muted", hidden: true},
                   "No schedules yet", me.writes.length ? ": add one above." : "."), list);
    try {
      await loadAll();
      empty();
      toTheLinkedCard();
    } catch (error) {
      C.showError(list, error);
    }
    C.follow({
      schedule: (entry) => (entry.deleted ? forget(entry.name) : refresh(entry.name)),
      job: (entry) => {
        if (entry.schedule && entry.state === "finished") refresh(entry.schedule);
      },
      resync: () => loadAll().catch((e) => console.error(e)),
    });
    document.body.dataset.ready = "1";
  }

  document.addEventListener("DOMContentLoaded", start);
})();
