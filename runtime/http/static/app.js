// The journal web UI: plain DOM, no framework, nothing from the network but this server.
// Journal contents are hostile data (model output): they only ever become text nodes
// (textContent), never markup.
"use strict";

const STATUSES = ["pending", "running", "suspended", "diverged", "completed", "failed", "cancelled"];
const main = document.getElementById("main");
const where = document.getElementById("where");

class Unauthorized extends Error {}

// h("td", {class: "num"}, "text", node, ...): strings become text nodes, never HTML.
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function show(...nodes) { main.replaceChildren(...nodes); }
function text(value) { return value === undefined ? "" : (typeof value === "string" ? value : JSON.stringify(value, null, 2)); }
function badge(status) { return h("span", { class: "status " + status, "data-status": status }, status); }
// Times in UTC, saying so, as the command line shows them (the browser's zone may not be the server's).
function when(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return isNaN(d) ? String(iso) : d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "").replace("Z", "") + " UTC";
}
function ago(iso) {
  if (!iso) return "";
  const s = Math.max(0, (Date.now() - new Date(iso).getTime()) / 1000);
  if (s < 60) return Math.round(s) + "s ago";
  if (s < 3600) return Math.round(s / 60) + "m ago";
  if (s < 86400) return Math.round(s / 3600) + "h ago";
  return Math.round(s / 86400) + "d ago";
}
function duration(ms) {
  if (ms === null || ms === undefined || ms < 0) return "";
  if (ms < 1000) return Math.round(ms) + " ms";
  if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
  const s = Math.round(ms / 1000);
  if (s < 3600) return Math.floor(s / 60) + " min" + (s % 60 ? " " + (s % 60) + " s" : "");
  const m = Math.round(s / 60);
  if (m < 1440) return Math.floor(m / 60) + " h" + (m % 60 ? " " + (m % 60) + " min" : "");
  return Math.floor(m / 1440) + " d" + (Math.floor(m / 60) % 24 ? " " + (Math.floor(m / 60) % 24) + " h" : "");
}
function invocationLink(id) { return h("a", { href: "/i/" + encodeURIComponent(id), class: "mono" }, id); }
function scheduleLink(name) { return h("a", { href: "/s#" + encodeURIComponent(name), class: "mono", "data-schedule": name }, name); }
function keyLink(key) { return key === null || key === undefined ? "" : h("a", { href: "/k/" + encodeURIComponent(key), class: "mono" }, key); }

async function api(path, options = {}) {
  const headers = {};
  const token = sessionStorage.getItem("journal-token");
  if (token) headers["Authorization"] = "Bearer " + token;
  const init = { method: options.method || "GET", headers, signal: options.signal };
  // The server takes a change of state only as JSON (no other page can send that): even a
  // POST that carries nothing sends an empty object.
  if (options.body !== undefined || init.method !== "GET") {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(options.body === undefined ? {} : options.body);
  }
  const response = await fetch(path, init);
  if (response.status === 401) { askForToken(); throw new Unauthorized(); }
  if (options.raw) return response;
  const data = await response.json().catch(() => null);
  if (!response.ok) {
    throw new Error(data && data.error ? data.error.type + ": " + data.error.message : "HTTP " + response.status);
  }
  return data;
}

function askForToken() {
  const input = h("input", { type: "password", autocomplete: "off", placeholder: "token", "aria-label": "token" });
  const save = () => { sessionStorage.setItem("journal-token", input.value.trim()); location.reload(); };
  input.addEventListener("keydown", (e) => { if (e.key === "Enter") save(); });
  show(h("div", { class: "card token" },
    h("h1", {}, "This server needs its token"),
    h("p", { class: "muted" }, "It was started with --token-file or JOURNAL_TOKEN. The token stays in this tab only."),
    input, " ", h("button", { class: "plain", onclick: save }, "Use token")));
}

function failure(error) {
  if (error instanceof Unauthorized) return;
  show(h("div", { class: "error-box" }, String(error.message || error)));
}

// -- the list -------------------------------------------------------------------------------

const LIST_FIELDS = ["q", "status", "handler", "key", "since", "until"];

// A datetime-local value is the browser's local time; the API takes ISO 8601 (UTC here).
function localToIso(value) { return value ? new Date(value).toISOString() : ""; }
function isoToLocal(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  if (isNaN(d)) return "";
  const pad = (n) => String(n).padStart(2, "0");
  return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + "T" + pad(d.getHours()) + ":" + pad(d.getMinutes());
}

