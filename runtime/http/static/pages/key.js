// A key (/k/KEY): its durable state and the queue of its unfinished invocations.

import { api, failure, h, invocationLink, show, text, where } from "../common.js";

export async function keyPage(key) {
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
