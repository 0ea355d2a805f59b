"""The exit codes of `finishline`: one per way a followed run can end, then the CLI's own.

Scripts branch on them, so they are part of the interface: documented in `finishline --help`
and in docs/guides/cli.md, and never renumbered.
"""

from __future__ import annotations

from enum import IntEnum

from app.engine.events import EventType
from app.engine.policies import StopReason


class ExitCode(IntEnum):
    OK = 0  # the command worked; a followed run finished or answered
    USAGE = 2  # bad command line (argparse's code)
    MAX_STEPS = 3
    TIMEOUT = 4
    TOKEN_BUDGET = 5
    NUDGE_LIMIT = 6
    CANCELLED = 7
    FAILED = 8  # the run ended with reason error
    API_ERROR = 9  # the service answered with an error (4xx/5xx), printed with its message
    UNREACHABLE = 10  # cannot connect, or the stream was lost and reconnecting failed
    COST_BUDGET = 11
    INVALID_OUTPUT = 12  # the answers kept failing the run's output_schema
    OUTCOME_UNMET = 13  # the answers kept failing the run's outcome rubric (its grader)
    DETACHED = 130  # Ctrl-C while following, run left going


REASON_EXIT_CODES: dict[StopReason, ExitCode] = {
    StopReason.FINISHED: ExitCode.OK,
    StopReason.ANSWERED: ExitCode.OK,
    StopReason.MAX_STEPS: ExitCode.MAX_STEPS,
    StopReason.TIMEOUT: ExitCode.TIMEOUT,
    StopReason.TOKEN_BUDGET: ExitCode.TOKEN_BUDGET,
    StopReason.COST_BUDGET: ExitCode.COST_BUDGET,
    StopReason.NUDGE_LIMIT: ExitCode.NUDGE_LIMIT,
    StopReason.INVALID_OUTPUT: ExitCode.INVALID_OUTPUT,
    StopReason.OUTCOME_UNMET: ExitCode.OUTCOME_UNMET,
    StopReason.CANCELLED: ExitCode.CANCELLED,
    StopReason.ERROR: ExitCode.FAILED,
}

# the terminal event's type decides when its payload names no reason
_TERMINAL_REASONS: dict[str, StopReason] = {
    EventType.RUN_CANCELLED: StopReason.CANCELLED,
    EventType.RUN_FAILED: StopReason.ERROR,
}


def reason_of(event: dict[str, object]) -> StopReason | None:
    """The reason a terminal event (its wire form) reports; None for any other event."""
    result = event.get("result")
    if isinstance(result, dict):
        try:
            return StopReason(str(result.get("reason")))
        except ValueError:
            return None
    return _TERMINAL_REASONS.get(str(event.get("type")))


def exit_code_for(reason: StopReason | None) -> ExitCode:
    """The exit code of a followed run that ended for `reason` (None: it reported none)."""
    return REASON_EXIT_CODES[reason] if reason is not None else ExitCode.FAILED


EPILOG = """\
exit codes:
  0    the command worked; a followed run finished or answered
  2    bad command line
  3    the run ended with max_steps      4  timeout
  5    token_budget                      6  nudge_limit
  7    cancelled                         8  failed (reason error)
  9    the service answered with an error (its message is printed)
  10   cannot connect to the service, or the event stream was lost
  11   the run ended with cost_budget
  12   the run ended with invalid_output (its answers failed the output schema)
  13   the run ended with outcome_unmet (its answers failed the outcome's rubric)
  130  detached with Ctrl-C; the run goes on

environment:
  FINISHLINE_URL       the service (default http://127.0.0.1:8000)
  FINISHLINE_API_KEY   sent as Authorization: Bearer <key>
  FINISHLINE_TOKEN     an access token of the service's identity provider (OIDC), sent
                       as Authorization: Bearer <token> instead of the key when set
"""
