// The list of invocations (/): the queue at a glance, search and filters, paging, and acting
// on every invocation the filter matches (POST /batches).

import {
  STATUSES, ago, api, badge, duration, failure, h, invocationLink, isoToLocal, keyLink, localToIso, pageLeft,
  retriedAs, shortHandler, show, tagLink, when, where,
} from "../common.js";

const LIST_FIELDS = ["q", "status", "handler", "key", "tag", "since", "until"];

export async function listPage() {
  const params = new URLSearchParams(location.search);
  const chosen = params.get("status");
  where.replaceChildren("invocations");
  const navigate = (next) => {
    history.replaceState(null, "", "/" + (next.toString() ? "?" + next : ""));
    listPage();
  };
  const filters = h("div", { class: "filters", role: "toolbar", "aria-label": "status" },
    [null, ...STATUSES].map((status) => h("button", {
      type: "button", class: status === chosen ? "on" : null, "data-filter": status || "all",
      onclick: () => {
        const next = new URLSearchParams(location.search);
        if (status) next.set("status", status); else next.delete("status");
        next.delete("cursor");
        listPage.back = [];
        navigate(next);
      },
    }, status || "all")));
  const field = (name, attrs) => h("input", { name, id: "filter-" + name, ...attrs });
  const q = field("q", { type: "search", placeholder: "search id, handler, key or error", "aria-label": "search",
    value: params.get("q") || "", class: "grow" });
  const handler = field("handler", { placeholder: "handler", "aria-label": "handler", value: params.get("handler") || "",
    list: "handlers" });
  const key = field("key", { placeholder: "key", "aria-label": "key", value: params.get("key") || "" });
  const tag = field("tag", { placeholder: "tag key:value", "aria-label": "tag", value: params.get("tag") || "" });
  const since = field("since", { type: "datetime-local", "aria-label": "since", value: isoToLocal(params.get("since")) });
  const until = field("until", { type: "datetime-local", "aria-label": "until", value: isoToLocal(params.get("until")) });
  const handlers = h("datalist", { id: "handlers" });
  const search = h("form", { class: "search", id: "search", role: "search",
    onsubmit: (e) => {
      e.preventDefault();
      const next = new URLSearchParams();
      if (chosen) next.set("status", chosen);
      for (const [name, input] of [["q", q], ["handler", handler], ["key", key], ["tag", tag]]) {
        if (input.value.trim()) next.set(name, input.value.trim());
      }
      if (since.value) next.set("since", localToIso(since.value));
      if (until.value) next.set("until", localToIso(until.value));
      if (params.get("limit")) next.set("limit", params.get("limit"));
      listPage.back = [];
      navigate(next);
    } },
    q, handler, key, tag, h("label", { class: "muted" }, "since ", since), h("label", { class: "muted" }, "until ", until),
    h("button", { type: "submit", class: "plain" }, "Search"),
    h("button", { type: "button", class: "link", onclick: () => { listPage.back = []; navigate(new URLSearchParams()); } }, "Clear"),
    handlers);
  const body = h("tbody");
  const table = h("table", { id: "invocations" },
    h("thead", {}, h("tr", {}, ["id", "status", "handler", "key", "tags", "entries", "updated"].map((t) => h("th", {}, t)))),
    body);
  // The queue at a glance (GET /invocations/summary): counts by handler and status, from the
  // store's counts; a count is a link to those invocations.
  const summaryBody = h("tbody");
  const summary = h("table", { id: "summary", class: "summary" },
    h("thead", {}, h("tr", {}, ["handler", ...STATUSES, "oldest runnable"].map((t) => h("th", {}, t)))), summaryBody);
  const newer = h("button", { type: "button", class: "plain", id: "prev-page" }, "← Newer");
  const older = h("button", { type: "button", class: "plain", id: "next-page" }, "Older →");
  const pageNote = h("span", { class: "muted", id: "page-number" });
  const pager = h("div", { class: "pager" }, newer, pageNote, older);
  const batch = batchBar(params);
  show(h("h1", {}, "Invocations"), summary, search, filters, batch, table, pager);

  // Cursors of the pages before this one, to go back: the API pages forward only.
  const back = listPage.back || [];
  listPage.back = back;
  const cursor = params.get("cursor");
  newer.disabled = !cursor;
  newer.addEventListener("click", () => {
    const next = new URLSearchParams(location.search);
    const previous = back.pop();
    if (previous) next.set("cursor", previous); else next.delete("cursor");
    navigate(next);
  });
  pageNote.textContent = "page " + (back.length + 1);

  const token = Symbol();
  listPage.current = token;
  const leaving = pageLeft();
  let nextCursor = null;
  older.addEventListener("click", () => {
    if (!nextCursor) return;
    const next = new URLSearchParams(location.search);
    back.push(cursor || "");
    next.set("cursor", nextCursor);
    navigate(next);
  });
  const query = new URLSearchParams();
  for (const name of LIST_FIELDS) if (params.get(name)) query.set(name, params.get(name));
  if (cursor) query.set("cursor", cursor);
  query.set("limit", params.get("limit") || "50");
  const refresh = async () => {
    if (listPage.current !== token || leaving.signal.aborted) return;
    try {
      const page = await api("/invocations?" + query);
      if (listPage.current !== token || leaving.signal.aborted) return;
      nextCursor = page.next_cursor;
      older.disabled = !nextCursor;
      body.replaceChildren(...page.invocations.map((inv) => h("tr", { "data-id": inv.id },
        h("td", {}, invocationLink(inv.id)), h("td", {}, badge(inv.status),
          inv.status === "running" && inv.owner && inv.owner.alive === false
            ? h("span", { class: "tag error owner-gone", title: "its owner's process or session ended, or its lease expired: resume it" }, "owner gone")
            : null,
          retriedAs(inv) ? h("span", { class: "tag retried", title: "retried as " + retriedAs(inv) }, "retried") : null),
        h("td", { class: "mono", title: inv.handler }, shortHandler(inv.handler)), h("td", {}, keyLink(inv.key)),
        h("td", { class: "tags" }, Object.entries(inv.tags || {}).map(([k, v]) => tagLink(k, v))),
        h("td", { class: "num" }, inv.entries), h("td", { title: when(inv.updated_at) }, ago(inv.updated_at)))));
      const names = [...new Set(page.invocations.map((inv) => inv.handler))].sort();
      handlers.replaceChildren(...names.map((n) => h("option", { value: n })));
      if (!page.invocations.length) {
        const filtered = LIST_FIELDS.some((name) => params.get(name));
        body.append(h("tr", {}, h("td", { colspan: 7, class: "muted" },
          filtered ? "No invocations match." : "No invocations yet.")));
      }
      const glance = await api("/invocations/summary");
      if (listPage.current !== token || leaving.signal.aborted) return;
      summaryBody.replaceChildren(...glance.handlers.map((row) => h("tr", { "data-handler": row.handler },
        h("td", { class: "mono", title: row.handler }, shortHandler(row.handler)),
        STATUSES.map((status) => h("td", { class: "num", "data-status": status }, row.counts[status]
          ? h("a", { href: "/?" + new URLSearchParams({ handler: row.handler, status }) }, row.counts[status]) : "0")),
        h("td", { class: "num" }, row.oldest_runnable_seconds === null ? "–" : duration(row.oldest_runnable_seconds * 1000)))));
      summary.hidden = !glance.handlers.length;
    } catch (error) { failure(error); return; }
    setTimeout(refresh, 1500);
  };
  refresh();
}

