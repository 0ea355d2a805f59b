// One run, live: its header and Cancel button (while it runs), step and time meters, usage counters, the
// answer once it ends, and the timeline fed by RunStream. A live run takes messages (Send);
// an ended one can be continued with a follow-up run (Continue).

import { ApiError, get, post, runPath } from "./api.js";
import { ApprovalPanel } from "./approvals.js";
import { clear, count, el, messageBox, seconds, usd } from "./dom.js";
import { jsonView } from "./jsonview.js";
import { RunStream, TERMINAL } from "./stream.js";
import { continuable, threadHref } from "./threads.js";
import { Timeline } from "./timeline.js";

const ENDED = new Set(["completed", "incomplete", "failed", "cancelled"]);

const STATUS_OF = {
  "run.started": "running",
  "run.waiting": "requires_action",
  "run.completed": "completed",
  "run.incomplete": "incomplete",
  "run.failed": "failed",
  "run.cancelled": "cancelled",
};

const CONNECTION = {
  connecting: "connecting…",
  live: "live",
  reconnecting: "reconnecting…",
  reconnected: "reconnected",
  ended: "",
};

export class RunView {
  /** `section` is emptied and filled; onEnded(run id) fires once the run has ended. */
  constructor(section, { onEnded, onCreated }) {
    this.section = section;
    this.onEnded = onEnded;
    this.onCreated = onCreated; // a follow-up run was started from here
    this.id = null;
    this.stream = null;
    this.timer = null;
    this.opening = 0; // which call of open() is current: a later one wins
  }

  close() {
    this.opening += 1;
    this.id = null;
    this.stream?.close();
    this.stream = null;
    this.timeline?.close();
    clearInterval(this.timer);
    this.timer = null;
  }

  async open(id) {
    this.close();
    const opening = this.opening;
    this.id = id;
    this.status = null;
    this.maxSteps = null;
    this.maxTime = null;
    this.startedAt = null;
    this.endedAt = null;
    this.waitingSince = null; // waiting for a person: its time does not count (max_time_s)
    this.pausedMs = 0;
    this.usage = { steps: 0, llm_calls: 0, tool_calls: 0, total_tokens: 0, cost_usd: 0 };
    this.#build();
    let run;
    try {
      run = await get(runPath(id));
    } catch (error) {
      if (opening !== this.opening) return;
      this.#showError(error instanceof ApiError && error.status === 404
        ? `No run ${id} here (it may have been deleted, or belong to another API key or tenant).`
        : `Could not load the run: ${error.message}`);
      this.#setStatus("unknown");
      return;
    }
    if (opening !== this.opening) return; // opened again, or closed, meanwhile
    this.#fromRun(run);
    this.stream = new RunStream(id, {
      onEvent: (event) => this.#onEvent(event),
      onState: (state, error) => this.#onConnection(state, error),
    });
    this.stream.start();
    this.timer = setInterval(() => this.#renderTime(), 500);
  }

  // -- building -------------------------------------------------------------------------

