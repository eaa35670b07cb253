"""The one LLM path: OpenAI-compatible chat completions, with defensive structured-output helpers."""
