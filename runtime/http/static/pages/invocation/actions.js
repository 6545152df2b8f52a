// Acting on an invocation: cancel (with rollback), resume here, fork with an edited value, retry.

import { FINISHED, Unauthorized, api, go, h, rejected, retriedAs } from "../../common.js";

const EDITABLE = ["step", "promise"];  // the entries whose value a fork may replace

export function operatorButtons(doc, state, panel, refresh) {
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
