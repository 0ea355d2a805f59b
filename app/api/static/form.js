// The "start a run" form: an agent profile, task, model, tools and every per-run setting,
// built from GET /settings, GET /tools and GET /agents. Only settings changed from their
// default are sent (with an agent picked: from the agent's), so the server stays the judge
// of caps: its 4xx message is shown next to the form. Picking an agent shows its tools,
// model and settings in the form; the run names it and sends only what was changed.

import { ApiError, post } from "./api.js";
import { clear, count, el } from "./dom.js";

const STOP_TOOL_HINT =
  "On: the run ends only when the model calls task_finished (it is nudged if it stops " +
  "without); off: its first plain answer ends the run.";

export class RunForm {
  /** onCreated(run) fires after a 202/200 from POST /runs. */
  constructor(form, { onCreated }) {
    this.form = form;
    this.onCreated = onCreated;
    this.settings = {};
    this.agents = {};
    this.error = form.querySelector("#form-error");
    this.submit = form.querySelector("button[type=submit]");
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.#start();
    });
    // Enter starts the run from the task too; Shift+Enter adds a line
    form.querySelector("#task").addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        form.requestSubmit();
      }
    });
  }

  fill(info, tools, agents = []) {
    this.settings = info.settings;
    this.defaultModel = info.default_model;
    const models = this.form.querySelector("#model-list");
    clear(models).append(...info.models.map((name) => el("option", { value: name })));
    const model = this.form.querySelector("#model");
    model.placeholder = info.default_model;
    this.form.querySelector("#model-hint").textContent =
      `Empty: the server's default, ${info.default_model}. Any model the endpoint serves works.`;

    const toolBox = clear(this.form.querySelector("#tool-list"));
    for (const tool of tools) {
      const id = `tool-${tool.name}`;
      toolBox.append(el("div", { class: "check" },
        el("input", { type: "checkbox", id, name: "tools", value: tool.name, checked: true }),
        el("label", { for: id }, el("code", { text: tool.name }), " ",
          el("span", { class: "meta" }, firstSentence(tool.description)))));
    }
    if (!tools.length) toolBox.append(el("p", { class: "meta" }, "This server has no tools."));

    const grid = clear(this.form.querySelector("#settings"));
    for (const [name, setting] of Object.entries(info.settings)) {
      grid.append(settingField(name, setting));
    }

    this.agents = Object.fromEntries(agents.map((agent) => [agent.name, agent]));
    const picker = this.form.querySelector("#agent");
    picker.replaceChildren(picker.options[0],
      ...agents.map((agent) => el("option", { value: agent.name }, agent.name)));
    this.agentHint = this.form.querySelector("#agent-hint");
    this.agentHintText = this.agentHint.textContent;
    picker.addEventListener("change", () => this.#pick(picker.value));
    this.form.querySelector("#agent-field").hidden = agents.length === 0;
  }

  /** The agent picked, or null. */
  get agent() {
    return this.agents[this.form.querySelector("#agent").value] ?? null;
  }

  /** The form shows what a run gets from agent `name` (or from the server alone: ""). */
  #pick(name) {
    const agent = this.agents[name] ?? null;
    const form = this.form;
    const own = new Set((agent?.tools ?? []).map((tool) => tool.name));
    for (const box of form.querySelectorAll("input[name=tools]")) {
      box.checked = agent ? own.has(box.value) : true;
    }
    form.querySelector("#model").placeholder = agent?.model ?? this.defaultModel;
    for (const input of form.querySelectorAll("[data-setting]")) {
      const value = this.#initial(input.dataset.setting);
      if (input.type === "checkbox") input.checked = value === true;
      else input.value = value ?? "";
    }
    this.agentHint.textContent = agent
      ? `${agent.description} Tools: ${[...own].join(", ") || "none"}; model ${agent.model}.`
      : this.agentHintText;
  }

  /** A setting's value when the form leaves it alone: the agent's, else the server's. */
  #initial(name) {
    const agent = this.agent;
    return agent ? agent.settings[name] : this.settings[name].default;
  }

  showError(message, field = null) {
    this.error.textContent = message;
    for (const input of this.form.querySelectorAll("[aria-invalid]")) {
      input.removeAttribute("aria-invalid");
    }
    const input = field && this.form.querySelector(`[data-field="${CSS.escape(field)}"]`);
    if (input) {
      input.setAttribute("aria-invalid", "true");
      input.closest("details")?.setAttribute("open", "");
    }
  }

  #body() {
    const form = this.form;
    const body = { task: form.querySelector("#task").value.trim() };
    const agent = this.agent;
    if (agent) body.agent = agent.name;
    const model = form.querySelector("#model").value.trim();
    if (model) body.model = model;
    const thread = form.querySelector("#thread").value.trim();
    if (thread) body.thread_id = thread;
    const tools = [...form.querySelectorAll("input[name=tools]:checked")].map((i) => i.value);
    if (!agent || !sameTools(tools, agent, form)) body.tools = tools;
    const settings = {};
    for (const input of form.querySelectorAll("[data-setting]")) {
      const name = input.dataset.setting;
      const { kind } = this.settings[name];
      const initial = this.#initial(name);
      let value;
      if (kind === "boolean") {
        value = input.checked;
      } else if (kind === "choice") {
        value = input.value;
      } else {
        if (input.validity.badInput) {
          throw new FormError(`${name}: not a number`, input.dataset.field);
        }
        if (input.value.trim() === "") continue; // the server's default
        value = Number(input.value);
      }
      if (value !== initial) settings[name] = value;
    }
    if (Object.keys(settings).length) body.settings = settings;
    return body;
  }

  async #start() {
    this.showError("");
    let body;
    try {
      body = this.#body();
    } catch (error) {
      this.showError(error.message, error.field);
      return;
    }
    if (!body.task) {
      this.showError("task: write what the agent should do", "task");
      this.form.querySelector("#task").focus();
      return;
    }
    this.submit.disabled = true;
    this.submit.textContent = "Starting…";
    try {
      const run = await post("runs", body);
      this.onCreated(run);
    } catch (error) {
      if (error instanceof ApiError) {
        this.showError(error.message, error.field);
      } else {
        this.showError(`Could not reach the server: ${error.message}`);
      }
    } finally {
      this.submit.disabled = false;
      this.submit.textContent = "Start run";
    }
  }
}

