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
function when(iso) { return iso ? new Date(iso).toLocaleString() : ""; }
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
  return Math.round(ms / 60000) + " min";
}
function invocationLink(id) { return h("a", { href: "/i/" + encodeURIComponent(id), class: "mono" }, id); }
function keyLink(key) { return key === null || key === undefined ? "" : h("a", { href: "/k/" + encodeURIComponent(key), class: "mono" }, key); }

async function api(path, options = {}) {
  const headers = {};
  const token = sessionStorage.getItem("journal-token");
  if (token) headers["Authorization"] = "Bearer " + token;
  const init = { method: options.method || "GET", headers, signal: options.signal };
  if (options.body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(options.body);
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

async function listPage() {
  const params = new URLSearchParams(location.search);
  const chosen = params.get("status");
  where.replaceChildren("invocations");
  const filters = h("div", { class: "filters", role: "toolbar" },
    [null, ...STATUSES].map((status) => h("button", {
      class: status === chosen ? "on" : null, "data-filter": status || "all",
      onclick: () => {
        const next = new URLSearchParams(location.search);
        if (status) next.set("status", status); else next.delete("status");
        history.replaceState(null, "", "/" + (next.toString() ? "?" + next : ""));
        listPage();
      },
    }, status || "all")));
  const body = h("tbody");
  const table = h("table", { id: "invocations" },
    h("thead", {}, h("tr", {}, ["id", "status", "handler", "key", "entries", "updated"].map((t) => h("th", {}, t)))),
    body);
  show(h("h1", {}, "Invocations"), filters, table);
  const token = Symbol();
  listPage.current = token;
  const refresh = async () => {
    if (listPage.current !== token) return;
    try {
      const query = chosen ? "?status=" + encodeURIComponent(chosen) + "&limit=200" : "?limit=200";
      const page = await api("/invocations" + query);
      body.replaceChildren(...page.invocations.map((inv) => h("tr", { "data-id": inv.id },
        h("td", {}, invocationLink(inv.id)), h("td", {}, badge(inv.status)),
        h("td", { class: "mono" }, shortHandler(inv.handler)), h("td", {}, keyLink(inv.key)),
        h("td", { class: "num" }, inv.entries), h("td", { title: when(inv.updated_at) }, ago(inv.updated_at)))));
      if (!page.invocations.length) {
        body.append(h("tr", {}, h("td", { colspan: 6, class: "muted" }, "No invocations" + (chosen ? " " + chosen : "") + " yet.")));
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

async function invocationPage(id) {
  where.replaceChildren("invocation ", h("span", { class: "mono" }, id));
  const facts = h("div", { class: "card", id: "facts" });
  const actions = h("div", { id: "actions" });
  const rows = h("tbody");
  const timeline = h("table", { class: "timeline", id: "timeline" },
    h("thead", {}, h("tr", {}, ["seq", "kind", "name", "at", "after", "value"].map((t) => h("th", {}, t)))), rows);
  const events = h("ol", { class: "events", id: "events" });
  show(h("h1", {}, id), facts, actions, h("h2", {}, "Timeline"), timeline,
    h("h2", {}, "Emitted events"), events);

  const seen = new Map();
  let previousAt = null;
  const addEntry = (entry, live) => {
    if (seen.has(entry.seq)) return;
    const at = entry.at ? new Date(entry.at).getTime() : null;
    const tags = [];
    if (entry.attempts > 1) tags.push(h("span", { class: "tag retry" }, (entry.attempts - 1) + (entry.attempts > 2 ? " retries" : " retry")));
    if (entry.error) tags.push(h("span", { class: "tag error" }, "error"));
    if (live) tags.push(h("span", { class: "tag new" }, "live"));
    const value = entry.error ? entry.error : entry.value;
    const row = h("tr", { "data-seq": entry.seq, "data-kind": entry.kind },
      h("td", { class: "num" }, entry.seq), h("td", { class: "kind" }, entry.kind, tags),
      h("td", { class: "mono" }, entry.name ?? ""), h("td", { title: entry.at || "" }, when(entry.at)),
      h("td", { class: "num", title: "time since the previous entry" }, previousAt !== null && at !== null ? duration(at - previousAt) : ""),
      h("td", {}, h("pre", { class: "value" }, text(value))));
    if (at !== null) previousAt = at;
    seen.set(entry.seq, row);
    const later = [...seen.keys()].filter((s) => s > entry.seq).sort((a, b) => a - b)[0];
    if (later !== undefined) rows.insertBefore(row, seen.get(later)); else rows.append(row);
    if (entry.kind === "emitted") events.append(h("li", { "data-seq": entry.seq }, h("pre", {}, text(entry.value))));
  };

  const renderFacts = async () => {
    const doc = await api("/invocations/" + encodeURIComponent(id));
    const list = h("dl", { class: "facts" },
      h("dt", {}, "status"), h("dd", { id: "status" }, badge(doc.status)),
      h("dt", {}, "handler"), h("dd", { class: "mono", title: doc.handler }, shortHandler(doc.handler)),
      doc.key ? [h("dt", {}, "key"), h("dd", {}, keyLink(doc.key))] : null,
      doc.parent ? [h("dt", {}, "parent"), h("dd", {}, invocationLink(doc.parent))] : null,
      doc.children.length ? [h("dt", {}, "children"), h("dd", {}, doc.children.map((c) => [invocationLink(c), " "]))] : null,
      doc.continued_as ? [h("dt", {}, "continued as"), h("dd", {}, invocationLink(doc.continued_as))] : null,
      h("dt", {}, "created"), h("dd", {}, when(doc.created_at)),
      h("dt", {}, "updated"), h("dd", {}, when(doc.updated_at)),
      doc.steps_here ? [h("dt", {}, "in this server"), h("dd", { id: "runs" },
        plural(doc.steps_here.live, "step") + " run live, " + doc.steps_here.replayed + " replayed")] : null,
      h("dt", {}, "input"), h("dd", {}, h("pre", { id: "input" }, text(doc.input))),
      doc.status === "completed" ? [h("dt", {}, "result"), h("dd", {}, h("pre", { id: "result" }, text(doc.result)))] : null,
      doc.error ? [h("dt", {}, "error"), h("dd", {}, h("pre", { id: "error" }, doc.error.type + ": " + doc.error.message))] : null);
    facts.replaceChildren(list);
    actions.replaceChildren(...promiseCards(doc, renderFacts), ...divergenceCard(doc));
    return doc;
  };

  try {
    const doc = await renderFacts();
    const first = await api("/invocations/" + encodeURIComponent(id) + "/entries");
    first.entries.forEach((e) => addEntry(e, false));
    if (!["completed", "failed", "cancelled"].includes(doc.status)) follow(id, addEntry, renderFacts);
  } catch (error) { failure(error); }
}

function promiseCards(doc, refresh) {
  const promises = doc.waiting_on.filter((w) => w.kind === "promise");
  const others = doc.waiting_on.filter((w) => w.kind !== "promise");
  const cards = [];
  if (promises.length) {
    cards.push(h("div", { class: "card", id: "promises" }, h("h2", {}, "Waiting for"),
      promises.map((p) => promiseRow(doc.id, p.name, refresh))));
  }
  if (others.length) {
    cards.push(h("div", { class: "card" }, h("h2", {}, "Waiting on"), h("ul", {}, others.map((w) =>
      h("li", {}, w.kind === "timer" ? "a timer until " + when(w.until) : [w.kind + " ", invocationLink(w.id)])))));
  }
  return cards;
}

function promiseRow(id, name, refresh) {
  const value = h("input", { value: "true", "aria-label": "value of " + name, class: "mono" });
  const reason = h("input", { placeholder: "reason for rejecting", "aria-label": "reason" });
  const note = h("span", { class: "muted" });
  const send = async (body) => {
    try {
      await api("/invocations/" + encodeURIComponent(id) + "/promises/" + encodeURIComponent(name), { method: "POST", body });
      note.textContent = "sent";
      refresh();
    } catch (error) { if (!(error instanceof Unauthorized)) note.textContent = String(error.message); }
  };
  const approve = () => {
    let parsed;
    try { parsed = JSON.parse(value.value); } catch { note.textContent = "the value is not JSON"; return; }
    send({ value: parsed });
  };
  return h("div", { class: "promise", "data-promise": name },
    h("strong", { class: "mono" }, name), value,
    h("button", { class: "approve", onclick: approve }, "Approve"), reason,
    h("button", { class: "reject", onclick: () => send({ reject: reason.value || "rejected in the web UI" }) }, "Reject"),
    note);
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
async function follow(id, addEntry, refresh) {
  for (;;) {
    let finished = false;
    try {
      const response = await api("/invocations/" + encodeURIComponent(id) + "/events", { raw: true });
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
          else if (name === "status") await refresh();
          else if (name === "end") { finished = true; await refresh(); }
        }
      }
    } catch (error) {
      if (error instanceof Unauthorized) return;
    }
    if (finished) return;
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

// -- routing ---------------------------------------------------------------------------------

function route() {
  const path = location.pathname;
  if (path.startsWith("/i/")) return invocationPage(decodeURIComponent(path.slice(3)));
  if (path.startsWith("/k/")) return keyPage(decodeURIComponent(path.slice(3)));
  return listPage();
}

route();
