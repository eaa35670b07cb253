"""Errors a user can act on. Each carries a stable machine-readable code and a one-line message."""


class DocqaError(Exception):
    """Base class for errors reported to users (CLI exit code 2, HTTP 4xx)."""

    code = "docqa_error"
    http_status = 400

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        # For operators only (server log, the CLI): never sent to API callers nor stored in traces.
        self.detail = detail


class InvalidQuestionError(DocqaError):
    code = "invalid_question"
    http_status = 422


class UnknownPipelineError(DocqaError):
    code = "unknown_pipeline"
    http_status = 404


class UnsupportedFileError(DocqaError):
    code = "unsupported_file"
    http_status = 415


class UnreadableFileError(DocqaError):
    code = "unreadable_file"
    http_status = 422


class FileTooLargeError(DocqaError):
    code = "file_too_large"
    http_status = 413


class ModelNotFoundError(DocqaError):
    code = "model_not_found"
    http_status = 503


class LLMUnavailableError(DocqaError):
    code = "llm_unavailable"
    http_status = 503


class AccessDeniedError(DocqaError):
    code = "access_denied"
    http_status = 403


class ConfigurationError(DocqaError):
    code = "configuration_error"
    http_status = 500


class InvalidOptionsError(DocqaError):
    """A strategy option that is unknown, of the wrong type or beyond the server's limits."""

    code = "invalid_options"
    http_status = 422


def check_bounds(**bounds: tuple[float, float, float | None]) -> None:
    """Reject a setting outside its bounds: `name=(value, lowest, highest or None)`, checked in the order given.

    For the limits components and run controls are built with: a wrong one is the configuration's mistake, not
    a user's, so it is a `ValueError` (naming the setting) rather than a `DocqaError`.

    :raises ValueError: the first setting below its lowest value or above its highest.
    """
    for name, (value, lowest, highest) in bounds.items():
        if highest is not None and not lowest <= value <= highest:
            raise ValueError(f"{name} must be between {lowest} and {highest}")
        if value < lowest:
            raise ValueError(f"{name} must be at least {lowest}")
