"""`max_reply_chars`: what one reply brings into a run (app.engine.replycap)."""

from __future__ import annotations

from app.engine.loop import run_react
from app.engine.policies import Limits, StopReason
from app.engine.ports import ResumableModel, resumable
from app.engine.prompts import EN
from app.engine.replycap import CappedModel, cap_reply, cap_text
from app.engine.specs import assistant_message, reply_of
from app.engine.steps import Action, Observation, Thought
from app.llm.scripted import ScriptedModel
from tests.engine.kit import call, collect, ending, finish, of_type, says


def test_text_within_the_cap_and_a_reply_within_it_are_kept_as_they_are() -> None:
    reply = says("short", call("echo", {"text": "x"}))

    assert cap_text("short", 1000, EN) == "short"
    assert cap_reply(reply, 1000, EN) is reply
    assert cap_reply(says("x" * 5000), 0, EN).content == "x" * 5000  # 0: no cap


def test_long_text_is_cut_at_a_sentence_and_says_how_much_was_kept() -> None:
    text = "One sentence here. " * 1000

    capped = cap_text(text, 1000, EN)

    kept, note = capped.split("\n\n[Reply cut at ")
    assert len(kept) <= 1000
    assert kept.endswith("here.")
    assert note == f"{len(kept):,} of {len(text):,} characters.]"


async def test_a_finish_whose_answer_is_over_the_cap_does_not_end_the_run() -> None:
    model = ScriptedModel([finish("a" * 2000), finish("short")])

    steps = await collect(run_react(task="t", model=CappedModel(model, 1000, EN)))

    first, _ = of_type(steps, Action)
    assert first.arguments == "[2,014 characters of arguments, over the cap: not kept]"
    (refused,) = [o for o in of_type(steps, Observation) if o.call_id == first.call_id]
    assert refused.is_error
    assert "2,014 characters long, more than this server accepts" in refused.content
    assert ending(steps).reason == StopReason.FINISHED
    assert ending(steps).answer == "short"
    conversation = model.calls[1].messages
    kept = conversation[2]["tool_calls"][0]["function"]["arguments"]
    assert kept == '{"_arguments_dropped_chars": 2014}'


async def test_a_plain_answer_over_the_cap_is_the_cut_text() -> None:
    model = CappedModel(ScriptedModel([says("word " * 1000)]), 1000, EN)

    steps = await collect(run_react(task="t", model=model, limits=Limits(stop_tool=False)))

    (thought,) = of_type(steps, Thought)
    assert ending(steps).reason == StopReason.ANSWERED
    assert ending(steps).answer == thought.text
    assert thought.text.endswith(" of 5,000 characters.]")


def test_a_dropped_call_rebuilt_from_the_conversation_is_still_dropped() -> None:
    # a step redone from a checkpoint rebuilds its calls from the assistant message
    reply = cap_reply(says(None, call("echo", {"text": "x" * 5000}, "call_1")), 1000, EN)

    (rebuilt,) = reply_of(assistant_message(reply)).tool_calls

    assert rebuilt.oversize == reply.tool_calls[0].oversize > 5000
    (whole,) = reply_of(assistant_message(says(None, call("echo", {"text": "x"})))).tool_calls
    assert whole.oversize == 0


async def test_streamed_text_stops_at_the_cap() -> None:
    streamed: list[str] = []
    model = CappedModel(ScriptedModel([says("abcdefghij" * 300)]), 1000, EN)

    reply = await model.complete([], [], on_delta=streamed.append)

    assert "".join(streamed) == ("abcdefghij" * 300)[:1000]
    assert reply.content is not None
    assert reply.content.endswith(" of 3,000 characters.]")


class _Stateless:
    name = "stateless"
    price = None

    async def complete(self, *args: object, **kwargs: object) -> None: ...


class _HalfResumable(_Stateless):
    def saved_state(self) -> None: ...


def test_a_capped_model_is_resumable_exactly_as_the_runtime_protocol_says() -> None:
    """`resumable` (the protocol's check without its cost, issue #42) agrees with
    `isinstance(…, ResumableModel)`: a scripted model keeps its place through the cap."""
    for model in (ScriptedModel([says("hi")]), _Stateless(), _HalfResumable()):
        expected = model if isinstance(model, ResumableModel) else None
        assert resumable(model) is expected
        capped = CappedModel(model, 100, EN)  # type: ignore[arg-type]
        assert capped._resumable is expected
    scripted = ScriptedModel([says("one"), says("two")])
    capped = CappedModel(scripted, 100, EN)
    assert capped.saved_state() == scripted.saved_state()
    assert resumable(_Stateless()) is None
    assert resumable(_HalfResumable()) is None
