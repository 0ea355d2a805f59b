// A run's timeline: one entry per event (token deltas grow a live thought instead), grouped
// by step; an observation sits under the action it answers. Every entry carries data-seq.
// A sub-agent call's child run (DESIGN §15) is followed live in a timeline of its own,
// nested under the call's action (and its children under theirs).

import { append, clockTime, count, el, prettyJson, usd } from "./dom.js";
import { RunStream } from "./stream.js";

const INTERVENTIONS = {
  stop_prompt: { label: "Nudge: stop prompt", tone: "nudge" },
  repetition: { label: "Repetition hint", tone: "repeat" },
  progress: { label: "Progress", tone: "info" },
  context_trim: { label: "Context trimmed", tone: "info" },
  planning: { label: "Planning", tone: "info" },
  invalid_output: { label: "Answer not valid", tone: "nudge" },
  outcome_unmet: { label: "Rubric not met", tone: "nudge" },
  timeout: { label: "Limit: time", tone: "limit" },
  max_steps: { label: "Limit: steps", tone: "limit" },
  token_budget: { label: "Limit: token budget", tone: "limit" },
  cost_budget: { label: "Limit: cost budget", tone: "limit" },
};

const ENDINGS = {
  "run.completed": "Run completed",
  "run.incomplete": "Run ended at a limit",
  "run.failed": "Run failed",
  "run.cancelled": "Run cancelled",
};

export class Timeline {
  /** onChildEvent(runId, event): every event of a nested child run (and theirs). */
  constructor(list, { onChildEvent } = {}) {
    this.list = list; // an <ol>
    this.groups = new Map(); // step -> <ol> of its entries
    this.actions = new Map(); // call_id -> the action's entry
    this.liveThought = null; // the thought growing from token deltas
    this.onChildEvent = onChildEvent;
    this.children = new Map(); // child run id -> { node, timeline, stream }
  }

  add(event) {
    const render = RENDERERS[event.type] ?? renderOther;
    render.call(this, event);
  }

  /** Stop following the nested child runs (the view closes). */
  close() {
    for (const child of this.children.values()) {
      child.stream.close();
      child.timeline.close();
    }
  }

  /** The child run's nested timeline under the call's action, followed live (once). */
  child(event) {
    const runId = event.child_run_id;
    let child = this.children.get(runId);
    if (child) return child;
    const list = el("ol", { class: "timeline child-timeline", "data-run-id": runId });
    const status = el("span", { class: "badge child-status" }, "running");
    const node = el(
      "details",
      { class: "child-run", "data-run-id": runId, "data-call-id": event.call_id, open: true },
      el("summary", {},
        el("span", { class: "label" }, `Sub-agent ${event.agent}`), " ",
        el("a", { href: `#/runs/${encodeURIComponent(runId)}` }, el("code", { text: runId })), " ",
        status),
      list,
    );
    const timeline = new Timeline(list, { onChildEvent: this.onChildEvent });
    const stream = new RunStream(runId, {
      onEvent: (childEvent) => {
        timeline.add(childEvent);
        if (childEvent.type.startsWith("run.") && childEvent.type !== "run.queued") {
          status.textContent = childEvent.type === "run.started" ? "running" : childEvent.type.slice(4);
        }
        this.onChildEvent?.(runId, childEvent);
      },
      onState: () => {},
    });
    child = { node, timeline, stream, status };
    this.children.set(runId, child);
    stream.start();
    return child;
  }

  // -- structure ------------------------------------------------------------------------

  group(step) {
    let items = this.groups.get(step);
    if (!items) {
      items = el("ol", { class: "entries" });
      const title = step === 0 ? "Start" : `Step ${step}`;
      const li = el("li", { class: "step", "data-step": step }, el("h3", { text: title }), items);
      this.list.append(li);
      this.groups.set(step, items);
    }
    return items;
  }

  entry(event, kind, label, ...body) {
    const node = el(
      "li",
      { class: `entry ${kind}`, "data-seq": event.seq, "data-type": event.type },
      el("span", { class: "label" }, label),
      ...body,
    );
    this.group(event.step).append(node);
    return node;
  }
}

function meta(...parts) {
  return el("span", { class: "meta" }, parts.filter(Boolean).join(" · "));
}

// -- one renderer per event type (`this` is the Timeline) --------------------------------

