"""The one LLM client path: a Haystack `OpenAIChatGenerator` per role, pointed at any OpenAI-compatible endpoint.

A role (reasoner, summarizer, generator, grader, planner) uses its `DOCQA_LLM_ROLES__<ROLE>__*` override where
set, else the global `DOCQA_LLM_BASE_URL` / `DOCQA_LLM_MODEL` / `DOCQA_LLM_API_KEY`. Without a base URL the
embedded server (`docqa.llm.local_server`) serves the packaged model on loopback, so production and tests run
the same client code.

Usage:
    generator = build_chat_generator(settings, "reasoner")
    check_llm_endpoint(settings, "reasoner")       # LLMUnavailableError with a one-line message when down
    reply = generator.run(messages=[ChatMessage.from_user("Hello")])["replies"][0].text
"""

from __future__ import annotations

import os

import httpx
from haystack.components.generators.chat import OpenAIChatGenerator
from haystack.utils import Secret

from docqa.errors import LLMUnavailableError
from docqa.llm.local_server import ensure_local_llm
from docqa.settings import JUDGE_ROLE, LLM_ROLES, LLMEndpoint, Settings

# llama_cpp.server ignores the key, but the OpenAI client refuses to start without one.
_LOCAL_API_KEY = "sk-local-no-key"
# An endpoint that answers /models at all is reachable; a slow one is judged by the real call's timeout.
_CHECK_TIMEOUT_S = 10.0


def resolve_endpoint(settings: Settings, role: str) -> tuple[str, str, Secret]:
    """Base URL, model name and API key of a role, starting the embedded server when no URL is configured.

    :param settings: the LLM settings.
    :param role: one of `docqa.settings.LLM_ROLES`, or `JUDGE_ROLE` (evaluation's grader).
    :returns: `(base_url, model, api_key)`.
    :raises ValueError: unknown role.
    """
    if role not in LLM_ROLES and role != JUDGE_ROLE:
        raise ValueError(f"unknown LLM role {role!r}; expected one of {', '.join(LLM_ROLES)}")
    endpoint = settings.endpoint_for(role)
    if endpoint.base_url is None:
        local = ensure_local_llm(settings)
        return local.base_url, local.model, Secret.from_token(_LOCAL_API_KEY)
    model = endpoint.model or settings.llm_model
    return endpoint.base_url, model, _api_key(settings, role, endpoint)


def build_chat_generator(settings: Settings, role: str) -> OpenAIChatGenerator:
    """The chat generator of a role.

    :param settings: endpoint, timeout, retries, temperature and max_tokens are taken from here.
    :param role: one of `docqa.settings.LLM_ROLES`.
    :returns: an `OpenAIChatGenerator` (not yet warmed up).
    :raises ValueError: unknown role.
    :raises DocqaError: the embedded server cannot start (see `docqa.llm.local_server.ensure_local_llm`).
    """
    base_url, model, api_key = resolve_endpoint(settings, role)
    return OpenAIChatGenerator(
        api_key=api_key,
        model=model,
        api_base_url=base_url,
        generation_kwargs={"temperature": settings.llm_temperature, "max_tokens": settings.llm_max_tokens},
        timeout=settings.llm_timeout_s,
        max_retries=settings.llm_max_retries,
    )


def check_llm_endpoint(settings: Settings, role: str) -> None:
    """Fail fast, before a run, when a role's endpoint cannot serve requests.

    :param settings: the LLM settings.
    :param role: one of `docqa.settings.LLM_ROLES`.
    :raises LLMUnavailableError: the endpoint is unreachable, answers with a server error or rejects the key.
    :raises DocqaError: the embedded server cannot start (no base URL configured for the role).
    """
    if settings.endpoint_for(role).base_url is None:
        # Starting (or finding) the embedded server already waited for it to answer.
        resolve_endpoint(settings, role)
        return
    base_url, _, api_key = resolve_endpoint(settings, role)
    url = base_url.rstrip("/") + "/models"
    headers = {"Authorization": f"Bearer {api_key.resolve_value()}"}
    try:
        response = httpx.get(url, headers=headers, timeout=min(_CHECK_TIMEOUT_S, settings.llm_timeout_s))
    except httpx.HTTPError as exc:
        raise LLMUnavailableError(
            f"LLM endpoint unreachable ({base_url}, role {role}): {type(exc).__name__}: {_one_line(exc)}"
        ) from exc
    if response.status_code in (401, 403):
        raise LLMUnavailableError(
            f"LLM endpoint rejected the API key ({base_url}, role {role}): HTTP {response.status_code}"
        )
    # Some compatible servers do not implement /models (404): they answered, so they are reachable.
    if response.status_code >= 500:
        raise LLMUnavailableError(
            f"LLM endpoint failed ({base_url}, role {role}): HTTP {response.status_code}"
        )


def _api_key(settings: Settings, role: str, endpoint: LLMEndpoint) -> Secret:
    if endpoint.api_key is None:
        # Many self-hosted servers need no key; the OpenAI client still requires a non-empty one.
        return Secret.from_token(_LOCAL_API_KEY)
    value = endpoint.api_key.get_secret_value()
    # Referencing the variable the key came from keeps the generator serialisable without writing the key out.
    for name in (f"DOCQA_LLM_ROLES__{role.upper()}__API_KEY", "DOCQA_LLM_API_KEY"):
        if os.environ.get(name) == value:
            return Secret.from_env_var(name)
    return Secret.from_token(value)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
