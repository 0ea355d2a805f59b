"""`json_problem` looks at every request body: its quick look (no paths built) must find a
problem exactly when the full walk does, and the answer is always the full walk's."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from app.runs.jsonsafe import _first_problem, json_problem

ANY_CHAR = st.characters(codec=None, exclude_categories=())
"""Lone surrogates included (hypothesis leaves them out of text by default)."""
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(ANY_CHAR, max_size=6)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(ANY_CHAR, max_size=4), inner, max_size=4)
        | st.tuples(inner, inner)
    ),
    max_leaves=24,
)


class Text(str):
    """A str subclass: not the plain type the quick look expects."""


@given(VALUES)
@hypothesis_settings(max_examples=300, deadline=None, derandomize=True, database=None)
@example({"a": [1, {"b": "\ud800"}]})
@example({"\udfff": 1})
@example([Text("\ud800")])
@example({1: "fine", "n": 2**64})
@example({"é": ["ok", float("nan")]})
def test_the_quick_look_agrees_with_the_full_walk(value: Any) -> None:
    assert json_problem(value) == _first_problem(value, "")
