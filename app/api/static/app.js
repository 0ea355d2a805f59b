// The viewer's entry point: load what the server offers, then route on the URL's hash
// ("#/runs/<id>" shows that run, "#/threads/<id>" that thread, "#/report" the termination
// report, "#/compare/<id>,<id>" runs side by side, anything else the form), so a reload
// restores the view.

import { auth, get } from "./api.js";
import { askForKey } from "./auth.js";
import { RunForm } from "./form.js";
import { RunList } from "./runs.js";
import { RunView } from "./runview.js";
import { CompareView } from "./compare.js";
import { ReportView } from "./report.js";
import { ScheduleList } from "./schedules.js";
import { ThreadList, ThreadView } from "./threads.js";

const $ = (selector) => document.querySelector(selector);

const newRun = $("#new-run");
const runSection = $("#run-view");
const threadSection = $("#thread-view");
const reportSection = $("#report-view");
const report = new ReportView(reportSection);
const compareSection = $("#compare-view");
const comparison = new CompareView(compareSection);
const banner = $("#banner");

const runs = new RunList($("#runs"));
const threads = new ThreadList($("#threads"));
const schedules = new ScheduleList($("#schedules"));
const refresh = () => Promise.all([runs.refresh(), threads.refresh(), schedules.refresh()]);
const view = new RunView(runSection, {
  onEnded: () => refresh(),
  onCreated(run) {
    location.hash = `#/runs/${encodeURIComponent(run.id)}`;
    refresh();
  },
});
const form = new RunForm($("#run-form"), {
  onCreated(run) {
    location.hash = `#/runs/${encodeURIComponent(run.id)}`;
    refresh();
  },
});
const thread = new ThreadView(threadSection, {
  onCreated() {
    thread.open(thread.id); // the thread again, its new run last
    refresh();
  },
});

function route({ initial = false } = {}) {
  if (location.hash && !location.hash.startsWith("#/")) return; // an in-page anchor
  const match = /^#\/runs\/([^/?#]+)$/.exec(location.hash);
  const id = match ? decodeURIComponent(match[1]) : null;
  const threadMatch = /^#\/threads\/([^/?#]+)$/.exec(location.hash);
  const threadId = threadMatch ? decodeURIComponent(threadMatch[1]) : null;
  const reporting = location.hash === "#/report";
  const compareMatch = /^#\/compare\/([^/?#]+)$/.exec(location.hash);
  const compared = compareMatch ? decodeURIComponent(compareMatch[1]).split(",") : null;
  newRun.hidden = Boolean(id || threadId || reporting || compared);
  reportSection.hidden = !reporting;
  compareSection.hidden = !compared;
  runSection.hidden = !id;
  threadSection.hidden = !threadId;
  runs.select(id);
  threads.select(threadId);
  if (id) {
    thread.close();
    if (view.id !== id) view.open(id);
    if (!initial) $("#run-title")?.focus();
  } else if (compared) {
    view.close();
    thread.close();
    comparison.open(compared).then(() => { if (!initial) $("#compare-title")?.focus(); });
  } else if (reporting) {
    view.close();
    thread.close();
    report.open().then(() => { if (!initial) $("#report-title")?.focus(); });
  } else if (threadId) {
    view.close();
    thread.open(threadId);
    if (!initial) $("#thread-title")?.focus();
  } else {
    view.close();
    thread.close();
    if (!initial) $("#new-run-title").focus();
  }
}

async function boot() {
  $("#key-button").addEventListener("click", async () => {
    // a new key takes over (runs are visible only to the key that made them): start afresh
    if (await askForKey("Enter the API key or access token to use from now on.")) location.reload();
  });
  let info;
  let tools;
  let agents;
  try {
    info = await get("settings");
    auth.required = info.auth;
    tools = await get("tools");
    agents = (await get("agents")).agents;
  } catch (error) {
    banner.textContent =
      error.status === 401
        ? "This server needs an API key or an access token. Reload the page to enter one."
        : `The server did not answer: ${error.message}. Reload to try again.`;
    banner.hidden = false;
    return;
  }
  $("#key-button").hidden = !auth.required;
  form.fill(info, tools, agents);
  window.addEventListener("hashchange", () => route());
  route({ initial: true });
  await refresh();
  document.body.dataset.ready = "true";
}

boot();