const RENDERERS = {
  "run.queued"(event) {
    const tools = event.tools?.length ? event.tools.join(", ") : "no tools";
    const when = clockTime(event.ts);
    this.entry(event, "lifecycle", "Queued", meta(`model ${event.model}`, tools, when));
  },

  "run.recovered"(event) {
    const note = `replica ${event.replica} · attempt ${event.attempt}`;
    this.entry(event, "lifecycle", "Taken over", meta(note, clockTime(event.ts)));
  },

  "run.started"(event) {
    this.entry(event, "lifecycle", "Started", meta(clockTime(event.ts)));
  },

  "step.started"(event) {
    const items = this.group(event.step);
    const li = items.parentElement;
    li.dataset.seq = event.seq;
    li.dataset.type = event.type;
    li.querySelector("h3").textContent = `Step ${event.step} of ${event.max_steps}`;
  },

  "llm.call"(event) {
    const tokens = `${count(event.prompt_tokens)} → ${count(event.completion_tokens)} tokens`;
    this.entry(
      event,
      "llm",
      event.final ? "Final-answer call" : "Model call",
      meta(
        event.model,
        `${count(event.duration_ms)} ms`,
        event.estimated ? `${tokens} (estimated)` : tokens,
        event.cost_usd == null ? "cost unknown" : usd(event.cost_usd),
        `${event.tool_calls} tool call${event.tool_calls === 1 ? "" : "s"}`,
      ),
    );
  },

  token(event) {
    if (!this.liveThought) {
      const text = el("p", { class: "text" });
      this.liveThought = this.entry(event, "thought live", "Thinking…", text);
      this.liveThought.removeAttribute("data-seq"); // the thought event will own this entry
      this.liveThought.setAttribute("aria-busy", "true");
    }
    this.liveThought.querySelector(".text").append(event.delta);
  },

  thought(event) {
    const live = this.liveThought;
    this.liveThought = null;
    if (live) {
      live.className = "entry thought";
      live.dataset.seq = event.seq;
      live.dataset.type = event.type;
      live.removeAttribute("aria-busy");
      live.querySelector(".label").textContent = "Thought";
      live.querySelector(".text").textContent = event.text;
      return;
    }
    this.entry(event, "thought", "Thought", el("p", { class: "text", text: event.text }));
  },

  "llm.retry"(event) {
    if (this.liveThought) {
      // the streamed text of the failed attempt: keep it visible, marked as abandoned
      this.liveThought.className = "entry thought abandoned";
      this.liveThought.removeAttribute("aria-busy");
      this.liveThought.querySelector(".label").textContent = "Thinking (abandoned)";
      this.liveThought = null;
    }
    this.entry(
      event,
      "retry",
      `Model call retried (attempt ${event.attempt})`,
      el("p", { class: "text", text: event.error }),
      meta(`waiting ${event.delay_s} s`),
    );
  },

  action(event) {
    const raw = typeof event.arguments === "string";
    const node = this.entry(
      event,
      event.tool === "task_finished" ? "action finish" : "action",
      "Action",
      el("code", { class: "tool", text: event.tool }),
      raw ? meta("arguments are not valid JSON") : null,
      el("pre", { class: "arguments", text: prettyJson(event.arguments) }),
    );
    this.actions.set(event.call_id, node);
  },

  observation(event) {
    const action = this.actions.get(event.call_id);
    const node = renderObservation(event);
    if (action) {
      action.append(node);
    } else {
      this.group(event.step).append(node);
    }
  },

  "agent.started"(event) {
    const action = this.actions.get(event.call_id);
    const node = el(
      "div",
      { class: "entry agent started", "data-seq": event.seq, "data-type": event.type },
      el("span", { class: "label" }, "Sub-agent started"),
      meta(event.agent, event.child_run_id ? `run ${event.child_run_id}` : "a remote agent"),
    );
    const where = action ?? this.group(event.step);
    where.append(node);
    if (event.child_run_id) {
      const child = this.child(event); // (a call redone after a takeover: the same child)
      where.append(child.node);
    }
  },

  "agent.finished"(event) {
    const action = this.actions.get(event.call_id);
    const node = el(
      "div",
      { class: `entry agent finished status-${event.status}`, "data-seq": event.seq, "data-type": event.type },
      el("span", { class: "label" }, "Sub-agent ended"),
      meta(event.agent, event.status, event.reason),
    );
    (action ?? this.group(event.step)).append(node);
  },

  "outcome.graded"(event) {
    const label = event.satisfied ? "Grader: rubric met" : "Grader: rubric not met";
    const which = event.revision ? `revision ${event.revision}` : "first answer";
    const node = this.entry(
      event,
      `outcome tone-${event.satisfied ? "info" : "nudge"}`,
      label,
      el("p", { class: "text", text: event.feedback }),
      meta(
        event.final ? "the final answer at a limit" : which,
        event.valid === false ? "no valid verdict" : null,
      ),
    );
    node.dataset.satisfied = String(event.satisfied);
  },

  "user.message"(event) {
    const node = this.entry(
      event,
      `user-message${event.delivered === false ? " undelivered" : ""}`,
      "You said",
      el("p", { class: "text", text: event.content }),
      event.delivered === false ? meta("not delivered: it came after the last model call") : null,
    );
    node.dataset.delivered = String(event.delivered !== false);
  },

  "approval.requested"(event) {
    const node = this.entry(
      event,
      "approval requested",
      "Waiting for approval",
      el("code", { class: "tool", text: event.tool }),
      el("pre", { class: "arguments", text: prettyJson(event.arguments) }),
    );
    node.dataset.callId = event.call_id;
  },

  "run.waiting"(event) {
    const calls = event.pending ?? [];
    this.entry(
      event,
      "waiting",
      "Waiting for you",
      meta(`${calls.length} call${calls.length === 1 ? "" : "s"}: ${calls.map((c) => c.tool).join(", ")}`),
    );
  },

  "approval.decided"(event) {
    const node = this.entry(
      event,
      `approval decided ${event.approved ? "approved" : "rejected"}`,
      event.approved ? "Approved" : "Rejected",
      meta(`call ${event.call_id}`),
      event.message ? el("p", { class: "text", text: event.message }) : null,
    );
    node.dataset.callId = event.call_id;
  },

  intervention(event) {
    const kind = INTERVENTIONS[event.kind] ?? { label: event.kind, tone: "info" };
    const node = this.entry(
      event,
      `intervention tone-${kind.tone}`,
      kind.label,
      el("p", { class: "text", text: event.message }),
    );
    node.dataset.kind = event.kind;
  },
};

