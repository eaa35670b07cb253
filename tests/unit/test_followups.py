"""Follow-up rewriting against the whole exchange: referents named by the last answer, ellipsis, "what about",
already-standalone questions, chains of turns, and a model's rewrite checked against the deterministic one."""

from __future__ import annotations

import json

import pytest

from docqa.followups import (
    METHOD_CONTEXT,
    METHOD_FIRST,
    METHOD_LLM,
    METHOD_REFERENT,
    METHOD_SWAPPED,
    METHOD_UNCHANGED,
    Turn,
    passes_rewrite_check,
    rewrite_followup,
)
from tests.support.scripted_chat import ScriptedChatGenerator


def exchange(*texts: str) -> list[dict[str, str]]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(texts)]


@pytest.mark.parametrize(("texts", "expected"), [
    (("Who leads Project Halcyon?", "Dana Whitlock leads it.", "Where did that person work before?"),
     "Where did Dana Whitlock work before?"),
    (("Who leads Project Halcyon?", "Dana Whitlock leads it.", "When did she join the company?"),
     "When did Dana Whitlock join the company?"),
    (("Who approved the Atlas budget?", "Maria Lopez approved it in March.", "How much was it?"),
     "How much was the Atlas budget?"),
    (("Which film was shot in Leland, North Carolina in 1986?", "Maximum Overdrive was filmed there.",
      "Who directed it?"), "Who directed Maximum Overdrive?"),
    (("Which company acquired Nimbus Labs?", "Kestrel Systems acquired Nimbus Labs in 2019.",
      "Where is that company based?"), "Where is Kestrel Systems based?"),
    (("Where is Halcyon headquartered?", "In Oslo.", "How many people live there?"),
     "How many people live in Oslo?"),
    (("Who directed Maximum Overdrive?", "Stephen King directed it.", "What else did he write?"),
     "What else did Stephen King write?"),
])
def test_a_reference_resolves_to_what_the_exchange_named(texts: tuple[str, ...], expected: str) -> None:
    rewrite = rewrite_followup(exchange(*texts))
    assert rewrite.question == expected
    assert rewrite.method == METHOD_REFERENT
    assert rewrite.referents and rewrite.referents[0] in expected


def test_it_refers_to_the_question_subject_when_the_answer_names_a_person() -> None:
    rewrite = rewrite_followup(exchange("When was Halcyon founded?", "Dana Whitlock founded it in 2003.",
                                        "Where is it based?"))
    assert rewrite.question == "Where is Halcyon based?"


@pytest.mark.parametrize(("texts", "expected"), [
    (("What is the daily limit for meals?", "Meals: 60 euros a day.", "What about taxis?"),
     "What is the daily limit for taxis?"),
    (("How much is refunded for meals?", "At cost, with receipts.", "what about taxis?"),
     "How much is refunded for taxis?"),
    (("When may economy class be booked?", "For flights under six hours.", "What about business class?"),
     "When may business class be booked?"),
    (("Was Sid Haig an actor?", "Yes.", "And Vic Darchinyan?"), "Was Vic Darchinyan an actor?"),
    (("Where was Kerry Saxby-Junna born?", "In Young, New South Wales.", "how about Eddie Irvine?"),
     "Where was Eddie Irvine born?"),
])
def test_what_about_and_ellipsis_re_ask_the_previous_question(texts: tuple[str, ...], expected: str) -> None:
    rewrite = rewrite_followup(exchange(*texts))
    assert (rewrite.question, rewrite.method) == (expected, METHOD_SWAPPED)


@pytest.mark.parametrize("followup", ["Where is Acme Corp based?", "Is there a limit on carry-over days?",
                                      "Which plant is larger, the Pterocarya or the Cotula?"])
def test_a_standalone_follow_up_stays_as_it_is(followup: str) -> None:
    rewrite = rewrite_followup(exchange("Who leads Project Halcyon?", "Dana Whitlock leads it.", followup))
    assert (rewrite.question, rewrite.method) == (followup, METHOD_UNCHANGED)


