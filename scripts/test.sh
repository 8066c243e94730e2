#!/usr/bin/env bash
# Set everything up (.venv with rag-hier, both framework integrations and the test tools) and run
# the whole test suite: unit tests on a tiny model, tests on the real offline model, CLI, crash
# safety, and the Haystack and LlamaIndex conformance suites. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
. .venv/bin/activate
python -m pytest -q "$@"
