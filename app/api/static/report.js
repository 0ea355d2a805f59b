// The termination report (DESIGN §20): GET /reports/termination as a table and a stacked bar
// chart of stop reasons per group, drawn here as SVG (no chart library, no CDN).

import { get } from "./api.js";
import { clear, el } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";
// one colour per stop reason, in the order the legend lists them
export const REASONS = [
  ["finished", "#1e7d3a"], ["answered", "#5bb974"], ["max_steps", "#e37400"],
  ["timeout", "#b06000"], ["token_budget", "#f9ab00"], ["cost_budget", "#c26401"],
  ["nudge_limit", "#a142f4"], ["invalid_output", "#d01884"], ["cancelled", "#80868b"],
  ["error", "#c5221f"],
];
const GROUPINGS = [["model", "Model"], ["agent", "Agent"], ["day", "Day"], ["key", "Key (admins)"]];

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  for (const child of children) node.append(child);
  return node;
}

/** One horizontal bar per group, a segment per stop reason, its width the share of runs. */
export function reasonChart(groups) {
  const width = 640;
  const label = 160;
  const bar = 22;
  const gap = 10;
  const height = groups.length * (bar + gap) + gap;
  const most = Math.max(1, ...groups.map((g) => g.runs));
  const chart = svg("svg", {
    viewBox: `0 0 ${width} ${height}`, width: "100%", role: "img", id: "report-chart",
    "aria-label": "Runs by stop reason, per group",
  });
  groups.forEach((group, i) => {
    const y = gap + i * (bar + gap);
    const name = group.group ?? "(none)";
    chart.append(svg("text", { x: label - 8, y: y + bar * 0.7, "text-anchor": "end", class: "chart-label" }, name));
    let x = label;
    for (const [reason, colour] of REASONS) {
      const n = group.by_reason[reason] || 0;
      if (!n) continue;
      const w = ((width - label - 50) * n) / most;
      const rect = svg("rect", { x, y, width: w, height: bar, fill: colour, "data-reason": reason });
      rect.append(svg("title", {}, `${name}: ${reason} ${n}`));
      chart.append(rect);
      x += w;
    }
    chart.append(svg("text", { x: x + 6, y: y + bar * 0.7, class: "chart-label" }, String(group.runs)));
  });
  return chart;
}

function legend() {
  return el("ul", { class: "chart-legend", "aria-label": "Stop reasons" },
    REASONS.map(([reason, colour]) =>
      el("li", {}, el("span", { class: "swatch", style: `background:${colour}` }), reason)));
}

function reportTable(report) {
  const head = ["Group", "Runs", "Completed", "Incomplete", "Failed", "Cancelled", "Reasons",
    "Degraded", "Nudges/run", "Retries/run", "p50 steps", "USD/run"];
  return el("table", { class: "report-table", id: "report-table" },
    el("thead", {}, el("tr", {}, head.map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, report.groups.map((g) => el("tr", { "data-group": g.group ?? "" },
      el("th", { scope: "row" }, g.group ?? "(none)"),
      el("td", {}, g.runs),
      ["completed", "incomplete", "failed", "cancelled"].map((s) => el("td", {}, g.by_status[s])),
      el("td", {}, Object.entries(g.by_reason).filter(([, n]) => n).map(([r, n]) => `${r} ${n}`).join(", ")),
      el("td", {}, g.degraded),
      el("td", {}, g.per_run.nudges.toFixed(2)),
      el("td", {}, g.per_run.retries.toFixed(2)),
      el("td", {}, g.steps.p50 ?? "–"),
      el("td", {}, g.usd.per_run === null ? "–" : g.usd.per_run.toFixed(4))))));
}

export class ReportView {
  constructor(section) {
    this.section = section;
    this.groupBy = "model";
  }

  async open() {
    const select = el("select", { id: "report-group-by" },
      GROUPINGS.map(([value, text]) => el("option", { value, selected: value === this.groupBy }, text)));
    select.addEventListener("change", () => { this.groupBy = select.value; this.load(); });
    this.body = el("div", { id: "report-body" });
    clear(this.section).append(
      el("h1", { id: "report-title", tabindex: "-1" }, "How runs ended"),
      el("p", { class: "meta" }, "Your ended runs, by stop reason: GET /reports/termination."),
      el("div", { class: "field" }, el("label", { for: "report-group-by" }, "Group by"), select),
      this.body);
    await this.load();
  }

  async load() {
    clear(this.body).append(el("p", { class: "meta", role: "status" }, "Loading…"));
    let report;
    try {
      report = await get(`reports/termination?group_by=${encodeURIComponent(this.groupBy)}`);
    } catch (error) {
      clear(this.body).append(el("p", { class: "error", role: "alert" }, error.message));
      return;
    }
    if (!report.groups.length) {
      clear(this.body).append(el("p", { class: "meta", role: "status" }, "No ended runs yet."));
      return;
    }
    clear(this.body).append(
      el("p", { class: "meta", role: "status", id: "report-runs" }, `${report.runs} ended runs`),
      reasonChart(report.groups), legend(), el("div", { class: "report-scroll" }, reportTable(report)));
  }
}
