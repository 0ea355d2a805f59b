// Pages of the key's runs and threads in the side column (GET /runs newest first, GET /threads
// most recently active first): a link each, the one on screen marked, older ones on demand.

import { get } from "./api.js";
import { clear, clockTime, el } from "./dom.js";

const PAGE = 20;

/** A list of `path`'s pages (`key`: the page's array) in `nav`, each entry `item(entry)`. */
export class PagedList {
  constructor(nav, { list, status, more, refresh, path, key, item, attr, noun }) {
    this.list = nav.querySelector(list);
    this.status = nav.querySelector(status);
    this.more = nav.querySelector(more);
    Object.assign(this, { path, key, item, attr, noun });
    this.current = null;
    this.cursor = null;
    nav.querySelector(refresh).addEventListener("click", () => this.refresh());
    this.more.addEventListener("click", () => this.#load(this.cursor));
  }

  async refresh() {
    await this.#load(null);
  }

  /** Mark the entry on screen (aria-current) */
  select(id) {
    this.current = id;
    for (const link of this.list.querySelectorAll("a")) {
      if (link.dataset[this.attr] === id) link.setAttribute("aria-current", "page");
      else link.removeAttribute("aria-current");
    }
  }

  async #load(cursor) {
    this.status.textContent = "Loading…";
    let page;
    try {
      const query = new URLSearchParams({ limit: String(PAGE) });
      if (cursor) query.set("cursor", cursor);
      page = await get(`${this.path}?${query}`);
    } catch (error) {
      this.status.textContent = `Could not list ${this.noun}: ${error.message}`;
      return;
    }
    if (!cursor) clear(this.list);
    for (const entry of page[this.key]) this.list.append(this.item(entry));
    this.cursor = page.next_cursor;
    this.more.hidden = !this.cursor;
    this.status.textContent = this.list.children.length ? "" : `No ${this.noun} yet.`;
    this.select(this.current);
  }
}

export class RunList extends PagedList {
  constructor(nav) {
    super(nav, {
      list: "#run-list",
      status: "#runs-status",
      more: "#runs-more",
      refresh: "#runs-refresh",
      path: "runs",
      key: "runs",
      item,
      attr: "run",
      noun: "runs",
    });
  }
}

function item(run) {
  const reason = run.result?.reason;
  return el("li", {},
    el("a", { href: `#/runs/${encodeURIComponent(run.id)}`, "data-run": run.id },
      el("span", { class: "run-line" },
        el("span", { class: `badge status-${run.status}` }, run.status),
        reason && reason !== run.status ? el("span", { class: "reason" }, reason) : null,
        el("time", { datetime: run.created_at, class: "meta" }, clockTime(run.created_at))),
      el("span", { class: "run-task" }, run.task)));
}
