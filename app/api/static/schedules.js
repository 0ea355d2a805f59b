// Schedules (DESIGN §21) in the side column: the key's schedules (GET /schedules), each with
// its cron, its next due time and its last firings (GET /schedules/{id}/firings): the run a
// due time started, linked, or why none (skipped_overlap, refused, invalid, disabled, missed).

import { get } from "./api.js";
import { clockTime, el } from "./dom.js";
import { PagedList } from "./runs.js";

const LAST_FIRINGS = 3;

export class ScheduleList extends PagedList {
  constructor(nav) {
    super(nav, {
      list: "#schedule-list",
      status: "#schedules-status",
      more: "#schedules-more",
      refresh: "#schedules-refresh",
      path: "schedules",
      key: "schedules",
      item: scheduleItem,
      attr: "schedule",
      noun: "schedules",
    });
  }
}

function scheduleItem(schedule) {
  const due = schedule.next_due_at
    ? el("time", { datetime: schedule.next_due_at, class: "meta" }, `next ${clockTime(schedule.next_due_at)}`)
    : el("span", { class: "meta" }, "paused");
  const firings = el("ul", { class: "firings", "aria-label": `last firings of ${schedule.id}` });
  const item = el("li", { "data-schedule": schedule.id },
    el("span", { class: "run-line" },
      el("code", {}, schedule.cron),
      el("span", { class: "meta" }, schedule.timezone),
      due),
    el("span", { class: "run-task" }, schedule.run?.task ?? schedule.id),
    firings);
  lastFirings(schedule.id, firings);
  return item;
}

async function lastFirings(id, list) {
  let page;
  try {
    page = await get(`schedules/${encodeURIComponent(id)}/firings?limit=${LAST_FIRINGS}`);
  } catch (error) {
    list.append(el("li", { class: "meta" }, `firings: ${error.message}`));
    return;
  }
  if (!page.firings.length) list.append(el("li", { class: "meta" }, "no firings yet"));
  for (const firing of page.firings) {
    const when = el("time", { datetime: firing.due_at, class: "meta" }, clockTime(firing.due_at));
    const badge = el("span", { class: `badge outcome-${firing.outcome}` }, firing.outcome);
    const what = firing.run_id
      ? el("a", { href: `#/runs/${encodeURIComponent(firing.run_id)}` }, firing.run_id)
      : el("span", { class: "meta" }, firing.reason ?? "");
    list.append(el("li", { class: "firing" }, when, badge, what));
  }
}