async function listPage() {
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
  const since = field("since", { type: "datetime-local", "aria-label": "since", value: isoToLocal(params.get("since")) });
  const until = field("until", { type: "datetime-local", "aria-label": "until", value: isoToLocal(params.get("until")) });
  const handlers = h("datalist", { id: "handlers" });
  const search = h("form", { class: "search", id: "search", role: "search",
    onsubmit: (e) => {
      e.preventDefault();
      const next = new URLSearchParams();
      if (chosen) next.set("status", chosen);
      for (const [name, input] of [["q", q], ["handler", handler], ["key", key]]) {
        if (input.value.trim()) next.set(name, input.value.trim());
      }
      if (since.value) next.set("since", localToIso(since.value));
      if (until.value) next.set("until", localToIso(until.value));
      if (params.get("limit")) next.set("limit", params.get("limit"));
      listPage.back = [];
      navigate(next);
    } },
    q, handler, key, h("label", { class: "muted" }, "since ", since), h("label", { class: "muted" }, "until ", until),
    h("button", { type: "submit", class: "plain" }, "Search"),
    h("button", { type: "button", class: "link", onclick: () => { listPage.back = []; navigate(new URLSearchParams()); } }, "Clear"),
    handlers);
  const body = h("tbody");
  const table = h("table", { id: "invocations" },
    h("thead", {}, h("tr", {}, ["id", "status", "handler", "key", "entries", "updated"].map((t) => h("th", {}, t)))),
    body);
  const newer = h("button", { type: "button", class: "plain", id: "prev-page" }, "← Newer");
  const older = h("button", { type: "button", class: "plain", id: "next-page" }, "Older →");
  const pageNote = h("span", { class: "muted", id: "page-number" });
  const pager = h("div", { class: "pager" }, newer, pageNote, older);
  show(h("h1", {}, "Invocations"), search, filters, table, pager);

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
        h("td", { class: "num" }, inv.entries), h("td", { title: when(inv.updated_at) }, ago(inv.updated_at)))));
      const names = [...new Set(page.invocations.map((inv) => inv.handler))].sort();
      handlers.replaceChildren(...names.map((n) => h("option", { value: n })));
      if (!page.invocations.length) {
        const filtered = LIST_FIELDS.some((name) => params.get(name));
        body.append(h("tr", {}, h("td", { colspan: 6, class: "muted" },
          filtered ? "No invocations match." : "No invocations yet.")));
      }
    } catch (error) { failure(error); return; }
    setTimeout(refresh, 1500);
  };
  refresh();
}

function plural(n, word) { return n + " " + word + (n === 1 ? "" : "s"); }

function shortHandler(handler) {
  const colon = handler.lastIndexOf(":");
  const file = handler.slice(0, colon).split("/").pop();
  return colon > 0 ? file + ":" + handler.slice(colon + 1) : handler;
}

// -- one invocation ---------------------------------------------------------------------------

const FINISHED = ["completed", "failed", "cancelled"];
const EDITABLE = ["step", "promise"];  // the entries whose value a fork may replace

function at(entry) { return entry && entry.at ? new Date(entry.at).getTime() : null; }

