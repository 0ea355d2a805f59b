// Recent runs (GET /runs, newest first): status and reason each; a link opens the run.

import { get } from "./api.js";
import { clear, clockTime, el } from "./dom.js";

const PAGE = 20;

export class RunList {
  constructor(nav) {
    this.list = nav.querySelector("#run-list");
    this.status = nav.querySelector("#runs-status");
    this.more = nav.querySelector("#runs-more");
    this.current = null;
    this.cursor = null;
    nav.querySelector("#runs-refresh").addEventListener("click", () => this.refresh());
    this.more.addEventListener("click", () => this.#load(this.cursor));
  }

  async refresh() {
    await this.#load(null);
  }

  /** Mark the run on screen (aria-current) */
  select(id) {
    this.current = id;
    for (const link of this.list.querySelectorAll("a")) {
      if (link.dataset.run === id) link.setAttribute("aria-current", "page");
      else link.removeAttribute("aria-current");
    }
  }

  async #load(cursor) {
    this.status.textContent = "Loading…";
    let page;
    try {
      const query = new URLSearchParams({ limit: String(PAGE) });
      if (cursor) query.set("cursor", cursor);
      page = await get(`runs?${query}`);
    } catch (error) {
      this.status.textContent = `Could not list runs: ${error.message}`;
      return;
    }
    if (!cursor) clear(this.list);
    for (const run of page.runs) this.list.append(item(run));
    this.cursor = page.next_cursor;
    this.more.hidden = !this.cursor;
    this.status.textContent = this.list.children.length ? "" : "No runs yet.";
    this.select(this.current);
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
