"""Errors a user can act on. Each carries a stable machine-readable code and a one-line message."""


class DocqaError(Exception):
    """Base class for errors reported to users (CLI exit code 2, HTTP 4xx)."""

    code = "docqa_error"
    http_status = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


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