async function invocationPage(id) {
  const leaving = pageLeft();
  where.replaceChildren("invocation ", h("span", { class: "mono" }, id));
  const path = "/invocations/" + encodeURIComponent(id);
  const facts = h("div", { class: "card", id: "facts" });
  const operator = h("div", { class: "operator", id: "operator", role: "toolbar", "aria-label": "actions" });
  const panel = h("div", { id: "panel" });  // the open confirmation or form: kept across refreshes
  const actions = h("div", { id: "actions" });
  const waterfall = h("div", { class: "card waterfall", id: "waterfall" });
  const rows = h("tbody");
  const timeline = h("table", { class: "timeline", id: "timeline" },
    h("thead", {}, h("tr", {}, ["seq", "kind", "name", "at", "after", "value"].map((t) => h("th", {}, t)))), rows);
  const events = h("ol", { class: "events", id: "events" });
  show(h("h1", {}, id), facts, operator, panel, actions, h("h2", {}, "Waterfall"), waterfall,
    h("h2", {}, "Timeline"), timeline, h("h2", {}, "Emitted events"), events);

  const state = { doc: null, entries: [] };
  const seen = new Map();
  const running = new Map();  // seq -> the row of a step that streams live output and has not committed
  const place = (seq, row) => {  // rows stay in seq order, committed or running
    const later = [...seen.keys(), ...running.keys()].filter((s) => s > seq).sort((a, b) => a - b)[0];
    if (later !== undefined) rows.insertBefore(row, seen.get(later) || running.get(later).row); else rows.append(row);
  };
  const addChunk = (chunk) => {
    if (seen.has(chunk.seq)) return;  // the step committed: its entry shows the result
    let live = running.get(chunk.seq);
    if (!live) {
      const output = h("pre", { class: "value live-output" });
      const attempt = h("span", { class: "tag new" });
      const row = h("tr", { "data-seq": chunk.seq, "data-kind": "running" },
        h("td", { class: "num" }, chunk.seq), h("td", { class: "kind" }, "running", attempt),
        h("td", { class: "mono" }, ""), h("td", {}, ""), h("td", {}, ""), h("td", {}, output));
      live = { row, output, attempt: attempt, number: null };
      running.set(chunk.seq, live);
      place(chunk.seq, row);
    }
    if (chunk.index === 0 || chunk.attempt !== live.number) {  // another attempt, or run again: start over
      live.output.textContent = "";
      live.number = chunk.attempt;
      live.attempt.textContent = "live, attempt " + chunk.attempt;
    }
    live.output.textContent += chunk.base64 ? "[" + atob(chunk.data).length + " bytes]" : chunk.data;
  };
  let previousAt = null;
  const addEntry = (entry, live) => {
    if (seen.has(entry.seq)) return;
    const streamed = running.get(entry.seq);
    if (streamed) { streamed.row.remove(); running.delete(entry.seq); }
    const when_ = at(entry);
    const tags = [];
    if (entry.attempts > 1) tags.push(h("span", { class: "tag retry" }, (entry.attempts - 1) + (entry.attempts > 2 ? " retries" : " retry")));
    if (entry.error) tags.push(h("span", { class: "tag error" }, "error"));
    if (live) tags.push(h("span", { class: "tag new" }, "live"));
    const value = entry.error ? entry.error : entry.value;
    const row = h("tr", { "data-seq": entry.seq, "data-kind": entry.kind },
      h("td", { class: "num" }, entry.seq), h("td", { class: "kind" }, entry.kind, tags),
      h("td", { class: "mono" }, entry.name ?? ""), h("td", { title: entry.at || "" }, when(entry.at)),
      h("td", { class: "num", title: "time since the previous entry" }, previousAt !== null && when_ !== null ? duration(when_ - previousAt) : ""),
      h("td", {}, h("pre", { class: "value" }, text(value))));
    if (when_ !== null) previousAt = when_;
    place(entry.seq, row);
    seen.set(entry.seq, row);
    state.entries.push(entry);
    if (entry.kind === "emitted") events.append(h("li", { "data-seq": entry.seq }, h("pre", {}, text(entry.value))));
    if (!state.loading) {  // (the first page of entries is drawn once, when all of it is in)
      state.entries.sort((a, b) => a.seq - b.seq);
      drawWaterfall(waterfall, state);
    }
  };

  const renderFacts = async () => {
    const doc = await api(path);
    state.doc = doc;
    const gone = ownerGone(doc);
    const list = h("dl", { class: "facts" },
      h("dt", {}, "status"), h("dd", { id: "status" }, rejected(doc) ? badge("rejected") : badge(doc.status),
        gone ? h("span", { class: "tag error", id: "owner-gone", title: "its owner's process or session ended, or its lease expired: resume it here" }, "owner gone") : null),
      h("dt", {}, "handler"), h("dd", { class: "mono", title: doc.handler }, shortHandler(doc.handler)),
      doc.owner ? [h("dt", {}, "owner"), h("dd", { class: "mono", id: "owner" },
        doc.owner.host + " pid " + doc.owner.pid + (doc.owner.alive === false ? " (gone)" : ""))] : null,
      doc.key ? [h("dt", {}, "key"), h("dd", {}, keyLink(doc.key))] : null,
      doc.tags && doc.tags.schedule ? [h("dt", {}, "schedule"), h("dd", {}, scheduleLink(doc.tags.schedule))] : null,
      doc.priority ? [h("dt", {}, "priority"), h("dd", { id: "priority" }, doc.priority)] : null,
      doc.start_at ? [h("dt", {}, "starts at"), h("dd", { id: "start-at" }, when(doc.start_at))] : null,
      doc.parent ? [h("dt", {}, "parent"), h("dd", {}, invocationLink(doc.parent))] : null,
      doc.forked_from ? [h("dt", {}, "forked from"), h("dd", { id: "forked-from" }, invocationLink(doc.forked_from))] : null,
      doc.children && doc.children.length ? [h("dt", {}, "children"), h("dd", {}, doc.children.map((c) => [invocationLink(c), " "]))] : null,
      doc.continued_as ? [h("dt", {}, "continued as"), h("dd", {}, invocationLink(doc.continued_as))] : null,
      doc.retries && doc.retries.length ? [h("dt", {}, "retries"), h("dd", { id: "retries" },
        doc.retries.flatMap((r) => [invocationLink(r.id), " ", badge(r.status), " "]))] : null,
      h("dt", {}, "created"), h("dd", {}, when(doc.created_at)),
      h("dt", {}, "updated"), h("dd", {}, when(doc.updated_at)),
      doc.steps_here ? [h("dt", {}, "in this server"), h("dd", { id: "runs" },
        plural(doc.steps_here.live, "step") + " run live, " + doc.steps_here.replayed + " replayed")] : null,
      h("dt", {}, "input"), h("dd", {}, h("pre", { id: "input" }, text(doc.input))),
      doc.status === "completed" ? [h("dt", {}, "result"), h("dd", {}, h("pre", { id: "result" }, text(doc.result)))] : null,
      doc.error ? [h("dt", {}, "error"), h("dd", {}, h("pre", { id: "error" }, doc.error.type + ": " + doc.error.message),
        tracebackOf(doc.error))] : null);
    facts.replaceChildren(list);
    // Drawn again only when what they act on changed: an operator may be typing a value.
    const acting = JSON.stringify([doc.status, doc.waiting_on, doc.divergence, doc.fork_command, ownerGone(doc), retriedAs(doc)]);
    if (acting !== state.acting) {
      state.acting = acting;
      operator.replaceChildren(...operatorButtons(doc, state, panel, renderFacts));
      actions.replaceChildren(...promiseCards(doc, renderFacts), ...divergenceCard(doc));
    }
    drawWaterfall(waterfall, state);
    return doc;
  };

  try {
    const doc = await renderFacts();
    const first = await api(path + "/entries");
    state.loading = true;
    first.entries.forEach((e) => addEntry(e, false));
    state.loading = false;
    state.entries.sort((a, b) => a.seq - b.seq);
    drawWaterfall(waterfall, state);
    if (!FINISHED.includes(doc.status)) follow(id, addEntry, addChunk, renderFacts, leaving.signal);
  } catch (error) { failure(error); }
}

