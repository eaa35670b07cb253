#!/usr/bin/env bash
# Install docqa with its test dependencies into ./.venv and run the whole test suite
# (unit tests, store conformance, integration tests against the local LLM server, PostgreSQL, Redis, workers).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
# llama-cpp-python is compiled from source on first install (several minutes on 2 cores); pip caches the wheel.
python -m pip install --quiet -e ".[local-llm,test]"

# The web UI tests drive Debian's chromium through playwright (never `playwright install`: no downloads).
command -v chromium >/dev/null || (apt-get update && apt-get install -y --no-install-recommends chromium)

exec python -m pytest -ra "$@"
