#!/usr/bin/env bash
# Fill .dev/ (git-ignored) for a lent GPU machine and report the carried size: benchmarks/device/prepare.py.
# Usage: bash benchmarks/device/prepare.sh [DATA_DIR] [--for ehi tied_atomic ...]
# Python: $PY, else the repository's .venv when there is one, else python3 (it needs the project installed).
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA=${1:-../shared/data}
[ $# -gt 0 ] && shift
if [ -z "${PY:-}" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
exec "$PY" -m benchmarks.device.prepare --data "$DATA" "$@"