class FormError extends Error {
  constructor(message, field) {
    super(message);
    this.field = field;
  }
}

/** Whether the boxes checked are the agent's tools among those the form lists. */
function sameTools(checked, agent, form) {
  const listed = new Set([...form.querySelectorAll("input[name=tools]")].map((i) => i.value));
  const own = agent.tools.map((tool) => tool.name).filter((name) => listed.has(name));
  return checked.length === own.length && own.every((name) => checked.includes(name));
}

function firstSentence(text) {
  const match = /^.*?[.!?](\s|$)/.exec(text);
  return (match ? match[0] : text).trim();
}

function describe(name, setting) {
  // the schema's description ends with the seed default; this server's own is shown instead
  const text = setting.description.replace(/\s*\(default [^)]*\)\s*\.?\s*$/, "").replace(/\.$/, "");
  const extra = name === "stop_tool" ? ` ${STOP_TOOL_HINT}` : "";
  const cap = setting.cap == null ? "" : ` · cap ${shown(setting.cap)}`;
  return `${text}.${extra} Default ${shown(setting.default)}${cap}.`;
}

function shown(value) {
  if (value === null) return "none";
  if (typeof value === "boolean") return value ? "on" : "off";
  return typeof value === "number" ? count(value) : String(value);
}

function settingField(name, setting) {
  const id = `setting-${name}`;
  const hintId = `${id}-hint`;
  const field = `settings.${name}`;
  const common = {
    id,
    name,
    "data-setting": name,
    "data-field": field,
    "aria-describedby": hintId,
  };
  const hint = el("small", { id: hintId, class: "hint" }, describe(name, setting));
  const label = el("label", { for: id }, el("code", { text: name }));
  let input;
  if (setting.kind === "boolean") {
    input = el("input", { ...common, type: "checkbox", checked: setting.default === true });
    return el("div", { class: "setting check" }, input, label, hint);
  }
  if (setting.kind === "choice") {
    input = el("select", common,
      (setting.choices ?? []).map((choice) =>
        el("option", { value: choice, selected: choice === setting.default }, choice)));
  } else {
    input = el("input", {
      ...common,
      type: "number",
      inputmode: setting.kind === "integer" ? "numeric" : "decimal",
      step: setting.kind === "integer" ? "1" : "any",
      min: setting.minimum ?? 0,
      max: setting.cap ?? undefined,
      value: setting.default ?? "",
      placeholder: setting.default === null ? "none" : undefined,
    });
  }
  return el("div", { class: "setting" }, label, input, hint);
}
