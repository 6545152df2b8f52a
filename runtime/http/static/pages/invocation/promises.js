// What an invocation waits for: the promises an operator approves or rejects (a value of the
// promise's type, shown before it is sent), and the divergence of a diverged run.

import { Unauthorized, api, h, invocationLink, text, when } from "../../common.js";

export function promiseCards(doc, refresh) {
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
  // A spent budget (`budget:SCOPE`) asks for more: its value is how much more this run may use.
  const budget = name.startsWith("budget:");
  const initial = budget ? '{"tokens": 10000}'
    : JSON.stringify(schema ? defaultFor(schema) : ("example" in promise ? promise.example : true));
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
    approveButton.textContent = budget ? "Allow more" : no ? "Send" : "Approve";
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

export function divergenceCard(doc) {
  if (doc.status !== "diverged" || !doc.divergence) return [];
  const command = doc.fork_command;
  return [h("div", { class: "card divergence", id: "divergence" },
    h("h2", {}, "Diverged: the code no longer makes the calls its journal records"),
    h("pre", {}, doc.divergence),
    command ? [h("p", {}, "Continue it from before the divergence with:"), h("pre", { id: "fork-command" }, command),
      h("button", { class: "plain", onclick: () => navigator.clipboard && navigator.clipboard.writeText(command) }, "Copy")] : null,
    h("p", { class: "muted" }, "Or fix the code and run: journal resume " + doc.id))];
}
