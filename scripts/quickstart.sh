#!/usr/bin/env bash
# Set everything up, index the example corpus with the embedded default (FAISS + SQLite store,
# offline all-MiniLM-L6-v2) and answer a few queries.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
store="${STORE:-stores/examples}"
rag-hier index examples/corpus --store "$store"
rag-hier info --store "$store"
for q in "How does a lighthouse lens work?" "Why do bees make honey?" "What causes spring tides?"; do
  echo
  echo "Q: $q"
  rag-hier search --store "$store" --query "$q" --top-k 3
done
echo
rag-hier eval --store "$store" --queries examples/queries.jsonl --qrels examples/qrels.tsv --aggregate doc
