"""docqa: enterprise document question answering on Haystack 3."""

import os

# Both are read when haystack is first imported, so they must be set before any haystack import.
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

__version__ = "0.1.0"

from docqa import protocol_checks

protocol_checks.install()
