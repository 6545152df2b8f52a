// The schedules (/s): each one's rule, next and last runs; pause (with a note), resume, run
// now, backfill.

import { Unauthorized, api, badge, duration, failure, h, invocationLink, localToIso, show, when, where } from "../common.js";

export async function schedulesPage() {
  where.replaceChildren("schedules");
  const panel = h("div", { id: "schedule-panel" });
  const body = h("tbody");
  const table = h("table", { id: "schedules" }, h("thead", {}, h("tr", {},
    ["name", "rule", "next run", "last runs", "skipped", ""].map((t) => h("th", {}, t)))), body);
  const message = h("p", { class: "muted", id: "schedules-message" });
  show(h("h1", {}, "Schedules"), message, table, panel);
  const act = async (path, bodyValue) => {
    try {
      await api(path, { method: "POST", body: bodyValue });
      panel.replaceChildren();
      await draw();
    } catch (error) { if (!(error instanceof Unauthorized)) panel.replaceChildren(h("div", { class: "error-box" }, String(error.message))); }
  };
  const pauseForm = (name) => {
    const note = h("input", { name: "note", id: "pause-note", placeholder: "why (shown to everyone)", "aria-label": "note", class: "grow" });
    panel.replaceChildren(h("form", { class: "card", id: "pause-form", onsubmit: (e) => {
      e.preventDefault();
      act("/schedules/" + encodeURIComponent(name) + "/pause", { note: note.value.trim() || null });
    } }, h("h2", {}, "Pause " + name), note, " ", h("button", { class: "plain", type: "submit" }, "Pause")));
    note.focus();
  };
  const backfillForm = (name) => {
    const from = h("input", { type: "datetime-local", name: "from", id: "backfill-from", "aria-label": "from" });
    const to = h("input", { type: "datetime-local", name: "to", id: "backfill-to", "aria-label": "to" });
    const result = h("ol", { id: "backfill-result" });
    panel.replaceChildren(h("form", { class: "card", id: "backfill-form", onsubmit: async (e) => {
      e.preventDefault();
      try {
        const done = await api("/schedules/" + encodeURIComponent(name) + "/backfill",
          { method: "POST", body: { from: localToIso(from.value), to: localToIso(to.value) } });
        result.replaceChildren(...done.ticks.map((t) => h("li", {}, invocationLink(t.id), t.started ? " started" : " already started")));
        await draw();
      } catch (error) { if (!(error instanceof Unauthorized)) result.replaceChildren(h("li", { class: "error-box" }, String(error.message))); }
    } }, h("h2", {}, "Backfill " + name), "from ", from, " to ", to, " ",
      h("button", { class: "plain", type: "submit" }, "Start the missing ticks"), result));
  };
  const draw = async () => {
    const doc = await api("/schedules");
    message.replaceChildren(doc.schedules.length ? "" : "No schedules. Add one with: journal schedule add NAME TARGET --cron EXPR");
    body.replaceChildren(...doc.schedules.map((s) => {
      const path = "/schedules/" + encodeURIComponent(s.name);
      const rule = s.cron !== null ? s.cron + (s.tz !== "UTC" ? " (" + s.tz + ")" : "") : "every " + duration(s.every * 1000);
      return h("tr", { "data-schedule": s.name, id: "schedule-" + s.name },
        h("td", { class: "mono" }, s.name),
        h("td", { class: "mono" }, rule, " ", h("span", { class: "muted" }, "overlap " + s.overlap)),
        h("td", { class: "next" }, s.paused ? [h("span", { class: "tag error paused" }, "paused"), s.note ? " " + s.note : ""]
          : (s.next_run ? when(s.next_run) : "none")),
        h("td", { class: "recent" }, s.recent.slice(0, 3).map((r) => h("div", {}, invocationLink(r.id), " ", r.status ? badge(r.status) : "trimmed"))),
        h("td", { class: "num skipped" }, s.skipped),
        h("td", { class: "actions" },
          s.paused ? h("button", { class: "plain", "data-action": "resume", onclick: () => act(path + "/resume") }, "Resume")
            : h("button", { class: "plain", "data-action": "pause", onclick: () => pauseForm(s.name) }, "Pause"), " ",
          h("button", { class: "plain", "data-action": "trigger", onclick: () => act(path + "/trigger") }, "Run now"), " ",
          h("button", { class: "plain", "data-action": "backfill", onclick: () => backfillForm(s.name) }, "Backfill")));
    }));
    if (location.hash) {
      const row = document.getElementById("schedule-" + decodeURIComponent(location.hash.slice(1)));
      if (row) row.classList.add("chosen");
    }
  };
  try { await draw(); } catch (error) { failure(error); }
}
