#!/usr/bin/env bash
# The Milvus tests on a real Milvus server: installs PyPI milvus==2.3.5 (the Go + C++ standalone server with
# embedded etcd and local storage) in its own venv (.venv-milvus, never the project's), starts it on 127.0.0.1
# with a fresh data directory, runs the store contract suite, the Haystack store suites and the cross-backend
# top-10 tests against it (RAG_HIER_TEST_MILVUS_URI), and stops it. Tests that need a newer server skip, naming
# the capability and the version that has it. Extra arguments go to pytest.
# Needs .venv (bash scripts/setup.sh test). RAG_HIER_MILVUS_VENV: another venv for the server.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${RAG_HIER_MILVUS_VENV:-.venv-milvus}"
PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import milvus" 2>/dev/null; then
  "$PYTHON" -m venv "$VENV"
  # one wheel (~80 MB, no dependencies); retried once: a slow index must not fail the run on the first timeout
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --timeout 60 "milvus==2.3.5" \
    || "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --timeout 120 "milvus==2.3.5"
fi

DATA="$(mktemp -d "${TMPDIR:-/tmp}/rag-hier-milvus.XXXXXX")"
LOG="$DATA.log"
"$VENV/bin/python" scripts/milvus_server.py --data "$DATA/server" --uri-file "$DATA/uri" >"$LOG" 2>&1 &
SERVER=$!
stop_server() {
  # SIGTERM (milvus_server.py stops the server within 30 s), then SIGKILL past 60 s: stopping never hangs the run
  kill -TERM "$SERVER" 2>/dev/null || true
  for _ in $(seq 1 120); do
    kill -0 "$SERVER" 2>/dev/null || break
    sleep 0.5
  done
  if kill -0 "$SERVER" 2>/dev/null; then
    pkill -KILL -P "$SERVER" || true  # the server binary, which the wrapper did not stop
    kill -KILL "$SERVER" 2>/dev/null || true
  fi
  wait "$SERVER" 2>/dev/null || true
  rm -rf "$DATA" "$LOG"
}
trap stop_server EXIT

for _ in $(seq 1 360); do
  [ -s "$DATA/uri" ] && break
  if ! kill -0 "$SERVER" 2>/dev/null; then
    echo "the Milvus server did not start:" >&2
    cat "$LOG" >&2
    exit 1
  fi
  sleep 0.5
done
if [ ! -s "$DATA/uri" ]; then
  echo "the Milvus server did not become healthy in 180 s:" >&2
  cat "$LOG" >&2
  exit 1
fi
RAG_HIER_TEST_MILVUS_URI="$(cat "$DATA/uri")"
export RAG_HIER_TEST_MILVUS_URI
echo "Milvus server: $(cat "$LOG")"

. .venv/bin/activate
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"
python -m pytest -q -p no:cacheprovider \
  tests/milvus/test_contract_milvus.py \
  tests/milvus/test_milvus_strategies.py \
  tests/milvus/test_milvus_maintenance.py \
  tests/milvus/test_milvus_switching.py \
  tests/milvus/test_milvus_tuning.py \
  tests/integrations/haystack/test_document_store.py \
  tests/integrations/haystack/test_document_store_async.py \
  tests/integrations/haystack/test_meta_aggregates.py \
  tests/integrations/haystack/test_filter_pushdown.py \
  tests/integrations/haystack/test_haystack_strategies.py \
  -k "milvus or Milvus" "$@"
