// A JSON value as a collapsible tree: each object and array a <details> (open), its summary
// saying how many keys or items it holds; scalars typed by class. Text goes in as text.

import { el } from "./dom.js";

/** The tree of `value` (a parsed JSON value), as one node. */
export function jsonView(value) {
  return el("div", { class: "json-view" }, node(value));
}

function node(value, label) {
  const key = label === undefined ? null : el("span", { class: "json-key", text: label });
  if (value !== null && typeof value === "object") {
    const isArray = Array.isArray(value);
    const entries = isArray ? value.map((v, i) => [String(i), v]) : Object.entries(value);
    const size = isArray
      ? `[${entries.length} ${entries.length === 1 ? "item" : "items"}]`
      : `{${entries.length} ${entries.length === 1 ? "key" : "keys"}}`;
    const summary = el("summary", {}, key, el("span", { class: "json-size", text: size }));
    const children = el("ul", { class: "json-children" },
      entries.map(([k, v]) => el("li", {}, node(v, k))));
    return el("details", { class: "json-node", open: true }, summary, children);
  }
  const type = value === null ? "null" : typeof value;
  const shown = typeof value === "string" ? JSON.stringify(value) : String(value);
  return el("span", { class: "json-leaf" }, key, el("span", { class: `json-${type}`, text: shown }));
}