for (const [type, label] of Object.entries(ENDINGS)) {
  RENDERERS[type] = function (event) {
    const reason = event.result?.reason ?? (type === "run.failed" ? "error" : "cancelled");
    const error = event.error ? `${event.error.type}: ${event.error.message}` : null;
    this.entry(
      event,
      `ending ${type.slice(4)}`,
      label,
      meta(`reason ${reason}`, event.result?.degraded ? "degraded" : null, clockTime(event.ts)),
      error ? el("p", { class: "text", text: error }) : null,
    );
  };
}

function renderOther(event) {
  const { run_id, seq, type, ts, step, ...payload } = event;
  this.entry(event, "other", type, el("pre", { class: "arguments", text: prettyJson(payload) }));
}

function renderObservation(event) {
  const flags = [
    event.is_error ? "error" : null,
    event.timed_out ? "timed out" : null,
    event.repeated ? "repeated call" : null,
  ].filter(Boolean);
  const node = el(
    "div",
    {
      class: `entry observation${event.is_error ? " error" : ""}`,
      "data-seq": event.seq,
      "data-type": event.type,
    },
    el("span", { class: "label" }, "Observation"),
    flags.map((flag) => el("span", { class: "flag" }, flag)),
    meta(`${count(event.duration_ms)} ms`),
  );
  const content = el("pre", { class: "content" });
  node.append(content);
  if (!event.truncated) {
    content.textContent = event.content;
    return node;
  }
  const seen = event.model_content ?? event.content.slice(0, event.shown_chars);
  content.textContent = seen;
  const button = el("button", { type: "button", class: "link", "aria-expanded": "false" });
  const showFull = (full) => {
    content.textContent = full ? event.content : seen;
    button.textContent = full ? "Show what the model saw" : "Show the full result";
    button.setAttribute("aria-expanded", String(full));
  };
  button.addEventListener("click", () => showFull(button.getAttribute("aria-expanded") !== "true"));
  showFull(false);
  const stored = event.content_capped
    ? ` (stored: the first ${count(event.content.length)} chars)`
    : "";
  append(
    node,
    el(
      "p",
      { class: "truncation" },
      `showing ${count(event.shown_chars)} of ${count(event.original_chars)} chars${stored} `,
      button,
    ),
  );
  return node;
}
