"""The run's public shape: its settings as a plain object."""

from __future__ import annotations

from dataclasses import asdict

from app.engine.policies import Limits
from app.runs.view import settings_dict


def test_settings_dict_is_asdict_of_the_limits() -> None:
    for limits in (Limits(), Limits(max_steps=3, max_total_tokens=900, prompt_language="de")):
        assert settings_dict(limits) == asdict(limits)
        assert list(settings_dict(limits)) == list(asdict(limits))
