"""The one question service: every entry point asks through `QuestionService` (see `service.py`).

Layering: settings/result -> llm/stores -> components -> pipelines -> audit/ingestion -> questions ->
server/cli. This package may import pipelines and audit; nothing below it imports it.

Usage:
    from docqa.questions import Ask, Asker, QuestionService
    service = QuestionService(runtime)
    answer = service.answer(Ask("Who founded Acme?"), Asker(scope, asked_by="alice"))
"""

from docqa.questions.errors import (
    ConversationNotFoundError,
    QueryCancelledError,
    QueryFailedError,
    QueryTimedOutError,
)
from docqa.questions.question import Ask, Asker, Question
from docqa.questions.service import Answer, QuestionService, QuestionStream, Slots
from docqa.questions.strategy_choice import AUTO

__all__ = [
    "AUTO",
    "Answer",
    "Ask",
    "Asker",
    "ConversationNotFoundError",
    "QueryCancelledError",
    "QueryFailedError",
    "QueryTimedOutError",
    "Question",
    "QuestionService",
    "QuestionStream",
    "Slots",
]
