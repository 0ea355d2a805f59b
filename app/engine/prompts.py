"""Every text the model sees from us, in one place, in English and Chinese.

A deployment may override any text (see `Prompts.merged`); placeholders in braces are filled
with `str.format`. Keep them short: they are read on every step of every run.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path

from app.engine.policies import PromptLanguage

TASK_FINISHED = "task_finished"
UPDATE_PLAN = "update_plan"
SUBMIT_VERDICT = "submit_verdict"
"""The grader's one tool: its verdict on an answer (DESIGN §22, `app.engine.grading`)."""


@dataclass(frozen=True, slots=True)
class Prompts:
    task_finished_description: str
    task_finished_answer: str
    stop_tool_prompt: str
    finish_beside_others: str
    repetition_hint: str
    tool_timeout: str
    limit_prompt: str
    progress: str
    progress_plan: str
    planning_prompt: str
    replanning_prompt: str
    plan_line: str
    planning_nudge: str
    truncation_note: str
    context_trim_stub: str
    context_trim_notice: str
    context_drop_notice: str
    unknown_tool: str
    bad_json: str
    bad_arguments: str
    tool_failed: str
    call_interrupted: str
    outcome_unknown: str
    approval_rejected: str
    previous_run_ended: str
    reply_cut_note: str
    arguments_too_long: str
    invalid_output: str
    invalid_output_reply: str
    output_schema_prompt: str
    grader_system_prompt: str
    grader_request: str
    verdict_description: str
    outcome_unmet: str
    agent_status: str
    agent_degraded: str
    agent_no_answer: str
    agent_failed: str
    agent_cancelled: str
    agent_depth_cap: str
    agent_runs_cap: str
    agent_unavailable: str

    def merged(self, overrides: Mapping[str, str]) -> Prompts:
        """A copy with some texts replaced; an unknown name is an error, not ignored."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(f"unknown prompt names: {', '.join(unknown)}")
        return replace(self, **overrides)


EN = Prompts(
    task_finished_description=(
        "Call this once the task is fully done, with the final answer. It ends the run, so "
        "call it alone, after you have read the results of every other tool call."
    ),
    task_finished_answer="The final answer to the task, complete and self-contained.",
    stop_tool_prompt=(
        "Check whether the task is fully done. If it is, call the `task_finished` tool with "
        "the final answer. If it is not, continue working with the tools you have."
    ),
    finish_beside_others=(
        "Not finished: call task_finished alone, after reading these results. The other tool "
        "calls of this turn ran; their results are above."
    ),
    repetition_hint=(
        "You already called {tool} {count} times with these same arguments; the result will "
        "not change. Earlier result:\n{result}\n"
        "Try a different tool, different arguments, or answer from what you have."
    ),
    tool_timeout=(
        "The tool {tool} timed out after {seconds:g} s. Simplify the arguments or use "
        "another way to get what you need."
    ),
    limit_prompt=(
        "A limit of this run has been reached ({reason}). Answer now, as well as you can, "
        "from what you have. Do not call any tools."
    ),
    progress=(
        "[progress] Step {step}/{max_steps}. Time used: {elapsed:.0f} s of {max_time:.0f} s. "
        "Tool calls so far: {tool_calls}."
    ),
    progress_plan=" Plan: completed {completed}/{total}. Next: {next_item}.",
    planning_prompt=(
        "Before you act, plan. Call `update_plan` with the steps you will take to complete "
        "the task, in order: the first 'in_progress', the others 'pending'. Make no other "
        "tool call in this turn."
    ),
    replanning_prompt=(
        "Review your plan against what you have learned so far (completed {completed}/{total}):"
        "\n{plan}\nCall `update_plan` with the whole plan brought up to date: mark what is done "
        "'completed', and change, drop or add steps as needed. Make no other tool call in "
        "this turn."
    ),
    plan_line="{number}. [{status}] {step}",
    planning_nudge=(
        "You did not call `update_plan`. Call it now with your whole plan for the task, each "
        "step 'pending', 'in_progress' or 'completed', before anything else."
    ),
    truncation_note=(
        "\n\n[Result truncated: showing {shown:,} of {total:,} chars. To see more, narrow "
        "the query, add filters, or ask for a specific range.]"
    ),
    context_trim_stub="[Earlier result of {tool} elided to fit the context ({chars:,} chars).]",
    context_trim_notice=(
        "The prompt was over {limit:,} tokens: the {count} oldest tool results were elided."
    ),
    context_drop_notice=(
        "The prompt was over {limit:,} tokens: the {turns} oldest turns of the conversation "
        "this run inherited ({messages} messages) were dropped."
    ),
    unknown_tool="Unknown tool {tool!r}. Available tools: {available}.",
    bad_json=(
        "The arguments of {tool} are not a valid JSON object ({error}). Call it again with a "
        "JSON object that matches its parameters."
    ),
    bad_arguments="Invalid arguments for {tool}: {error}. Call it again with valid arguments.",
    tool_failed="The tool {tool} failed: {error}",
    call_interrupted="The tool {tool} was interrupted: the run reached a limit ({reason}).",
    outcome_unknown=(
        "The outcome of this call of {tool} is unknown: the worker running it stopped while "
        "the call was in flight, and {tool} is not idempotent, so it was not run again. It "
        "may or may not have taken effect: check before calling it again."
    ),
    approval_rejected="A person did not approve this call of {tool}, so it did not run: {message}",
    previous_run_ended="(The previous run ended without an answer: {reason}.)",
    reply_cut_note="\n\n[Reply cut at {shown:,} of {total:,} characters.]",
    arguments_too_long=(
        "The arguments of {tool} were {chars:,} characters long, more than this server "
        "accepts, so the call did not run. Call it with shorter arguments, or split the work "
        "into several smaller calls."
    ),
    invalid_output=(
        "The answer does not match the required output schema ({count} errors):\n{errors}\n"
        "Call task_finished again, alone, with an answer that matches the schema "
        "({tries_left} tries left)."
    ),
    invalid_output_reply=(
        "Your reply is not a JSON value that matches the required output schema ({count} "
        "errors):\n{errors}\nIf the task is done, reply with the JSON value alone, matching "
        "the schema ({tries_left} tries left); if not, continue working with the tools you have."
    ),
    output_schema_prompt=(
        "Give the final answer as a JSON value alone, with no other text, matching this JSON "
        "Schema:\n{schema}"
    ),
    grader_system_prompt=(
        "You grade an answer against a rubric. You see the task, the rubric and the answer, "
        "nothing else. Be strict: the answer is satisfactory only when it meets every point "
        "of the rubric. Give your verdict with the submit_verdict tool."
    ),
    grader_request=(
        "Task:\n{task}\n\nRubric:\n{rubric}\n\nAnswer:\n{answer}\n\n"
        "Does the answer meet every point of the rubric? Call submit_verdict with `satisfied` "
        "and `feedback`: what is missing or wrong, precisely enough to fix it (or, when it "
        "is satisfactory, why)."
    ),
    verdict_description="Your verdict on the answer against the rubric.",
    outcome_unmet=(
        "The answer does not meet the task's requirements yet. A reviewer says:\n{feedback}\n"
        "Revise the answer and give it again, whole, the way you gave this one "
        "({revisions_left} revisions left)."
    ),
    agent_status="[Sub-agent {agent} (run {run}): {status}, {reason}.]",
    agent_degraded=(
        "[Sub-agent {agent} (run {run}) stopped at a limit ({reason}): this is its best answer "
        "so far, not a finished one.]"
    ),
    agent_no_answer="[Sub-agent {agent} (run {run}) ended without an answer: {reason}.]",
    agent_failed="Sub-agent {agent} (run {run}) failed: {error}",
    agent_cancelled="Sub-agent {agent} (run {run}) was cancelled before it answered.",
    agent_depth_cap=(
        "Sub-agent {agent} was not started: sub-agents may nest no deeper than depth {limit} "
        "(the run a request starts is depth 0). Do this part yourself, or answer from what "
        "you have."
    ),
    agent_runs_cap=(
        "Sub-agent {agent} was not started: this tree of runs has started the {limit} "
        "sub-agent runs it may. Do this part yourself, or answer from what you have."
    ),
    agent_unavailable="Sub-agent {agent} could not be started: {error}",
)

ZH = Prompts(
    task_finished_description=(
        "任务全部完成后调用此工具，并给出最终答案。它会结束本次运行，"
        "请在读完其他工具调用的结果之后单独调用它。"
    ),
    task_finished_answer="任务的最终答案，完整且可独立阅读。",
    stop_tool_prompt=(
        "请确认目标问题是否已经处理完成，若是已完成，请使用工具 `task_finished` "
        "给出最终答案；若未完成，请继续使用工具处理。"
    ),
    finish_beside_others=(
        "尚未结束：请在读完这些结果之后单独调用 task_finished。本轮的其他工具调用已执行，结果见上。"
    ),
    repetition_hint=(
        "已用相同参数调用 {tool} {count} 次，结果未变。之前的结果：\n{result}\n"
        "请换一种方式：使用不同工具、调整参数、或直接基于已有信息回答。"
    ),
    tool_timeout="工具 {tool} 调用超时（{seconds:g} 秒），请尝试简化参数或使用替代方案。",
    limit_prompt="已达到本次运行的限制（{reason}），请基于已有信息给出最佳回答，不要继续调用工具。",
    progress=(
        "[进度] 第 {step}/{max_steps} 步。已用时 {elapsed:.0f}/{max_time:.0f} 秒。"
        "已调用工具 {tool_calls} 次。"
    ),
    progress_plan=" 已完成: {completed}/{total}。下一步建议: {next_item}。",
    planning_prompt=(
        "行动之前请先制定计划：调用 `update_plan`，按顺序列出完成任务要做的步骤，"
        "第一步标为 'in_progress'，其余标为 'pending'。本轮不要调用其他工具。"
    ),
    replanning_prompt=(
        "请根据目前获得的信息回顾计划（已完成: {completed}/{total}）：\n{plan}\n"
        "请调用 `update_plan` 提交更新后的完整计划：已完成的步骤标为 'completed'，"
        "并按需修改、删除或增加步骤。本轮不要调用其他工具。"
    ),
    plan_line="{number}. [{status}] {step}",
    planning_nudge=(
        "你没有调用 `update_plan`。请先调用它，给出完成任务的完整计划"
        "（每一步标为 'pending'、'in_progress' 或 'completed'），再做其他事情。"
    ),
    truncation_note=(
        "\n\n...（结果已截断，显示 {shown:,}/{total:,} 字符。"
        "如需更多内容，请缩小查询范围、增加过滤条件或指定范围。）"
    ),
    context_trim_stub="[为控制上下文长度，已省略 {tool} 的早期结果（{chars:,} 字符）。]",
    context_trim_notice="提示词超过 {limit:,} tokens：已省略最早的 {count} 条工具结果。",
    context_drop_notice=(
        "提示词超过 {limit:,} tokens：已删除本次运行继承的对话中最早的 {turns} 轮"
        "（{messages} 条消息）。"
    ),
    unknown_tool="未知工具 {tool!r}。可用工具：{available}。",
    bad_json="{tool} 的参数不是合法的 JSON 对象（{error}）。请用符合参数定义的 JSON 对象重新调用。",
    bad_arguments="{tool} 的参数无效：{error}。请用正确的参数重新调用。",
    tool_failed="工具 {tool} 执行失败：{error}",
    call_interrupted="工具 {tool} 的调用被中断：本次运行已达到限制（{reason}）。",
    outcome_unknown=(
        "对 {tool} 的这次调用结果未知：执行它的工作进程在调用进行中停止了；{tool} "
        "不是幂等的，因此没有重新执行。它可能已经生效，也可能没有：再次调用前请先确认。"
    ),
    approval_rejected="用户没有批准对 {tool} 的这次调用，因此它没有执行：{message}",
    previous_run_ended="（上一次运行未给出答案即结束：{reason}。）",
    reply_cut_note="\n\n[回复已截断，保留 {shown:,}/{total:,} 字符。]",
    arguments_too_long=(
        "{tool} 的参数长 {chars:,} 字符，超过本服务接受的长度，因此没有执行。"
        "请用更短的参数调用，或把工作拆成几次较小的调用。"
    ),
    invalid_output=(
        "答案不符合要求的输出 JSON Schema（{count} 处错误）：\n{errors}\n"
        "请再次单独调用 task_finished，给出符合该 Schema 的答案（还可尝试 {tries_left} 次）。"
    ),
    invalid_output_reply=(
        "你的回复不是符合要求的输出 JSON Schema 的 JSON 值（{count} 处错误）：\n{errors}\n"
        "若任务已完成，请只回复符合该 Schema 的 JSON 值（还可尝试 {tries_left} 次）；"
        "若未完成，请继续使用工具处理。"
    ),
    output_schema_prompt=(
        "最终答案请只给出一个 JSON 值，不要附加其他文字，并符合以下 JSON Schema：\n{schema}"
    ),
    grader_system_prompt=(
        "你负责按评分标准评判一个答案。你只看到任务、评分标准和答案。请严格评判："
        "只有答案满足评分标准的每一项时才算合格。请用 submit_verdict 工具给出结论。"
    ),
    grader_request=(
        "任务：\n{task}\n\n评分标准：\n{rubric}\n\n答案：\n{answer}\n\n"
        "答案是否满足评分标准的每一项？请调用 submit_verdict，给出 `satisfied` 和 `feedback`："
        "缺少或错误之处，要具体到足以改正（合格时说明理由）。"
    ),
    verdict_description="你按评分标准对答案给出的结论。",
    outcome_unmet=(
        "答案尚未满足任务要求。评审意见：\n{feedback}\n"
        "请修改答案，并按原来的方式完整地重新给出（还可修改 {revisions_left} 次）。"
    ),
    agent_status="[子代理 {agent}（运行 {run}）：{status}，{reason}。]",
    agent_degraded=(
        "[子代理 {agent}（运行 {run}）因达到限制（{reason}）而停止："
        "这是它目前的最佳回答，并非完成的答案。]"
    ),
    agent_no_answer="[子代理 {agent}（运行 {run}）结束时没有给出答案：{reason}。]",
    agent_failed="子代理 {agent}（运行 {run}）失败：{error}",
    agent_cancelled="子代理 {agent}（运行 {run}）在回答之前被取消。",
    agent_depth_cap=(
        "子代理 {agent} 未启动：子代理最多只能嵌套到第 {limit} 层（请求启动的运行为第 0 层）。"
        "请自己完成这部分，或基于已有信息回答。"
    ),
    agent_runs_cap=(
        "子代理 {agent} 未启动：这棵运行树已启动了允许的 {limit} 个子代理运行。"
        "请自己完成这部分，或基于已有信息回答。"
    ),
    agent_unavailable="子代理 {agent} 无法启动：{error}",
)

BUILTIN: dict[PromptLanguage, Prompts] = {"en": EN, "zh": ZH}


def load_prompts(path: Path | None) -> dict[PromptLanguage, Prompts]:
    """The built-in texts, with a deployment's overrides from a TOML file ([en], [zh])."""
    if path is None:
        return dict(BUILTIN)
    with path.open("rb") as handle:
        overrides = tomllib.load(handle)
    unknown = sorted(set(overrides) - set(BUILTIN))
    if unknown:
        raise ValueError(f"{path}: unknown prompt languages {unknown}; use [en] and [zh]")
    return {lang: BUILTIN[lang].merged(overrides.get(lang, {})) for lang in BUILTIN}
