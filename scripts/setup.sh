#!/usr/bin/env bash
# Create .venv and install rag-hier with the given extras (default: none). Idempotent.
# Usage: bash scripts/setup.sh [extras]      e.g. bash scripts/setup.sh test
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
# A CPU build of PyTorch keeps the install lean (an unpinned torch pulls a multi-GB CUDA build).
# Override with TORCH_SPEC, e.g. TORCH_SPEC="torch --index-url https://download.pytorch.org/whl/cu124".
# shellcheck disable=SC2086
python -m pip install --quiet ${TORCH_SPEC:-torch==2.13.0}
if [ -n "$extras" ]; then
  python -m pip install --quiet -e ".[${extras}]"
else
  python -m pip install --quiet -e .
fi
