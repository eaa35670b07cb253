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
# llama-cpp-python is compiled from source on first install (several minutes on 2 cores). A native build
# (-march=native: AVX-512/AMX kernels) segfaults on the first completion on some CPUs, and pip's wheel cache
# may hold such a build, so the venv gets a portable AVX2 build, compiled once per venv without the cache.
if [ ! -f .venv/.llama-cpp-portable ]; then
  llama_pin=$(grep -o 'llama-cpp-python\[server\]==[0-9.]*' pyproject.toml)
  CMAKE_ARGS="${DOCQA_LLAMA_CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON}" \
    python -m pip install --quiet --no-cache-dir --force-reinstall --no-deps "$llama_pin"
  touch .venv/.llama-cpp-portable
fi
python -m pip install --quiet -e ".[local-llm,test]"

# The web UI tests drive Debian's chromium through playwright (never `playwright install`: no downloads).
command -v chromium >/dev/null || (apt-get update && apt-get install -y --no-install-recommends chromium)
# IMAP sources are tested against a real Dovecot, started by the tests on a loopback port.
command -v dovecot >/dev/null || [ -x /usr/sbin/dovecot ] || \
  (apt-get update && apt-get install -y --no-install-recommends dovecot-imapd)
# OCR of scanned PDF pages and images: Debian's Tesseract and its English language data.
command -v tesseract >/dev/null || (apt-get update && apt-get install -y --no-install-recommends tesseract-ocr \
  tesseract-ocr-eng)

exec python -m pytest -ra "$@"
