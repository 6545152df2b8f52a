// What every page of the console shares: building the DOM from hostile data, formatting,
// links, and the API (with the token). Journal contents are hostile data (model output): they
// only ever become text nodes (textContent) or attribute values, never markup; every page
// builds its DOM through `h` below, and no module of the console writes HTML.

export const STATUSES = ["pending", "running", "suspended", "diverged", "completed", "failed", "cancelled"];
export const FINISHED = ["completed", "failed", "cancelled"];
const main = document.getElementById("main");
export const where = document.getElementById("where");

export class Unauthorized extends Error {}

// h("td", {class: "num"}, "text", node, ...): strings become text nodes, never HTML.
export function h(tag, attrs, ...children) {
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

export function show(...nodes) { main.replaceChildren(...nodes); }
export function text(value) { return value === undefined ? "" : (typeof value === "string" ? value : JSON.stringify(value, null, 2)); }
export function badge(status) { return h("span", { class: "status " + status, "data-status": status }, status); }
// Times in UTC, saying so, as the command line shows them (the browser's zone may not be the server's).
export function when(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return isNaN(d) ? String(iso) : d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "").replace("Z", "") + " UTC";
}
export function ago(iso) {
  if (!iso) return "";
  const s = Math.max(0, (Date.now() - new Date(iso).getTime()) / 1000);
  if (s < 60) return Math.round(s) + "s ago";
  if (s < 3600) return Math.round(s / 60) + "m ago";
  if (s < 86400) return Math.round(s / 3600) + "h ago";
  return Math.round(s / 86400) + "d ago";
}
export function duration(ms) {
  if (ms === null || ms === undefined || ms < 0) return "";
  if (ms < 1000) return Math.round(ms) + " ms";
  if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
  const s = Math.round(ms / 1000);
  if (s < 3600) return Math.floor(s / 60) + " min" + (s % 60 ? " " + (s % 60) + " s" : "");
  const m = Math.round(s / 60);
  if (m < 1440) return Math.floor(m / 60) + " h" + (m % 60 ? " " + (m % 60) + " min" : "");
  return Math.floor(m / 1440) + " d" + (Math.floor(m / 60) % 24 ? " " + (Math.floor(m / 60) % 24) + " h" : "");
}
export function plural(n, word) { return n + " " + word + (n === 1 ? "" : "s"); }

export function shortHandler(handler) {
  const colon = handler.lastIndexOf(":");
  const file = handler.slice(0, colon).split("/").pop();
  return colon > 0 ? file + ":" + handler.slice(colon + 1) : handler;
}

// A datetime-local value is the browser's local time; the API takes ISO 8601 (UTC here).
export function localToIso(value) { return value ? new Date(value).toISOString() : ""; }
export function isoToLocal(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  if (isNaN(d)) return "";
  const pad = (n) => String(n).padStart(2, "0");
  return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + "T" + pad(d.getHours()) + ":" + pad(d.getMinutes());
}

export function invocationLink(id) { return h("a", { href: "/i/" + encodeURIComponent(id), class: "mono" }, id); }
export function scheduleLink(name) { return h("a", { href: "/s#" + encodeURIComponent(name), class: "mono", "data-schedule": name }, name); }
export function keyLink(key) { return key === null || key === undefined ? "" : h("a", { href: "/k/" + encodeURIComponent(key), class: "mono" }, key); }
export function tagLink(key, value) {
  return h("a", { class: "tag", href: "/?" + new URLSearchParams({ tag: key + ":" + value }) }, key + "=" + value);
}

// -- what an invocation's document says -------------------------------------------------------

// A failure that is a rejected promise the handler let through (Reject on an approval): an
// answer, not a fault, so it is shown as "rejected" and offers no Retry.
export function rejected(doc) { return doc.status === "failed" && !!doc.error && doc.error.type === "PromiseRejected"; }

// The retry of a failed invocation that is running or done (one that failed or was cancelled
// does not count): it is not retried again by a click.
export function retriedAs(doc) {
  const going = (doc.retries || []).filter((r) => r.status !== "failed" && r.status !== "cancelled");
  return going.length ? going[going.length - 1].id : null;
}

// -- the API --------------------------------------------------------------------------------

export async function api(path, options = {}) {
  const headers = { ...(options.headers || {}) };
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

export function failure(error) {
  if (error instanceof Unauthorized) return;
  show(h("div", { class: "error-box" }, String(error.message || error)));
}

// -- moving between pages -------------------------------------------------------------------

// The router (app.js) draws the page of the address again on this event, as on going back.
export const NAVIGATED = "journal-navigated";

export function go(path) { history.pushState(null, "", path); window.dispatchEvent(new Event(NAVIGATED)); }

// Aborted when the page is left for another (its event stream ends with it).
let leave = new AbortController();
export function pageLeft() { return leave; }
export function leavePage() {
  leave.abort();
  leave = new AbortController();
}
