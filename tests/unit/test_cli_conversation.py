"""`docqa ask --conversation`: the CLI asks in a stored conversation through the question service, so a
follow-up naming what the last answer named is rewritten like on every other entry point."""

from __future__ import annotations

import json

from docqa import cli
from docqa.runtime import Runtime
from docqa.schema import upgrade_database
from docqa.settings import Settings
from tests.support.scripted_chat import ScriptedChatGenerator


def test_a_follow_up_in_a_stored_conversation(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("DOCQA_DATA_DIR", str(tmp_path))
    upgrade_database(Settings(data_dir=tmp_path))
    llm = ScriptedChatGenerator(rules=[(r"Where did Dana Whitlock work", "At Orbital Systems."),
                                       (r"Project Halcyon", "Dana Whitlock leads it.")], default="I do not know.")
    monkeypatch.setattr(cli, "_runtime", lambda settings: Runtime(settings, chat_generator_factory=lambda role: llm))

    ask = ["ask", "--pipeline", "no_retrieval", "--asked-by", "alice", "--json", "--principal", "group:hr"]
    assert cli.main([*ask, "Who leads Project Halcyon?", "--conversation", "new"]) == 0
    first = capsys.readouterr()
    conversation = first.err.split("conversation ", 1)[1].split()[0]
    assert json.loads(first.out)["answer"].startswith("Dana Whitlock leads it.")

    assert cli.main([*ask, "Where did that person work before?", "--conversation", conversation]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["question"] == "Where did Dana Whitlock work before?"
    assert second["steps"][0]["kind"] == "rewrite"
    assert second["steps"][0]["outputs"]["method"] == "referent_replaced"
    # The trace records who the question was asked as: "who could read this?" is answerable for a CLI asker.
    assert second["config"]["asked_as"] == ["everyone", "group:hr"]

    # Another asker's conversation is not found: the CLI says so and stops.
    assert cli.main(["ask", "--pipeline", "no_retrieval", "--asked-by", "bob", "and her team?",
                     "--conversation", conversation]) == 2