// A failure that is a rejected promise the handler let through (Reject on an approval): an
// answer, not a fault, so it is shown as "rejected" and offers no Retry.
function rejected(doc) { return doc.status === "failed" && !!doc.error && doc.error.type === "PromiseRejected"; }

// The retry of a failed invocation that is running or done (one that failed or was cancelled
// does not count): it is not retried again by a click.
function retriedAs(doc) {
  const going = (doc.retries || []).filter((r) => r.status !== "failed" && r.status !== "cancelled");
  return going.length ? going[going.length - 1].id : null;
}

function ownerGone(doc) { return doc.status === "running" && !!doc.owner && doc.owner.alive === false; }

// A failure's traceback: the frames of the user's code, innermost last, as text.
function tracebackOf(error) {
  const frames = Array.isArray(error.traceback) ? error.traceback : [];
  if (!frames.length) return null;
  return h("div", { class: "traceback", id: "traceback" },
    h("div", { class: "muted" }, "Traceback (most recent call last):"),
    h("ol", {}, frames.map((f) => h("li", { class: "frame" },
      h("span", { class: "mono file" }, String(f.file ?? "?")), ":", h("span", { class: "mono" }, String(f.line ?? "?")),
      " in ", h("span", { class: "mono function" }, String(f.function ?? "?"))))));
}

// -- the waterfall ------------------------------------------------------------------------------
// Entries record when they committed, not when their step began. A bar starts where the entry
// before it (in seq order) committed, or the invocation began; when that entry committed after
// this one (they ran concurrently), the bar starts where that entry's own bar starts. Nothing
// runs before a timer fires (a step after a sleep starts at its `until` at the earliest), nor
// in a fork or retry before it was made: its entries copied from the original carry the
// original's times, and its first live step starts no earlier than the fork's creation.

function stepSpans(entries, createdAt) {
  const spans = [];
  const starts = new Map();
  let origin = null;
  let previous = null;
  let ready = null;  // the earliest the next entry can have started (a timer, the fork's creation)
  for (const entry of entries) {
    const end = at(entry);
    if (end === null) continue;
    if (origin === null) origin = end;
    let start = previous === null ? end : at(previous);
    if (previous !== null && start > end) start = Math.min(starts.get(previous.seq), end);
    if (createdAt !== null && previous !== null && at(previous) < createdAt && end >= createdAt) {
      ready = Math.max(ready ?? createdAt, createdAt);  // the first entry this fork wrote itself
    }
    if (ready !== null) start = Math.min(end, Math.max(start, ready));
    ready = null;
    if (entry.kind === "sleep" && entry.until) ready = new Date(entry.until).getTime();
    starts.set(entry.seq, start);
    if (entry.kind === "step") spans.push({ entry, start, end });
    previous = entry;
  }
  return { origin, spans };
}

// Where nothing ran for long (a wait for a promise or a timer, a crash, the time between a
// run and its retry) the axis is cut: such a gap is drawn narrow and labelled with its length,
// so a 1 ms step after a 1 min wait is still a bar one can see.
function timeAxis(origin, spans, last) {
  const busy = [];
  for (const { start, end } of [...spans].sort((a, b) => a.start - b.start)) {
    const top = busy[busy.length - 1];
    if (top && start <= top[1]) top[1] = Math.max(top[1], end); else busy.push([start, end]);
  }
  const idle = [];
  let cursor = origin;
  for (const [start, end] of busy) {
    if (start > cursor) idle.push([cursor, start]);
    cursor = Math.max(cursor, end);
  }
  if (last > cursor) idle.push([cursor, last]);
  const active = busy.reduce((sum, [s, e]) => sum + (e - s), 0);
  const cut = idle.filter(([s, e]) => e - s > Math.max(1000, 0.2 * active));
  const shown = Math.max(1, (last - origin) - cut.reduce((sum, [s, e]) => sum + (e - s), 0));
  const gapWidth = cut.length ? shown * 0.08 : 0;
  const width = shown + gapWidth * cut.length;
  const x = (t) => {  // a time, as a percentage of the track
    let units = t - origin;
    for (const [s, e] of cut) {
      if (t >= e) units += gapWidth - (e - s);
      else if (t > s) units += (gapWidth * (t - s)) / (e - s) - (t - s);
    }
    return (units / width) * 100;
  };
  return { x, cut, shown };
}

