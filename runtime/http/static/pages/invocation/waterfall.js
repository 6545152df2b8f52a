// The waterfall of an invocation's steps, from the times its entries committed.

import { duration, h, when } from "../../common.js";

export function at(entry) { return entry && entry.at ? new Date(entry.at).getTime() : null; }

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

export function drawWaterfall(box, state) {
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