def test_a_three_turn_chain_carries_the_referent_through() -> None:
    rewrite = rewrite_followup(exchange(
        "Who leads Project Halcyon?", "Dana Whitlock leads it.",
        "When did she join the company?", "She joined in 2015.",
        "What was her previous role?"))
    assert rewrite.question == "What was Dana Whitlock's previous role?"
    assert [t["role"] for t in rewrite.history] == ["user", "assistant", "user", "assistant"]
    chain = rewrite_followup(exchange("Which film was shot in Leland in 1986?", "Maximum Overdrive.",
                                      "Who directed it?", "Stephen King directed it.", "And where was he born?"))
    assert chain.question == "Where was Stephen King born?"


def test_first_question_and_bare_follow_up() -> None:
    assert rewrite_followup(exchange("Who leads Project Halcyon?")).method == METHOD_FIRST
    short = rewrite_followup(exchange("Who leads Project Halcyon?", "Dana Whitlock.", "and the budget?"))
    assert short.method in (METHOD_SWAPPED, METHOD_CONTEXT)
    assert "Project Halcyon" in short.question
    with pytest.raises(ValueError):
        rewrite_followup([{"role": "assistant", "content": "hello"}])


def test_the_rewrite_is_a_step_naming_its_method() -> None:
    step = rewrite_followup(exchange("Who leads Project Halcyon?", "Dana Whitlock leads it.",
                                     "When did she join?")).to_step()
    assert step.kind == "rewrite"
    assert step.outputs["method"] == METHOD_REFERENT
    assert step.outputs["question"] == "When did Dana Whitlock join?"
    assert step.inputs["previous_questions"] == ["Who leads Project Halcyon?"]


def _llm(reply: str) -> ScriptedChatGenerator:
    return ScriptedChatGenerator(default=reply)


def test_a_model_rewrite_is_used_when_it_keeps_the_referents() -> None:
    llm = _llm(json.dumps({"question": "Where did Dana Whitlock work before joining?"}))
    turns = exchange("Who leads Project Halcyon?", "Dana Whitlock leads it.", "Where did that person work before?")
    rewrite = rewrite_followup(turns, mode="llm", chat_generator=llm)
    assert (rewrite.method, rewrite.question) == (METHOD_LLM, "Where did Dana Whitlock work before joining?")
    assert "Dana Whitlock leads it." in llm.calls[0]["prompt"]


@pytest.mark.parametrize("reply", [
    json.dumps({"question": "Where did Project Halcyon work before?"}),  # drops the person the answer named
    "not json at all", json.dumps({"question": ""}), json.dumps({"question": "User: a\nAssistant: b"}),
])
def test_a_model_rewrite_that_drops_the_referent_or_is_malformed_is_rejected(reply: str) -> None:
    turns = exchange("Who leads Project Halcyon?", "Dana Whitlock leads it.", "Where did that person work before?")
    rewrite = rewrite_followup(turns, mode="llm", chat_generator=_llm(reply))
    assert (rewrite.method, rewrite.question) == (METHOD_REFERENT, "Where did Dana Whitlock work before?")
    assert rewrite.rejected and rewrite.to_step().outputs["rejected_llm_rewrite"] == rewrite.rejected


def test_auto_uses_a_model_only_after_it_passes_the_check() -> None:
    def good(prompt: str) -> str:
        last = prompt.rsplit("Last question:", 1)[-1]
        if "take over" in last:
            return json.dumps({"question": "When did Priya Raman take over?"})
        if "that company" in last:
            return json.dumps({"question": "Where is Kestrel Systems based?"})
        if "taxis" in last:
            return json.dumps({"question": "What is the refund limit for taxis?"})
        return json.dumps({"question": "Where did Dana Whitlock work before?"})

    turns = exchange("Who leads Project Halcyon?", "Dana Whitlock leads it.", "Where did that person work before?")
    bad = _llm(json.dumps({"question": "Where is it?"}))
    assert not passes_rewrite_check(bad, "bad-endpoint")
    assert rewrite_followup(turns, mode="auto", chat_generator=bad, endpoint="bad-endpoint").method == METHOD_REFERENT
    calls = len(bad.calls)
    rewrite_followup(turns, mode="auto", chat_generator=bad, endpoint="bad-endpoint")
    assert len(bad.calls) == calls  # the check's outcome is remembered
    llm = ScriptedChatGenerator(rules=[(".", good)])
    assert rewrite_followup(turns, mode="auto", chat_generator=llm, endpoint="good-endpoint").method == METHOD_LLM