function drawWaterfall(box, state) {
  const createdAt = state.doc && state.doc.created_at ? new Date(state.doc.created_at).getTime() : null;
  const { origin, spans } = stepSpans(state.entries, createdAt);
  if (!spans.length) {
    box.replaceChildren(h("p", { class: "muted" }, "No steps yet."));
    return;
  }
  const last = Math.max(...state.entries.map((e) => at(e) || 0));
  const { x, cut, shown } = timeAxis(origin, spans, last);
  const gaps = (cls) => cut.map(([s, e]) => h("div", { class: cls, "data-left": x(s).toFixed(2),
    "data-width": (x(e) - x(s)).toFixed(2), title: "nothing ran for " + duration(e - s) }, cls === "gap-label" ? "⋯ " + duration(e - s) : null));
  // The steps the latest run in this server replayed come first in program order.
  let replayed = state.doc && state.doc.steps_here ? state.doc.steps_here.replayed_latest || 0 : 0;
  const bars = spans.map(({ entry, start, end }) => {
    const isReplayed = replayed-- > 0;
    const left = x(start);
    const width = Math.max(0.4, x(end) - left);
    const classes = ["bar", entry.error ? "failed" : "ok", isReplayed ? "replayed" : null].filter(Boolean).join(" ");
    const label = [duration(end - start)];
    if (entry.attempts > 1) label.push(entry.attempts + " attempts");
    if (isReplayed) label.push("replayed");
    return h("div", { class: "lane", "data-seq": entry.seq, "data-step": entry.name },
      h("div", { class: "lane-name mono", title: entry.name }, entry.seq + " " + entry.name),
      h("div", { class: "track" }, gaps("gap"),
        h("div", { class: classes, "data-left": left.toFixed(2), "data-width": width.toFixed(2),
          title: entry.name + ": committed " + when(entry.at) + (entry.error ? " with an error" : "") })),
      h("div", { class: "bar-label" }, label.join(" · ")));
  });
  box.replaceChildren(h("div", { class: "axis muted" }, h("div", {}),
    h("div", { class: "ticks" }, h("span", {}, "0"), h("span", {}, duration(shown) + (cut.length ? " running" : ""))), h("div", {})),
    ...bars, cut.length ? h("div", { class: "axis muted gaps" }, h("div", {}, "waits"), h("div", { class: "track" }, gaps("gap-label")), h("div", {})) : null);
  // Positions are set through the CSSOM: the page's policy allows no inline style attributes.
  for (const el of box.querySelectorAll(".bar, .gap, .gap-label")) {
    el.style.left = el.dataset.left + "%";
    el.style.width = el.dataset.width + "%";
  }
}

// -- acting on it -------------------------------------------------------------------------------

function operatorButtons(doc, state, panel, refresh) {
  const finished = FINISHED.includes(doc.status);
  const note = h("span", { class: "note", id: "action-note", role: "status" });
  const act = async (label, route, body, then) => {
    note.classList.remove("failed");
    note.setAttribute("role", "status");
    note.textContent = label + "…";
    try {
      const answer = await api("/invocations/" + encodeURIComponent(doc.id) + "/" + route, { method: "POST", body });
      note.textContent = "";
      if (then) then(answer);
    } catch (error) {
      if (error instanceof Unauthorized) return;
      note.classList.add("failed");  // an error, shown as one
      note.setAttribute("role", "alert");
      note.textContent = String(error.message);
    }
  };
  const buttons = [];
  if (!finished) {
    buttons.push(h("button", { type: "button", class: "danger", id: "cancel", onclick: () => panel.replaceChildren(
      cancelConfirmation(doc, (rollback) => act("Cancelling", "cancel", { rollback }, () => {
        panel.replaceChildren(); note.textContent = "cancellation requested"; refresh();
      }), () => panel.replaceChildren())) }, "Cancel…"));
  }
  if (doc.status === "pending" || (doc.status === "running" && (!doc.owner || doc.owner.alive === false))) {
    buttons.push(h("button", { type: "button", class: "plain", id: "resume",
      title: "run it in this server: pending, or running with its owner gone",
      onclick: () => act("Resuming", "resume", {}, () => { note.textContent = "resumed here"; refresh(); }) }, "Resume"));
  }
  buttons.push(h("button", { type: "button", class: "plain", id: "fork",
    onclick: () => panel.replaceChildren(forkForm(doc, state, () => panel.replaceChildren())) }, "Fork…"));
  if (doc.status === "failed" && !rejected(doc) && !retriedAs(doc)) {
    buttons.push(h("button", { type: "button", class: "approve", id: "retry",
      title: "fork it just before its failing step, and run the fork",
      onclick: () => act("Retrying", "retry", {}, (answer) => go("/i/" + encodeURIComponent(answer.id))) }, "Retry"));
  }
  return [...buttons, note];
}