  #build() {
    const s = this.section;
    clear(s);
    this.statusBadge = el("span", { class: "badge", id: "run-status" });
    this.reason = el("span", { class: "reason", id: "run-reason" });
    this.connection = el("span", { class: "connection", id: "connection", role: "status" });
    this.cancelButton = el("button", {
      type: "button",
      id: "cancel",
      class: "danger",
      disabled: true,
      hidden: true, // shown while the run has not ended
      on: { click: () => this.#cancel() },
    }, "Cancel run");
    this.task = el("p", { class: "task", id: "run-task" });
    this.model = el("span", { class: "meta", id: "run-model" });
    this.previous = el("p", { class: "meta", id: "run-previous", hidden: true });
    this.alert = el("p", { class: "error", role: "alert", id: "run-error" });
    this.stepsMeter = el("progress", { id: "steps-meter", max: 1, value: 0 });
    this.stepsText = el("span", { class: "meter-text", id: "steps-text" });
    this.timeMeter = el("progress", { id: "time-meter", max: 1, value: 0 });
    this.timeText = el("span", { class: "meter-text", id: "time-text" });
    this.usageList = el("dl", { class: "usage", id: "usage" });
    this.answer = el("section", {
      class: "answer",
      id: "answer",
      "aria-labelledby": "answer-title",
      "aria-live": "polite",
      hidden: true,
    });
    this.timelineList = el("ol", { class: "timeline", id: "timeline" });
    this.timeline = new Timeline(this.timelineList, {
      onChildEvent: (runId, event) => this.#onChildEvent(runId, event),
    });
    this.approvals = new ApprovalPanel();
    this.sendBox = messageBox({
      id: "send",
      label: "Message the agent",
      hint: "Joins the conversation before the agent's next model call.",
      button: "Send",
      submit: (text) => this.#send(text),
    });
    this.continueBox = messageBox({
      id: "continue",
      label: "Continue the conversation",
      hint: "Starts a follow-up run from this run's conversation, with the same model and tools.",
      button: "Continue",
      submit: (text) => this.#continue(text),
    });

    s.append(
      el("div", { class: "run-head" },
        el("h1", { id: "run-title", tabindex: "-1" }, "Run ", el("code", { text: this.id })),
        this.cancelButton),
      el("p", { class: "run-state" }, this.statusBadge, " ", this.reason, " ", this.connection),
      this.previous,
      this.task,
      el("p", {}, this.model),
      this.alert,
      el("div", { class: "meters" },
        el("div", { class: "meter" }, el("label", { for: "steps-meter" }, "Steps"),
          this.stepsMeter, this.stepsText),
        el("div", { class: "meter" }, el("label", { for: "time-meter" }, "Time"),
          this.timeMeter, this.timeText)),
      this.usageList,
      this.approvals.section,
      this.answer,
      this.continueBox.form,
      this.sendBox.form,
      el("h2", { text: "Timeline" }),
      this.timelineList,
    );
    this.#renderUsage();
  }

  // -- state from the run and from events -----------------------------------------------

