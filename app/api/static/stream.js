// Following a run's events: EventSource, deduplicated by seq, reconnecting on its own.
//
// The browser's EventSource reconnects by itself after a dropped connection and sends
// Last-Event-ID. When it gives up (an error status, e.g. an expired stream token), we open a
// fresh one with ?after=<last seq> and a new token. Every event is handed on once, in order.

import { ApiError, eventsUrl, get, runPath } from "./api.js";

export const EVENT_TYPES = [
  "run.queued",
  "run.started",
  "step.started",
  "thought",
  "token",
  "llm.call",
  "llm.retry",
  "action",
  "observation",
  "agent.started",
  "agent.finished",
  "intervention",
  "outcome.graded",
  "user.message",
  "approval.requested",
  "run.waiting",
  "approval.decided",
  "run.recovered",
  "run.completed",
  "run.incomplete",
  "run.failed",
  "run.cancelled",
];

export const TERMINAL = new Set(["run.completed", "run.incomplete", "run.failed", "run.cancelled"]);

const MAX_BACKOFF_MS = 10_000;

export class RunStream {
  /**
   * onEvent(event): each event once, in seq order.
   * onState(state, detail): "connecting", "live", "reconnecting", "reconnected", "ended",
   * "failed" (detail: an Error).
   */
  constructor(runId, { onEvent, onState }) {
    this.runId = runId;
    this.onEvent = onEvent;
    this.onState = onState;
    this.lastSeq = 0;
    this.source = null;
    this.closed = false;
    this.interrupted = false;
    this.backoffMs = 500;
    this.retryTimer = null;
  }

  start() {
    this.onState("connecting");
    this.#open();
  }

  close() {
    this.closed = true;
    clearTimeout(this.retryTimer);
    this.source?.close();
    this.source = null;
  }

  async #open() {
    let url;
    try {
      url = await eventsUrl(this.runId, this.lastSeq);
    } catch (error) {
      this.#lost(error);
      return;
    }
    if (this.closed) return;
    const source = new EventSource(url);
    this.source = source;
    source.addEventListener("open", () => {
      this.onState(this.interrupted ? "reconnected" : "live");
      this.interrupted = false;
    });
    const handle = (message) => this.#handle(message);
    for (const type of EVENT_TYPES) source.addEventListener(type, handle);
    source.addEventListener("message", handle); // an event type this page does not know yet
    source.addEventListener("error", () => {
      if (this.closed || source !== this.source) return;
      this.interrupted = true;
      this.onState("reconnecting");
      if (source.readyState === EventSource.CLOSED) this.#reopenLater();
      // else CONNECTING: the browser retries by itself, with Last-Event-ID
    });
  }

  #handle(message) {
    let event;
    try {
      event = JSON.parse(message.data);
    } catch {
      return;
    }
    if (typeof event.seq !== "number" || event.seq <= this.lastSeq) return; // seen already
    this.lastSeq = event.seq;
    this.backoffMs = 500;
    this.onEvent(event);
    if (TERMINAL.has(event.type)) {
      this.close();
      this.onState("ended");
    }
  }

  #reopenLater() {
    this.source?.close();
    this.source = null;
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => this.#check(), this.backoffMs);
    this.backoffMs = Math.min(this.backoffMs * 2, MAX_BACKOFF_MS);
  }

  /** Before opening anew: is the run still there (and our key still good)? */
  async #check() {
    if (this.closed) return;
    try {
      await get(runPath(this.runId));
    } catch (error) {
      if (error instanceof ApiError && [401, 403, 404].includes(error.status)) {
        this.#fail(error);
        return;
      }
      this.#reopenLater(); // the server is away: try again later
      return;
    }
    this.#open();
  }

  #lost(error) {
    if (this.closed) return;
    if (error instanceof ApiError && [401, 403, 404].includes(error.status)) {
      this.#fail(error);
    } else {
      this.interrupted = true;
      this.onState("reconnecting");
      this.#reopenLater();
    }
  }

  #fail(error) {
    this.close();
    this.onState("failed", error);
  }
}