function go(path) { history.pushState(null, "", path); route(); }

function cancelConfirmation(doc, confirm, dismiss) {
  const rollback = h("input", { type: "checkbox", id: "rollback" });
  return h("div", { class: "card confirm", id: "cancel-confirm", role: "dialog", "aria-label": "cancel" },
    h("p", {}, "Cancel ", h("span", { class: "mono" }, doc.id), "? Its handler gets Cancelled at its next context call ",
      "and may run compensating steps; it then ends cancelled."),
    doc.key ? h("label", {}, rollback, " Roll back the state of key ", h("span", { class: "mono" }, doc.key),
      " (undo the ctx.state changes it made)")
      : h("label", { class: "muted" }, (rollback.disabled = true, rollback), " Roll back its key's state (it has no key: nothing to roll back)"),
    h("div", { class: "row" },
      h("button", { type: "button", class: "danger", id: "confirm-cancel", onclick: () => confirm(rollback.checked) }, "Cancel it"),
      h("button", { type: "button", class: "link", id: "keep", onclick: dismiss }, "Keep it")));
}

// The fork form: pick the fork point, optionally replace one recorded value (JSON, checked here
// before it is sent; the server checks again).
function forkForm(doc, state, dismiss) {
  const entries = state.entries;
  const terminal = entries.find((e) => FINISHED.includes(e.kind) || e.kind === "continued_as_new");
  const end = terminal ? terminal.seq : (entries.length ? entries[entries.length - 1].seq + 1 : 1);
  const byseq = new Map(entries.map((e) => [e.seq, e]));
  const atSelect = h("select", { id: "fork-at", "aria-label": "fork point" });
  for (let seq = 1; seq <= end; seq++) {
    const e = byseq.get(seq);
    atSelect.append(h("option", { value: seq }, "seq " + seq + ": copy 0–" + (seq - 1) + ", run live from " +
      (e ? (FINISHED.includes(e.kind) ? "its end (" + e.kind + ")" : e.kind + (e.name ? " " + e.name : "")) : "where its journal ends")));
  }
  const editSelect = h("select", { id: "fork-edit", "aria-label": "value to replace" });
  const value = h("textarea", { id: "fork-value", rows: 4, spellcheck: "false", class: "mono", "aria-label": "new value (JSON)" });
  const newId = h("input", { id: "fork-new-id", placeholder: "new id (optional)", "aria-label": "new id", class: "mono" });
  const problem = h("div", { class: "problem", id: "fork-problem", role: "alert" });
  const submit = h("button", { type: "submit", class: "approve", id: "fork-submit" }, "Fork");
  const editable = () => entries.filter((e) => EDITABLE.includes(e.kind) && e.seq < Number(atSelect.value));
  const fillEdits = () => {
    const chosen = editSelect.value;
    editSelect.replaceChildren(h("option", { value: "" }, "keep every recorded value"),
      ...editable().map((e) => h("option", { value: e.seq }, "replace " + e.kind + " " + e.seq + (e.name ? " " + e.name : ""))));
    if ([...editSelect.options].some((o) => o.value === chosen)) editSelect.value = chosen;
    fillValue();
  };
  const fillValue = () => {
    const e = byseq.get(Number(editSelect.value));
    value.disabled = !editSelect.value;
    if (e && value.dataset.seq !== String(e.seq)) {
      value.value = JSON.stringify(e.error ? null : (e.value === undefined ? null : e.value), null, 2);
      value.dataset.seq = String(e.seq);
    }
    if (!e) { value.value = ""; delete value.dataset.seq; }
    check();
  };
  const check = () => {
    problem.textContent = "";
    if (editSelect.value) {
      try { JSON.parse(value.value); } catch (error) { problem.textContent = "The new value is not JSON: " + error.message; }
    }
    submit.disabled = problem.textContent !== "";
    return !submit.disabled;
  };
  atSelect.addEventListener("change", fillEdits);
  editSelect.addEventListener("change", fillValue);
  value.addEventListener("input", check);
  const form = h("form", { class: "card fork-form", id: "fork-form",
    onsubmit: async (e) => {
      e.preventDefault();
      if (!check()) return;
      const body = { at: Number(atSelect.value) };
      if (editSelect.value) body.set = { [editSelect.value]: JSON.parse(value.value) };
      if (newId.value.trim()) body.new_id = newId.value.trim();
      try {
        const answer = await api("/invocations/" + encodeURIComponent(doc.id) + "/fork", { method: "POST", body });
        go("/i/" + encodeURIComponent(answer.id));
      } catch (error) { if (!(error instanceof Unauthorized)) problem.textContent = String(error.message); }
    } },
    h("h2", {}, "Fork ", h("span", { class: "mono" }, doc.id)),
    h("p", { class: "muted" }, "Entries before the fork point are copied into a new invocation, which replays them and runs live from there; this one is left as it is."),
    h("label", {}, "Fork point ", atSelect), h("label", {}, "Value ", editSelect), value, newId, problem,
    h("div", { class: "row" }, submit, h("button", { type: "button", class: "link", onclick: dismiss }, "Close")));
  // Default: before the failing step of a failed run, else at the end.
  const failing = [...entries].reverse().find((e) => e.kind === "step" && e.error);
  atSelect.value = String(failing ? failing.seq : end);
  fillEdits();
  return form;
}