def test_turn_objects_and_pairs_are_read_alike() -> None:
    a = rewrite_followup([Turn("user", "Who leads Project Halcyon?"), Turn("assistant", "Dana Whitlock."),
                          Turn("user", "Where did she study?")])
    b = rewrite_followup([("user", "Who leads Project Halcyon?"), ("system", "x"), ("assistant", "Dana Whitlock."),
                          ("user", "Where did she study?")])
    assert a.question == b.question == "Where did Dana Whitlock study?"


def test_settings_choose_the_method_and_a_down_model_falls_back() -> None:
    from docqa.errors import LLMUnavailableError
    from docqa.followups import rewrite_with_settings
    from docqa.settings import Settings

    turns = exchange("Who leads Project Halcyon?", "Dana Whitlock leads it.", "Where did that person work before?")
    asked: list[str] = []

    def generator_of(role: str) -> ScriptedChatGenerator:
        asked.append(role)
        return ScriptedChatGenerator(rules=[(".", _raise)])

    def _raise(prompt: str) -> str:
        raise LLMUnavailableError("connection refused")

    plain = rewrite_with_settings(turns, Settings(conversation_rewrite="deterministic"), generator_of)
    assert plain.method == METHOD_REFERENT and asked == []  # the default never builds a model client
    down = rewrite_with_settings(turns, Settings(conversation_rewrite="llm"), generator_of)
    assert (down.method, down.question) == (METHOD_REFERENT, "Where did Dana Whitlock work before?")
    assert asked == ["summarizer"] and "unavailable" in (down.rejected or "")


@pytest.mark.parametrize(("texts", "expected"), [
    # a list in the answer: a singular "it" keeps the question's subject
    (("Which databases can Harbor Analytics import from?", "PostgreSQL, MySQL and CSV files.",
      "Where does it store the data?"), "Where does Harbor Analytics store the data?"),
    # an apposition is no list: "it" is what the answer named
    (("Which brewery sponsors the Oettinger Rockets?", "Oettinger Brauerei, Germany's best-selling beer.",
      "What was its output in 2011?"), "What was Oettinger Brauerei's output in 2011?"),
    # "that team" with no name for it: the phrase with that noun
    (("When must incidents be reported?", "Within one hour, to the security team.",
      "When does that team inform customers?"), "When does the security team inform customers?"),
    # two names swapped pairwise
    (("What role does Adam Duritz have in Counting Crows?", "Lead vocalist.", "And Ed Roland in Collective Soul?"),
     "What role does Ed Roland have in Collective Soul?"),
    # a title with small words inside it is swapped whole
    (("Is Frozen an animated feature?", "Yes.", "What about Escape from the Dark?"),
     "Is Escape from the Dark an animated feature?"),
    # "Who is X?": the answer describes X, so "his" is X
    (("Who is Barnaby Joyce?", "An Australian politician, Deputy Prime Minister since 2016.",
      "Who was his chief of staff?"), "Who was Barnaby Joyce's chief of staff?"),
])
def test_lists_appositions_noun_phrases_and_titles(texts: tuple[str, ...], expected: str) -> None:
    assert rewrite_followup(exchange(*texts)).question == expected


def test_the_rewrite_step_carries_the_wall_clock_of_the_run() -> None:
    import time

    before = time.time()
    step = rewrite_followup(exchange("Who leads Project Halcyon?", "Dana.", "Where did she study?")).to_step()
    assert before <= step.started_at <= time.time()  # never 0: a trace's offsets are measured from it
    assert 0 <= step.duration_s < 5


def test_an_uncertain_swap_keeps_the_previous_question_as_context() -> None:
    # "meals" could stand for "hotel" or "cities": neither is certain, so nothing is swapped.
    rewrite = rewrite_followup(exchange("What is the hotel limit in major cities?", "180 euros a night.",
                                        "and for meals?"))
    assert rewrite.method == METHOD_CONTEXT
    assert rewrite.question == "For meals? (regarding: What is the hotel limit in major cities)"


def test_openai_content_parts_are_read_as_text() -> None:
    rewrite = rewrite_followup([
        {"role": "user", "content": [{"type": "text", "text": "Who leads Project Halcyon?"}]},
        {"role": "assistant", "content": "Dana Whitlock."},
        {"role": "user", "content": [{"type": "text", "text": "Where did she"}, {"type": "image_url"},
                                     {"type": "text", "text": "study?"}]}])
    assert rewrite.question == "Where did Dana Whitlock study?"