  #fromRun(run) {
    this.run = run;
    this.task.textContent = run.task;
    const names = [...run.tools, ...(run.mcp_servers || []).map((name) => `${name}__*`)];
    const tools = names.length ? ` · tools ${names.join(", ")}` : "";
    const agent = run.agent ? `agent ${run.agent} · ` : "";
    this.model.textContent = `${agent}model ${run.model}${tools}`;
    if (run.previous_run_id) {
      const href = `#/runs/${encodeURIComponent(run.previous_run_id)}`;
      this.previous.append("Follow-up of ", el("a", { href }, el("code", { text: run.previous_run_id })));
      this.previous.hidden = false;
    }
    if (run.thread_id) {
      const link = el("a", { href: threadHref(run.thread_id), id: "run-thread" },
        el("code", { text: run.thread_id }));
      this.previous.append(this.previous.hidden ? "" : " · ", "In thread ", link);
      this.previous.hidden = false;
    }
    this.maxSteps = run.settings.max_steps;
    this.maxTime = run.settings.max_time_s;
    this.startedAt = run.started_at ? Date.parse(run.started_at) : null;
    this.endedAt = run.ended_at ? Date.parse(run.ended_at) : null;
    // usage counts up from the replayed events; the terminal event brings the exact figures
    this.#setStatus(run.status);
    if (run.result) this.reason.textContent = run.result.reason;
    this.#renderSteps(0);
    this.#renderTime();
  }

  #onEvent(event) {
    this.timeline.add(event);
    const u = this.usage;
    switch (event.type) {
      case "run.queued":
        this.maxSteps = event.settings?.max_steps ?? this.maxSteps;
        this.maxTime = event.settings?.max_time_s ?? this.maxTime;
        break;
      case "run.started":
        if (event.resumed && this.startedAt != null) {
          this.pausedMs += Date.parse(event.ts) - (this.waitingSince ?? Date.parse(event.ts));
          this.waitingSince = null;
        } else {
          this.startedAt = Date.parse(event.ts);
        }
        break;
      case "step.started":
        this.maxSteps = event.max_steps;
        u.steps = Math.max(u.steps, event.step);
        break;
      case "llm.call":
        u.llm_calls += 1;
        u.total_tokens += event.prompt_tokens + event.completion_tokens;
        // unknown (null) once a call had no price: a partial sum would understate the cost
        u.cost_usd = u.cost_usd == null || event.cost_usd == null ? null : u.cost_usd + event.cost_usd;
        break;
      case "observation":
        u.tool_calls += 1;
        break;
      case "run.waiting": // the run waits on these calls now (its own, or its children's)
        this.waitingSince ??= Date.parse(event.ts);
        for (const call of event.pending ?? []) {
          this.approvals.requested(call.run_id ?? this.id, call, { child: Boolean(call.run_id) });
        }
        break;
      case "approval.decided":
        this.approvals.decided(event.run_id ?? this.id, event.call_id);
        break;
      default:
        break;
    }
    const endedHere = TERMINAL.has(event.type) && !ENDED.has(this.status);
    if (STATUS_OF[event.type]) this.#setStatus(STATUS_OF[event.type]);
    if (event.type === "approval.decided" && this.approvals.size === 0) this.#setStatus("queued");
    if (TERMINAL.has(event.type)) this.approvals.clear();
    if (TERMINAL.has(event.type)) this.#ended(event, endedHere);
    this.#renderUsage();
    this.#renderSteps(u.steps);
  }

  /** An event of a sub-agent's child run (nested in the timeline): its calls waiting for a
   * person are decided from here too (DESIGN §15); this run's own `run.waiting` lists them
   * once it waits on them. */
  #onChildEvent(runId, event) {
    if (ENDED.has(this.status)) return;
    if (event.type === "run.waiting") {
      for (const call of event.pending ?? []) {
        this.approvals.requested(call.run_id ?? runId, call, { child: true });
      }
    } else if (event.type === "approval.decided") {
      this.approvals.decided(runId, event.call_id);
    } else if (TERMINAL.has(event.type)) {
      this.approvals.forget(runId);
    }
  }

  /** `live`: it ended while we watched (not a replay of a run known to have ended). */
  #ended(event, live) {
    this.endedAt = Date.parse(event.ts);
    if (event.usage) this.usage = { ...event.usage };
    const result = event.result;
    const reason = result?.reason ?? (event.type === "run.failed" ? "error" : "cancelled");
    this.reason.textContent = reason;
    this.#renderAnswer(event, reason);
    this.#renderTime();
    clearInterval(this.timer);
    if (live) this.onEnded?.(this.id);
  }

  #setStatus(status) {
    // the replay of an ended run passes "run.started" again: never go back from an end
    if (ENDED.has(this.status) && !ENDED.has(status)) return;
    this.status = status;
    this.statusBadge.textContent = status;
    this.statusBadge.className = `badge status-${status}`;
    const live = ["queued", "running", "requires_action"].includes(status);
    this.cancelButton.disabled = !live;
    this.cancelButton.hidden = !live; // nothing to cancel once it ended
    this.sendBox.form.hidden = !live;
    this.continueBox.form.hidden = !ENDED.has(status);
  }

  async #send(content) {
    try {
      await post(runPath(this.id, "/messages"), { content });
    } catch (error) {
      if (error.status === 409) throw new Error("The run has ended: continue it instead.");
      throw error;
    }
  }

  async #continue(task) {
    const run = this.run;
    // request-declared HTTP tools are not carried over: their header values come back masked
    const body = { task, model: run.model, tools: run.tools };
    // a thread's run: the thread goes on (from its latest run); else a follow-up of this one
    if (run.thread_id && continuable(run.thread_id)) body.thread_id = run.thread_id;
    else body.previous_run_id = this.id;
    if (run.agent) body.agent = run.agent; // the same agent goes on (its settings, its prompt)
    const created = await post("runs", body);
    this.onCreated?.(created);
  }

  #onConnection(state, error) {
    if (state === "failed") {
      this.connection.textContent = "disconnected";
      this.#showError(`Stopped following the run: ${error.message}`);
      return;
    }
    this.connection.textContent = CONNECTION[state] ?? state;
    this.connection.dataset.state = state;
  }

  async #cancel() {
    this.cancelButton.disabled = true;
    this.#showError("");
    try {
      const run = await post(runPath(this.id, "/cancel"));
      if (ENDED.has(run.status)) this.#setStatus(run.status);
    } catch (error) {
      this.#showError(error.status === 409 ? "The run has already ended." : error.message);
      this.cancelButton.disabled = ENDED.has(this.status);
    }
  }

  #showError(message) {
    this.alert.textContent = message;
  }

  // -- rendering ------------------------------------------------------------------------

  #renderAnswer(event, reason) {
    const result = event.result;
    const a = this.answer;
    clear(a);
    a.className = `answer ended-${this.status}${result?.degraded ? " degraded" : ""}`;
    const badges = el("p", { class: "badges" },
      el("span", { class: `badge status-${this.status}` }, reason));
    if (result?.degraded) {
      const title = "A best answer asked for at a limit, the last reply when the model " +
        "ignored the stop prompts, or the last answer that failed the output schema.";
      const badge = el("span", { class: "badge degraded", id: "degraded", title }, "degraded");
      badges.append(" ", badge);
    }
    // a typed answer (the run has an output_schema): its value, as a collapsible tree
    const typed = result != null && "output" in result && !result.output_errors;
    const heading = event.type === "run.failed" ? "Error" : typed ? "Output" : "Answer";
    a.append(el("h2", { id: "answer-title", text: heading }), badges);
    if (event.error) {
      a.append(el("p", { class: "answer-text" }, `${event.error.type}: ${event.error.message}`));
    } else if (typed && result.answer != null) {
      a.append(el("div", { class: "output", id: "output" }, jsonView(result.output)));
    } else if (result?.answer != null) {
      a.append(el("p", { class: "answer-text", id: "answer-text", text: result.answer }));
    } else {
      a.append(el("p", { class: "meta" }, "No answer."));
    }
    if (result?.output_errors?.length) {
      const errors = result.output_errors.map((e) =>
        el("li", {}, el("code", { text: e.path }), " ", e.message));
      a.append(el("p", { class: "meta" }, "Not valid against the output schema:"),
        el("ul", { class: "output-errors", id: "output-errors" }, errors));
    }
    a.hidden = false;
  }

  #renderUsage() {
    const u = this.usage;
    const items = [
      ["Steps", count(u.steps)],
      ["LLM calls", count(u.llm_calls)],
      ["Tool calls", count(u.tool_calls)],
      ["Tokens", count(u.total_tokens)],
      ["Cost", usd(u.cost_usd)],
    ];
    clear(this.usageList);
    for (const [term, value] of items) {
      this.usageList.append(el("div", {}, el("dt", { text: term }), el("dd", { text: value })));
    }
  }

  #renderSteps(steps) {
    const max = this.maxSteps || 1;
    this.stepsMeter.max = max;
    this.stepsMeter.value = Math.min(steps, max);
    this.stepsText.textContent = `${steps} of ${this.maxSteps ?? "?"}`;
  }

  #renderTime() {
    if (this.maxTime == null) return;
    const end = this.waitingSince ?? this.endedAt ?? Date.now();
    const ran = end - this.pausedMs - this.startedAt;
    const used = this.startedAt == null ? 0 : Math.max(0, ran / 1000);
    this.timeMeter.max = this.maxTime;
    this.timeMeter.value = Math.min(used, this.maxTime);
    this.timeText.textContent = `${seconds(used)} of ${seconds(this.maxTime)}`;
  }
}
