"""Every error the runs layer raises becomes a stated HTTP answer, in httpx's style: the map is
checked against the classes that exist, so a new refusal without an entry fails here."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

import app
from app.api.errors import (
    IDENTITY_ERRORS,
    RUNS_ERRORS,
    install_error_handlers,
    runs_error_status,
)
from app.engine.errors import FinishlineError
from app.identity.errors import IdentityError, TokenProblem
from app.runs.errors import QueueFullError, QuotaExceededError, RunsError
from tests.api.kit import error_of

ARGUMENTS: dict[str, Any] = {
    "field": "task",
    "message": "refused",
    "retry_after_s": 3,
    "run_id": "run_00000000000000000000000000",
    "problem": "request.task: Field required",
    "quota": "concurrent_runs",
    "limit": 3,
    "used": 3,
    "problem_of_token": TokenProblem.EXPIRED,
    "scope": "finishline:write",
    "why": "the issuer is down",
}


def _every_module() -> None:
    for module in pkgutil.walk_packages(app.__path__, "app."):
        if not module.name.startswith("app.cli"):
            importlib.import_module(module.name)


def _subclasses(root: type[Exception]) -> list[type[Exception]]:
    found, todo = [], [root]
    while todo:
        for sub in todo.pop().__subclasses__():
            found.append(sub)
            todo.append(sub)
    return sorted(set(found), key=lambda c: c.__qualname__)


_every_module()
REFUSALS = _subclasses(RunsError)
IDENTITY_REFUSALS = _subclasses(IdentityError)


def _instance(cls: type[RunsError]) -> RunsError:
    parameters = inspect.signature(cls).parameters.values()
    required = [p for p in parameters if p.default is p.empty and p.kind is not p.VAR_KEYWORD]
    return cls(**{p.name: ARGUMENTS[p.name] for p in required})


async def _answer_to(exc: Exception) -> httpx.Response:
    """What an app with the error handlers answers when a route raises `exc`."""
    api = FastAPI()
    install_error_handlers(api)

    @api.get("/raise")
    async def _raise() -> None:
        raise exc

    transport = httpx.ASGITransport(app=api)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        return await client.get("/raise")


def test_the_runs_layer_has_refusals_to_check() -> None:
    assert len(REFUSALS) >= 7


@pytest.mark.parametrize("cls", REFUSALS, ids=lambda c: c.__name__)
def test_every_runs_error_has_its_own_entry_in_the_map(cls: type[RunsError]) -> None:
    assert cls in RUNS_ERRORS, f"{cls.__name__} has no HTTP status in app.api.errors.RUNS_ERRORS"
    status, _ = RUNS_ERRORS[cls]
    assert 400 <= status < 500 or status == 503, "a refusal is a client error or a drain"


@pytest.mark.parametrize("cls", REFUSALS, ids=lambda c: c.__name__)
async def test_every_runs_error_reaches_the_client_as_its_mapped_error_body(
    cls: type[RunsError],
) -> None:
    exc = _instance(cls)
    response = await _answer_to(exc)

    status, type_ = RUNS_ERRORS[cls]
    error = error_of(response, status, type_)
    assert error["message"] == exc.message
    if isinstance(exc, QueueFullError | QuotaExceededError):
        assert response.headers["retry-after"] == "3"


def _identity_instance(cls: type[IdentityError]) -> IdentityError:
    parameters = inspect.signature(cls).parameters.values()
    required = [p for p in parameters if p.default is p.empty]
    names = {"problem": "problem_of_token", "message": "message"}
    return cls(**{p.name: ARGUMENTS[names.get(p.name, p.name)] for p in required})


def test_identity_has_refusals_to_check() -> None:
    assert len(IDENTITY_REFUSALS) >= 5


@pytest.mark.parametrize("cls", IDENTITY_REFUSALS, ids=lambda c: c.__name__)
async def test_every_identity_error_has_its_entry_and_reaches_the_client_as_it_says(
    cls: type[IdentityError],
) -> None:
    assert cls in IDENTITY_ERRORS, f"{cls.__name__} has no entry in IDENTITY_ERRORS"
    exc = _identity_instance(cls)
    response = await _answer_to(exc)

    status, type_ = IDENTITY_ERRORS[cls]
    error = error_of(response, status, type_)
    assert error["message"] == exc.message
    if status in (401, 403):
        assert response.headers["www-authenticate"].startswith("Bearer")
    else:
        assert response.headers["retry-after"] == "3"


def test_a_refusal_without_an_entry_takes_its_nearest_parents_answer() -> None:
    class NewNotFound(RunsError):
        pass

    not_found = next(c for c in REFUSALS if RUNS_ERRORS[c][0] == 404)
    sub_of_not_found = type("SubOfNotFound", (not_found,), {})

    assert runs_error_status(NewNotFound("x")) == (400, "bad_request")
    assert runs_error_status(sub_of_not_found("x")) == RUNS_ERRORS[not_found]


@pytest.mark.parametrize(
    "cls",
    [
        c
        for c in _subclasses(Exception)
        if c.__module__.startswith("app.")
        and not c.__module__.startswith("app.cli")  # a client program with its own root
        and not c.__name__.startswith("_")  # private control flow that never leaves its module
    ],
    ids=lambda c: f"{c.__module__}.{c.__name__}",
)
def test_every_error_finishline_defines_descends_from_the_one_root(cls: type) -> None:
    assert issubclass(cls, FinishlineError)
