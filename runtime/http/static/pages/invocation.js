// One invocation (/i/ID): its facts, the operator's actions, what it waits for, its published
// values, the waterfall of its steps and its timeline, followed live over its event stream.

import {
  FINISHED, api, badge, duration, failure, h, invocationLink, keyLink, pageLeft, plural, rejected, retriedAs,
  scheduleLink, shortHandler, show, text, when, where,
} from "../common.js";
import { operatorButtons } from "./invocation/actions.js";
import { follow } from "./invocation/events.js";
import { divergenceCard, promiseCards } from "./invocation/promises.js";
import { at, drawWaterfall } from "./invocation/waterfall.js";

export async function invocationPage(id) {
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
  const published = h("dl", { class: "facts", id: "published" }, h("dd", { class: "muted" }, "none yet"));
  show(h("h1", {}, id), facts, operator, panel, actions, h("h2", {}, "Published values"), published,
    h("h2", {}, "Waterfall"), waterfall, h("h2", {}, "Timeline"), timeline, h("h2", {}, "Emitted events"), events);
  // The latest value under each name (`ctx.publish`), from the journal's `published` entries
  // as they arrive: the page keeps the one of the highest seq.
  const latest = new Map();
  const publish = (entry) => {
    const known = latest.get(entry.name);
    if (known && known.seq > entry.seq) return;
    latest.set(entry.name, entry);
    published.replaceChildren(...[...latest.keys()].sort().flatMap((name) => [
      h("dt", { class: "mono" }, name),
      h("dd", { "data-name": name, title: "seq " + latest.get(name).seq + ", " + (latest.get(name).at || "") },
        h("pre", { class: "value" }, text(latest.get(name).value)))]));
  };

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
    if (entry.kind === "published") publish(entry);
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
