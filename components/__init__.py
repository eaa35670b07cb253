"""Haystack components of docqa's reasoning strategies; each owns its prompts in `prompts/`."""
