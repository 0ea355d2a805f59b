// Runs side by side (DESIGN §20): GET /runs/compare as one column per run, their outcomes
// on top and their steps aligned by number below ("#/compare/<id>,<id>").

import { get } from "./api.js";
import { clear, el } from "./dom.js";

const FACTS = [
  ["Model", (r) => r.model],
  ["Agent", (r) => r.agent ?? "–"],
  ["Status", (r) => r.status],
  ["Reason", (r) => r.reason ?? "–"],
  ["Degraded", (r) => (r.degraded === null ? "–" : r.degraded ? "yes" : "no")],
  ["Steps", (r) => r.steps],
  ["Tokens", (r) => r.total_tokens],
  ["USD", (r) => (r.cost_usd === null ? "unknown" : r.cost_usd.toFixed(4))],
  ["Answer", (r) => r.answer ?? "–"],
];

function stepCell(step) {
  if (!step) return el("td", { class: "meta no-step" }, "–");
  return el("td", {},
    step.thought ? el("p", { class: "compare-thought" }, step.thought) : null,
    step.tools.length ? el("p", { class: "compare-tools" }, `tools: ${step.tools.join(", ")}`) : null,
    step.errors ? el("p", { class: "error" }, `${step.errors} tool error${step.errors > 1 ? "s" : ""}`) : null,
    step.interventions.length
      ? el("p", { class: "compare-interventions" }, `interventions: ${step.interventions.join(", ")}`)
      : null);
}

export class CompareView {
  constructor(section) {
    this.section = section;
  }

  async open(ids) {
    clear(this.section).append(
      el("h1", { id: "compare-title", tabindex: "-1" }, "Runs side by side"),
      el("p", { class: "meta", role: "status" }, "Loading…"));
    let view;
    try {
      view = await get(`runs/compare?ids=${encodeURIComponent(ids.join(","))}`);
    } catch (error) {
      this.section.lastChild.replaceWith(el("p", { class: "error", role: "alert" }, error.message));
      return;
    }
    const head = el("tr", {}, el("th", { scope: "col" }, ""),
      view.runs.map((r) => el("th", { scope: "col" }, el("a", { href: `#/runs/${encodeURIComponent(r.id)}` }, r.id))));
    const facts = FACTS.map(([name, value]) => el("tr", { "data-fact": name.toLowerCase() },
      el("th", { scope: "row" }, name), view.runs.map((r) => el("td", {}, String(value(r))))));
    const steps = view.steps.map((s) => el("tr", { "data-step": s.step },
      el("th", { scope: "row" }, `Step ${s.step}`), s.runs.map(stepCell)));
    this.section.lastChild.replaceWith(
      el("div", { class: "report-scroll" },
        el("table", { class: "compare-table", id: "compare-table" },
          el("thead", {}, head), el("tbody", {}, facts, steps))));
  }
}