// Acting on the current filter (POST /batches): first a dry run (for a retry, with the
// divergence check), whose counts are shown; only then the button that acts.
const PAST = { retry: "retried", cancel: "cancelled", resume: "resumed" };
const BATCH_FIELDS = ["status", "handler", "key", "tag", "q", "since", "until"];

function batchBar(params) {
  const filter = {};
  for (const name of BATCH_FIELDS) if (params.get(name)) filter[name] = params.get(name);
  const note = h("span", { class: "note", id: "batch-note", role: "status" });
  const bar = h("div", { class: "batch", id: "batch" }, h("span", { class: "muted" }, "these invocations: "));
  if (!Object.keys(filter).length) return h("div", { id: "batch", hidden: true });
  const follow = async (id) => {
    for (;;) {
      const doc = await api("/batches/" + encodeURIComponent(id));
      if (doc.finished) return doc;
      note.textContent = doc.done + doc.skipped + doc.diverging.length + " of " + doc.matched + "…";
      await new Promise((r) => setTimeout(r, 300));
    }
  };
  const plan = (action, check) => async () => {
    note.textContent = check ? "checking each journal against the code…" : "counting…";
    try {
      const dry = await api("/batches", { method: "POST", body: { action, filter, check, dry_run: true } });
      const counted = await follow(dry.id);
      const parts = [counted.done + " would be " + PAST[action]];
      if (counted.skipped) parts.push(counted.skipped + " skipped");
      if (counted.diverging.length) parts.push(counted.diverging.length + " would diverge (left alone)");
      const go = h("button", { type: "button", class: "danger", id: "batch-confirm", onclick: async () => {
        go.disabled = true;
        try {
          const made = await api("/batches", { method: "POST", body: { action, filter, check } });
          const done = await follow(made.id);
          note.textContent = done.done + " " + PAST[action] +
            (done.diverging.length ? ", " + done.diverging.length + " diverging: " + done.diverging.join(", ") : "");
        } catch (error) { note.textContent = String(error.message || error); }
      } }, "Confirm: " + action + " " + counted.done);
      note.replaceChildren(parts.join(", ") + " ", counted.done ? go : "");
    } catch (error) { note.textContent = String(error.message || error); }
  };
  bar.append(
    h("button", { type: "button", class: "plain", id: "batch-retry", onclick: plan("retry", true) }, "Retry failed (check first)"),
    h("button", { type: "button", class: "plain", id: "batch-cancel", onclick: plan("cancel", false) }, "Cancel"),
    h("button", { type: "button", class: "plain", id: "batch-resume", onclick: plan("resume", false) }, "Resume"),
    note);
  return bar;
}
