// The tool calls a run waits on (DESIGN §9): each with its arguments, a message box, and
// Approve / Reject. Built from the events (run.waiting adds the calls it waits on,
// approval.decided removes one), so a replay shows what is still pending; a decision is a POST /approvals to
// the run whose call it is: the viewed run's, or a sub-agent's child run's (DESIGN §15).

import { post, runPath } from "./api.js";
import { clear, el } from "./dom.js";

export class ApprovalPanel {
  constructor() {
    this.pending = new Map(); // "run id call id" -> its <li>
    this.list = el("ul", { class: "approvals-list", id: "approvals-list" });
    this.section = el("section", {
      class: "approvals",
      id: "approvals",
      "aria-labelledby": "approvals-title",
      hidden: true,
    },
    el("h2", { id: "approvals-title", text: "Waiting for your approval" }),
    this.list);
  }

  get size() {
    return this.pending.size;
  }

  /** `child`: the call is a sub-agent's (its run `runId`), not the viewed run's own. */
  requested(runId, event, { child = false } = {}) {
    const key = `${runId} ${event.call_id}`;
    if (this.pending.has(key)) return;
    const id = `approval-${this.pending.size}-${Date.now()}`;
    const message = el("textarea", { id: `${id}-message`, rows: 2 });
    const error = el("p", { class: "error", role: "alert" });
    const decide = (approve) => this.#decide(runId, event.call_id, approve, message, error, item);
    const who = child ? ["A sub-agent (run ", el("code", { text: runId }), ") wants to call "]
      : ["The agent wants to call "];
    const item = el("li", { class: "approval", "data-call-id": event.call_id, "data-run-id": runId },
      el("p", {}, ...who, el("code", { class: "tool", text: event.tool })),
      el("pre", { class: "arguments", text: JSON.stringify(event.arguments, null, 2) }),
      el("label", { for: `${id}-message` }, `Message for the agent (${event.tool})`),
      message,
      el("div", { class: "actions" },
        el("button", { type: "button", class: "approve", on: { click: () => decide(true) } },
          "Approve"),
        el("button", { type: "button", class: "danger reject", on: { click: () => decide(false) } },
          "Reject"),
        error));
    this.pending.set(key, item);
    this.list.append(item);
    this.section.hidden = false;
  }

  decided(runId, callId) {
    const key = `${runId} ${callId}`;
    this.pending.get(key)?.remove();
    this.pending.delete(key);
    this.section.hidden = this.pending.size === 0;
  }

  /** The calls of one run are no longer waited on (it ended). */
  forget(runId) {
    for (const key of [...this.pending.keys()]) {
      if (key.startsWith(`${runId} `)) this.decided(runId, key.slice(runId.length + 1));
    }
  }

  clear() {
    this.pending.clear();
    clear(this.list);
    this.section.hidden = true;
  }

  async #decide(runId, callId, approve, message, error, item) {
    const buttons = item.querySelectorAll("button");
    for (const b of buttons) b.disabled = true;
    error.textContent = "";
    const decision = { call_id: callId, approve };
    if (message.value.trim()) decision.message = message.value.trim();
    try {
      await post(runPath(runId, "/approvals"), { decisions: [decision] });
      this.decided(runId, callId); // the approval.decided event follows
    } catch (problem) {
      error.textContent = problem.status === 409
        ? "The run no longer waits on this call."
        : problem.message;
      for (const b of buttons) b.disabled = false;
    }
  }
}
