"""`auto` and mspr: chosen when the deployment configured several sources, with the reason naming them."""

from __future__ import annotations

import pytest

from docqa.questions.strategy_choice import choose_pipeline, multi_sources
from docqa.settings import Settings

ALL = ["standard", "resp", "atrag", "mspr"]
MULTI_HOP = "Which film came out first, Alien or Heat?"
SIMPLE = "Who wrote Hamlet?"


def test_multi_hop_questions_go_to_mspr_when_several_sources_are_configured():
    choice = choose_pipeline(MULTI_HOP, ALL, sources=("collection:main", "collection:archive"))
    assert (choice.name, choice.question_type) == ("mspr", "multi_hop")
    assert choice.reason == ("multi-hop cue 'which'; 2 sources configured (collection:main, collection:archive); "
                             "chose 'mspr'")
    assert choice.to_dict()["reason"] == choice.reason


@pytest.mark.parametrize("sources,available,expected", [
    ((), ALL, "resp"),                                            # nothing configured beyond the default
    (("collection:main",), ALL, "resp"),                          # one source: nothing to switch to
    (("collection:main", "web"), ["standard", "resp"], "resp"),   # mspr not registered
])
def test_otherwise_multi_hop_questions_keep_their_strategy(sources, available, expected):
    choice = choose_pipeline(MULTI_HOP, available, sources=sources)
    assert choice.name == expected
    assert "sources configured" not in choice.reason


def test_simple_questions_go_to_mspr_only_when_the_web_is_a_source():
    web = choose_pipeline(SIMPLE, ALL, sources=("collection:main", "web"))
    assert web.name == "mspr"
    assert "2 sources configured (collection:main, web), the web among them" in web.reason
    assert choose_pipeline(SIMPLE, ALL, sources=("collection:main", "collection:archive")).name == "standard"
    assert choose_pipeline("Summarize the expense policy.", ALL, sources=("collection:main", "web")).name == "atrag"


@pytest.mark.parametrize("web", ["web:serperdev", "web:searchapi"])
def test_a_provider_web_source_counts_as_the_web(web):
    choice = choose_pipeline(SIMPLE, ALL, sources=("collection:main", web))
    assert choice.name == "mspr"
    assert f"2 sources configured (collection:main, {web}), the web among them" in choice.reason
    # A collection whose name starts like a web source is still a collection.
    assert choose_pipeline(SIMPLE, ALL, sources=("collection:main", "collection:web")).name == "standard"


def test_only_an_explicit_valid_source_list_counts(tmp_path, monkeypatch):
    monkeypatch.delenv("DOCQA_MSPR_SOURCES", raising=False)
    assert multi_sources(Settings(data_dir=tmp_path)) == ()  # the built-in main + archive default
    monkeypatch.setenv("DOCQA_MSPR_SOURCES", "collection:main, web")
    assert multi_sources(Settings(data_dir=tmp_path)) == ("collection:main", "web")
    monkeypatch.setenv("DOCQA_MSPR_SOURCES", "collection:main,ftp:x")
    assert multi_sources(Settings(data_dir=tmp_path)) == ()


def test_the_question_service_resolves_auto_with_the_configured_sources(tmp_path, monkeypatch):
    monkeypatch.delenv("DOCQA_MSPR_SOURCES", raising=False)
    from types import SimpleNamespace

    from docqa.access import AccessScope
    from docqa.questions import Ask, Asker, QuestionService

    asker = Asker(AccessScope("acme", frozenset({"user:alice"})), "alice")
    configured = Settings(data_dir=tmp_path, mspr_sources="collection:main,web", max_question_chars=500)
    question = QuestionService(SimpleNamespace(settings=configured)).prepare(Ask(MULTI_HOP), asker)
    assert (question.strategy, question.selection["mode"]) == ("mspr", "auto")
    assert "2 sources configured (collection:main, web)" in question.selection["reason"]
    default = QuestionService(SimpleNamespace(settings=Settings(data_dir=tmp_path, max_question_chars=500)))
    assert default.prepare(Ask(MULTI_HOP), asker).strategy == "resp"