// -- promises -----------------------------------------------------------------------------------

function promiseCards(doc, refresh) {
  const promises = doc.waiting_on.filter((w) => w.kind === "promise");
  const others = doc.waiting_on.filter((w) => w.kind !== "promise");
  const cards = [];
  if (promises.length) {
    cards.push(h("div", { class: "card", id: "promises" }, h("h2", {}, "Waiting for"),
      promises.map((p) => promiseRow(doc.id, p, refresh))));
  }
  if (others.length) {
    cards.push(h("div", { class: "card" }, h("h2", {}, "Waiting on"), h("ul", {}, others.map((w) =>
      h("li", {}, w.kind === "timer" ? "a timer until " + when(w.until)
        : w.kind === "handler" ? "a worker that has handler " + (w.name ?? w.handler ?? "")
        : w.kind === "limit" ? "a unit of the limit " + (w.name ?? "")
          : [w.kind + " ", w.id ? invocationLink(w.id) : text(w.name ?? "")])))));
  }
  return cards;
}

// A value that fits a JSON Schema: what the approve box starts with when the server gives no
// example. `$ref`s point into the root's `$defs`, as msgspec and Pydantic write them.
function defaultFor(schema, depth = 0, root = schema) {
  if (!schema || typeof schema !== "object" || depth > 8) return true;
  if (typeof schema.$ref === "string") {
    const name = schema.$ref.split("/").pop();
    const defs = (root && (root.$defs || root.definitions)) || {};
    return defaultFor(defs[name], depth + 1, root);
  }
  if ("default" in schema) return schema.default;
  if ("const" in schema) return schema.const;
  if (Array.isArray(schema.enum) && schema.enum.length) return schema.enum[0];
  const alternatives = schema.anyOf || schema.oneOf;
  if (Array.isArray(alternatives) && alternatives.length) {
    return defaultFor(alternatives.find((s) => s && s.type !== "null") || alternatives[0], depth + 1, root);
  }
  const type = Array.isArray(schema.type) ? schema.type.find((t) => t !== "null") || schema.type[0] : schema.type;
  switch (type) {
    case "boolean": return true;
    case "integer": case "number": return typeof schema.minimum === "number" ? schema.minimum : 0;
    case "string": return schema.format === "date-time" ? new Date().toISOString() : "";
    case "array": return [];
    case "null": return null;
    case "object": {
      const out = {};
      const props = schema.properties || {};
      for (const name of schema.required || Object.keys(props)) out[name] = defaultFor(props[name], depth + 1, root);
      return out;
    }
    default: return true;
  }
}

// Whether a value says no: `false`, or an object with a `false` among its fields. The green
// Approve never sends one; the button then reads "Send" (the value goes as typed).
function saysNo(value) {
  if (value === false) return true;
  return !!value && typeof value === "object" && !Array.isArray(value) && Object.values(value).some((v) => v === false);
}

function promiseRow(id, promise, refresh) {
  const name = promise.name;
  const schema = promise.schema || null;
  // What approving means for the type: every yes/no of it yes (the server's example, for a
  // form to start from, has `false` for each), the rest as the example has it.
  const initial = JSON.stringify(schema ? defaultFor(schema) : ("example" in promise ? promise.example : true));
  const value = h("input", { value: initial, "aria-label": "value of " + name, class: "mono value-input" });
  const reason = h("input", { placeholder: "reason for rejecting", "aria-label": "reason" });
  const note = h("span", { class: "note refusal", role: "alert" });
  const preview = h("code", { class: "muted sends", "aria-label": "what will be sent" });
  const approveButton = h("button", { class: "approve" }, "Approve");
  const send = async (body) => {
    note.textContent = "";
    try {
      await api("/invocations/" + encodeURIComponent(id) + "/promises/" + encodeURIComponent(name), { method: "POST", body });
      note.textContent = "sent";
      refresh();
    } catch (error) { if (!(error instanceof Unauthorized)) note.textContent = String(error.message); }
  };
  const parsed = () => { try { return { ok: true, value: JSON.parse(value.value) }; } catch { return { ok: false }; } };
  const describe = () => {
    const got = parsed();
    approveButton.disabled = !got.ok;
    const no = got.ok && saysNo(got.value);
    approveButton.textContent = no ? "Send" : "Approve";
    approveButton.className = no ? "plain" : "approve";
    approveButton.title = no ? "this value says no: it is sent as typed (Reject rejects the promise instead)" : "";
    preview.textContent = got.ok ? "sends " + JSON.stringify(got.value) : "not JSON yet";
  };
  value.addEventListener("input", describe);
  approveButton.addEventListener("click", () => {
    const got = parsed();
    if (!got.ok) { note.textContent = "the value is not JSON"; return; }
    send({ value: got.value });
  });
  describe();
  return h("div", { class: "promise", "data-promise": name },
    h("strong", { class: "mono" }, name),
    schema || promise.type ? h("code", { class: "schema muted", title: schema ? JSON.stringify(schema) : "" },
      promise.type ? String(promise.type) : schemaSummary(schema)) : null,
    value, approveButton, preview, reason,
    h("button", { class: "reject", onclick: () => send({ reject: reason.value || "rejected in the web UI" }) }, "Reject"),
    note);
}

