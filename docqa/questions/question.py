"""What is asked (`Ask`), who asks (`Asker`) and the question once validated (`Question`).

An `Ask` is what an entry point parsed from its request, untrusted. `QuestionService.prepare` turns it into a
`Question` exactly once: the text masked and checked, a follow-up rewritten into a standalone question, the
strategy chosen (with how), its options validated into the strategy's options model and its runtime inputs into
`run` keyword arguments. A `Question` is immutable and is all a run needs; its `options` model is also the key of
the built pipeline.

Usage:
    ask = Ask("and when was it founded?", strategy="auto", history=["Where is Halcyon headquartered?"])
    asker = Asker(AccessScope("acme", frozenset({"user:alice"})), asked_by="alice")
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from docqa.access import AccessScope
from docqa.accounts.identity import Caller
from docqa.conversation import Rewrite
from docqa.pipelines.options import StrategyOptions
from docqa.questions.strategy_choice import AUTO
from docqa.result import Step


@dataclass(frozen=True)
class Ask:
    """A question as an entry point received it (unmasked, unvalidated).

    :param question: the question, or a conversation's follow-up.
    :param strategy: a registered strategy name, or `auto`.
    :param options: the strategy's build options as given (`{"top_k": 3}`), or an options model an entry point
        already validated once for many questions (`QuestionService.options`).
    :param inputs: runtime inputs of the strategy's run (`as_of`, `patient_id`, `record_offset`).
    :param conversation_id: one of the asker's stored conversations, or `new` to start one; the question is
        rewritten against its stored questions and the answer is stored as its next turn.
    :param history: earlier turns given by the caller itself (an OpenAI chat's messages), oldest first: user
        questions as text, or `{"role": "user" | "assistant", "content": ...}` messages (answers too, which a
        follow-up may refer to); ignored with `conversation_id`, whose stored turns are the history.
    :param filters: a metadata filter narrowing retrieval further; always combined with the asker's access
        filter, never a replacement for it.
    :param channel: the entry point, when it should be recorded with how the strategy was selected (`mcp`).
    """

    question: str
    strategy: str = AUTO
    options: Mapping[str, Any] | StrategyOptions = field(default_factory=dict)
    inputs: Mapping[str, Any] = field(default_factory=dict)
    conversation_id: str | None = None
    history: Sequence[str | Mapping[str, str]] = ()
    filters: dict[str, Any] | None = None
    channel: str | None = None


@dataclass(frozen=True)
class Asker:
    """Who asks: the access scope the question is answered with and who the trace names.

    The scope always comes from the authenticated caller (or, for the CLI and evaluation, from the operator),
    never from the request. Conversations belong to (`scope.tenant`, `asked_by`).
    """

    scope: AccessScope
    asked_by: str

    @classmethod
    def of(cls, caller: Caller) -> Asker:
        return cls(scope=caller.scope(), asked_by=caller.user_id)

    @property
    def tenant(self) -> str:
        return self.scope.tenant


@dataclass(frozen=True)
class Question:
    """A validated question, ready to run.

    :param text: the question the strategy answers: masked, stripped, within the length limit (a follow-up's
        standalone form).
    :param asked: what the asker typed, masked (stored as the conversation's turn).
    :param strategy: the registered strategy that answers it.
    :param options: its validated options model, every default filled in (equal models share a built pipeline).
    :param run_inputs: its validated runtime inputs, as keyword arguments of its `run`.
    :param selection: how the strategy was selected, recorded in the run's config.
    :param rewrite: the conversation rewrite, recorded as the run's first step; None when not a follow-up.
    :param conversation_id: the stored conversation the answer goes to (`new` starts one), if any.
    :param filters: the extra narrowing filter (combined with the asker's access filter).
    """

    text: str
    asked: str
    strategy: str
    options: StrategyOptions
    run_inputs: Mapping[str, Any]
    selection: Mapping[str, Any]
    rewrite: Rewrite | None = None
    conversation_id: str | None = None
    filters: dict[str, Any] | None = None

    def leading_steps(self) -> list[Step]:
        """Steps the service records before the strategy's own: the conversation rewrite, when there is one."""
        return [] if self.rewrite is None else [self.rewrite.to_step()]

    def recorded_config(self, strategy_config: Mapping[str, Any]) -> dict[str, Any]:
        """The run's config as the trace records it: the strategy's, and how it was selected."""
        return {**strategy_config, "selection": dict(self.selection)}
