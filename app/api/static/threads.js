// Threads (DESIGN §19): the list of the key's threads (GET /threads, most recently active
// first), and one thread as its runs in order (GET /threads/{id}/runs), with a composer that
// continues it (POST /runs with its thread_id). AG-UI's and A2A's threads are listed and shown
// too; they are continued through their protocol, so they have no composer.

import { ApiError, get, post } from "./api.js";
import { clear, clockTime, el, messageBox } from "./dom.js";
import { PagedList } from "./runs.js";
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

export class ThreadList extends PagedList {
  constructor(nav) {
    super(nav, {
      list: "#thread-list",
      status: "#threads-status",
      more: "#threads-more",
      refresh: "#threads-refresh",
      path: "threads",
      key: "threads",
      item: threadItem,
      attr: "thread",
      noun: "threads",
    });
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
    this.alert = el("p", { class: "error", role: "alert", id: "thread-alert" });
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
    const { form } = messageBox({
      id: "thread",
      label: "Continue the thread",
      hint: "Starts the thread's next run from its latest run's conversation.",
      button: "Continue thread",
      submit: async (task) => {
        const body = { task, thread_id: this.id };
        if (latest) {
          body.model = latest.model;
          body.tools = latest.tools;
          if (latest.agent) body.agent = latest.agent;
        }
        let created;
        try {
          created = await post("runs", body);
        } catch (problem) {
          if (problem.status !== 409) throw problem;
          throw new Error("The thread's latest run has not ended yet: wait for it, or cancel it.");
        }
        this.onCreated?.(created);
      },
    });
    form.hidden = false;
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
