// Threads (DESIGN §19): the list of the key's threads (GET /threads, most recently active
// first), and one thread as its runs in order (GET /threads/{id}/runs), with a composer that
// continues it (POST /runs with its thread_id). AG-UI's and A2A's threads are listed and shown
// too; they are continued through their protocol, so they have no composer.

import { ApiError, get, post } from "./api.js";
import { clear, clockTime, el } from "./dom.js";

const PAGE = 20;
const FACES = ["ag-ui:", "a2a:"];

export function threadPath(id) {
  return `threads/${encodeURIComponent(id)}`;
}

export function threadHref(id) {
  return `#/threads/${encodeURIComponent(id)}`;
}

/** Whether POST /runs may continue the thread (not an AG-UI thread or an A2A context). */
export function continuable(id) {
  return !FACES.some((prefix) => id.startsWith(prefix));
}

export class ThreadList {
  constructor(nav) {
    this.list = nav.querySelector("#thread-list");
    this.status = nav.querySelector("#threads-status");
    this.more = nav.querySelector("#threads-more");
    this.current = null;
    this.cursor = null;
    nav.querySelector("#threads-refresh").addEventListener("click", () => this.refresh());
    this.more.addEventListener("click", () => this.#load(this.cursor));
  }

  async refresh() {
    await this.#load(null);
  }

  select(id) {
    this.current = id;
    for (const link of this.list.querySelectorAll("a")) {
      if (link.dataset.thread === id) link.setAttribute("aria-current", "page");
      else link.removeAttribute("aria-current");
    }
  }

  async #load(cursor) {
    this.status.textContent = "Loading…";
    let page;
    try {
      const query = new URLSearchParams({ limit: String(PAGE) });
      if (cursor) query.set("cursor", cursor);
      page = await get(`threads?${query}`);
    } catch (error) {
      this.status.textContent = `Could not list threads: ${error.message}`;
      return;
    }
    if (!cursor) clear(this.list);
    for (const thread of page.threads) this.list.append(threadItem(thread));
    this.cursor = page.next_cursor;
    this.more.hidden = !this.cursor;
    this.status.textContent = this.list.children.length ? "" : "No threads yet.";
    this.select(this.current);
  }
}

function threadItem(thread) {
  const runs = `${thread.runs} run${thread.runs === 1 ? "" : "s"}`;
  return el("li", {},
    el("a", { href: threadHref(thread.id), "data-thread": thread.id },
      el("span", { class: "run-line" },
        el("span", { class: `badge status-${thread.status}` }, thread.status),
        el("span", { class: "meta" }, runs),
        el("time", { datetime: thread.updated_at, class: "meta" }, clockTime(thread.updated_at))),
      el("span", { class: "run-task" }, thread.id)));
}

export class ThreadView {
  /** `section` is emptied and filled; onCreated(run) fires after the composer's POST /runs. */
  constructor(section, { onCreated }) {
    this.section = section;
    this.onCreated = onCreated;
    this.id = null;
    this.opening = 0;
  }

  close() {
    this.opening += 1;
    this.id = null;
  }

  async open(id) {
    this.close();
    const opening = this.opening;
    this.id = id;
    clear(this.section);
    const title = el("h1", { id: "thread-title", tabindex: "-1" }, "Thread ", el("code", { text: id }));
    this.alert = el("p", { class: "error", role: "alert", id: "thread-error" });
    this.section.append(title, this.alert);
    let thread;
    let runs;
    try {
      thread = await get(threadPath(id));
      runs = await allRuns(id);
    } catch (error) {
      if (opening !== this.opening) return;
      this.alert.textContent = error instanceof ApiError && error.status === 404
        ? `No thread ${id} here (it may have been deleted, or belong to another API key).`
        : `Could not load the thread: ${error.message}`;
      return;
    }
    if (opening !== this.opening) return;
    this.#render(thread, runs);
  }

  #render(thread, runs) {
    const facts = el("p", { class: "run-state" },
      el("span", { class: `badge status-${thread.status}`, id: "thread-status" }, thread.status),
      " ",
      el("span", { class: "meta", id: "thread-runs" },
        `${thread.runs} run${thread.runs === 1 ? "" : "s"} · updated ${clockTime(thread.updated_at)}`));
    const list = el("ol", { class: "thread-runs", id: "thread-run-list" });
    for (const run of runs) list.append(runItem(run));
    this.section.append(facts, el("h2", { text: "Runs, oldest first" }), list);
    if (continuable(thread.id)) {
      this.section.append(this.#composer(runs.at(-1)));
    } else {
      this.section.append(el("p", { class: "meta", id: "thread-face" },
        "An AG-UI thread or an A2A context: it is continued through its protocol."));
    }
  }

  /** The composer: a new run of the thread, with the model and tools of its latest run. */
  #composer(latest) {
    const text = el("textarea", { id: "thread-text", rows: 2, "aria-describedby": "thread-hint" });
    const error = el("p", { class: "error", role: "alert", id: "thread-composer-error" });
    const go = el("button", { type: "submit", id: "thread-button" }, "Continue thread");
    const form = el("form", { class: "message-box", id: "thread-form" },
      el("label", { for: "thread-text" }, "Continue the thread"),
      text,
      el("small", { class: "hint", id: "thread-hint" },
        "Starts the thread's next run from its latest run's conversation."),
      el("div", { class: "actions" }, go, error));
    const send = async () => {
      const task = text.value.trim();
      if (!task) {
        error.textContent = "Write something first.";
        return;
      }
      const body = { task, thread_id: this.id };
      if (latest) {
        body.model = latest.model;
        body.tools = latest.tools;
        if (latest.agent) body.agent = latest.agent;
      }
      go.disabled = true;
      error.textContent = "";
      try {
        const created = await post("runs", body);
        text.value = "";
        this.onCreated?.(created);
      } catch (problem) {
        error.textContent = problem.status === 409
          ? "The thread's latest run has not ended yet: wait for it, or cancel it."
          : problem.message;
      } finally {
        go.disabled = false;
      }
    };
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      send();
    });
    text.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey) {
        event.preventDefault();
        send();
      }
    });
    return form;
  }
}

async function allRuns(id) {
  const runs = [];
  let cursor = null;
  do {
    const query = new URLSearchParams({ limit: "200" });
    if (cursor) query.set("cursor", cursor);
    const page = await get(`${threadPath(id)}/runs?${query}`);
    runs.push(...page.runs);
    cursor = page.next_cursor;
  } while (cursor);
  return runs;
}

function runItem(run) {
  const answer = run.result?.answer;
  return el("li", { "data-run": run.id },
    el("a", { href: `#/runs/${encodeURIComponent(run.id)}` },
      el("span", { class: "run-line" },
        el("span", { class: `badge status-${run.status}` }, run.status),
        el("code", { text: run.id })),
      el("span", { class: "run-task" }, run.task)),
    answer != null ? el("p", { class: "thread-answer", text: answer }) : null);
}