function schemaSummary(schema) {
  if (schema.title) return schema.title;
  if (schema.type === "object" && schema.properties) {
    return "{" + Object.entries(schema.properties).map(([k, v]) => k + ": " + (v && v.type ? [].concat(v.type).join("|") : "any")).join(", ") + "}";
  }
  return schema.type ? [].concat(schema.type).join("|") : "a value";
}

function divergenceCard(doc) {
  if (doc.status !== "diverged" || !doc.divergence) return [];
  const command = doc.fork_command;
  return [h("div", { class: "card divergence", id: "divergence" },
    h("h2", {}, "Diverged: the code no longer makes the calls its journal records"),
    h("pre", {}, doc.divergence),
    command ? [h("p", {}, "Continue it from before the divergence with:"), h("pre", { id: "fork-command" }, command),
      h("button", { class: "plain", onclick: () => navigator.clipboard && navigator.clipboard.writeText(command) }, "Copy")] : null,
    h("p", { class: "muted" }, "Or fix the code and run: journal resume " + doc.id))];
}

// Server-Sent Events read with fetch, so the bearer token can go with them.
async function follow(id, addEntry, addChunk, refresh, signal) {
  while (!signal.aborted) {
    let finished = false;
    try {
      const response = await api("/invocations/" + encodeURIComponent(id) + "/events", { raw: true, signal });
      if (!response.ok) return;
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          let name = "message", data = "";
          for (const line of block.split("\n")) {
            if (line.startsWith("event: ")) name = line.slice(7);
            else if (line.startsWith("data: ")) data += line.slice(6);
          }
          const payload = JSON.parse(data);
          if (name === "entry") addEntry(payload, true);
          else if (name === "chunk") addChunk(payload);
          else if (name === "status") await refresh();
          else if (name === "end") { finished = true; await refresh(); }
        }
      }
    } catch (error) {
      if (error instanceof Unauthorized || signal.aborted) return;
    }
    if (finished || signal.aborted) return;
    await new Promise((resolve) => setTimeout(resolve, 1000));  // the server restarted: follow again
  }
}

// -- a key -----------------------------------------------------------------------------------

async function keyPage(key) {
  where.replaceChildren("key ", h("span", { class: "mono" }, key));
  try {
    const doc = await api("/keys/" + encodeURIComponent(key) + "/state");
    const names = Object.keys(doc.state).sort();
    show(h("h1", {}, "Key " + key),
      h("h2", {}, "State"),
      names.length ? h("table", { id: "state" }, h("thead", {}, h("tr", {}, h("th", {}, "name"), h("th", {}, "value"))),
        h("tbody", {}, names.map((n) => h("tr", {}, h("td", { class: "mono" }, n), h("td", {}, h("pre", {}, text(doc.state[n])))))))
        : h("p", { class: "muted" }, "No state set."),
      h("h2", {}, "Queue"),
      doc.queue.length ? h("ol", { id: "queue" }, doc.queue.map((i) => h("li", {}, invocationLink(i))))
        : h("p", { class: "muted" }, "No unfinished invocations."));
  } catch (error) { failure(error); }
}

// -- schedules -------------------------------------------------------------------------------

async function schedulesPage() {
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

// -- routing ---------------------------------------------------------------------------------

// Aborted when the page is left for another (its event stream ends with it).
let leave = new AbortController();
function pageLeft() { return leave; }

function route() {
  leave.abort();
  leave = new AbortController();
  const path = location.pathname;
  if (path.startsWith("/i/")) return invocationPage(decodeURIComponent(path.slice(3)));
  if (path.startsWith("/k/")) return keyPage(decodeURIComponent(path.slice(3)));
  if (path === "/s") return schedulesPage();
  return listPage();
}

window.addEventListener("popstate", route);
route();
