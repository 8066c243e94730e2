#!/usr/bin/env bash
# EHI joint training at the paper's schedule (100 epochs, refresh every 5) on a lent GPU machine, in one call of
# the device tool; the sweeps (pytrec_eval) then run here on the vectors it brings back. docs/ehi.md has the
# protocol and the results. Needs .dev/ (git-ignored, carried): whl/ (faiss-cpu, datasets, dill, multiprocess,
# sentencex wheels for Python 3.12: what the GPU image lacks), model/ (benchmarks/device/device_pack.py pack of the
# offline MiniLM, SciFact's tokens), scifact/ (the BEIR data).
#   run: bash benchmarks/device/ehi_device.sh     (env: BUDGET seconds from the start to the end of the trainings,
#        default 400, so that the call with its packing stays inside 420 s; DEVICE, EPOCHS, NO_INSTALL;
#        EXTRA: more bench_ehi train options for every run, e.g. EXTRA="--branching 40" or a new loss term;
#        TAG: a suffix for the run names, so results of several calls do not overwrite each other)
set -uo pipefail
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
BUDGET=${BUDGET:-400}
DEVICE=${DEVICE:-cuda}
EPOCHS=${EPOCHS:-100}
DATA=${DATA:-.dev}
OUTDIR=${OUT:-/tmp/ehi-out}
L=benchmarks/out/ehi/logs
mkdir -p "$OUTDIR" $L
start=$(date +%s)
if [ -z "${NO_INSTALL:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .dev/whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
  nvidia-smi -L
fi
PY=${PY:-python3}
$PY -c "import torch, sentence_transformers as s, transformers as t, datasets as d, faiss; print(torch.__version__, s.__version__, t.__version__, d.__version__, faiss.__version__, torch.cuda.is_available())"
$PY -m benchmarks.device.device_pack unpack .dev/model /tmp/minilm || exit 1
B="$PY -m benchmarks.retrieval.bench_ehi --data $DATA --device $DEVICE --base-model /tmp/minilm --threads 4"
$B encode --model /tmp/minilm > $L/encode.log 2>&1 || { cat $L/encode.log; exit 1; }
C="--branching 160 --init kmeans --batch-size 32 --epochs $EPOCHS --refresh-every ${REFRESH:-5} --encoder-lr 2e-5 --checkpoint ${EXTRA:-} --tag=${TAG:-}"
left=$(( BUDGET - ($(date +%s) - start) ))
echo "setup $(( $(date +%s) - start )) s; trainings get $left s"
timeout "$left" $B train --kind joint --split dev $C --seeds 0 > $L/joint-dev.log 2>&1 &
timeout "$left" $B train --kind joint --split test $C --seeds 0 > $L/joint-test.log 2>&1 &
timeout "$left" $B train --kind de --split test $C --seeds 0 > $L/de-test.log 2>&1 &
wait
echo "trainings done at $(( $(date +%s) - start )) s"
O=benchmarks/out/ehi
tar -C $O -cf "$OUTDIR/base.tar" base_len128_corpus.npy base_len128_queries.npy query_ids.json
for n in joint-dev joint-test de-test; do
  n=$(cd $O && ls -d models/$n-* 2>/dev/null | head -n 1 | xargs -r basename); [ -n "$n" ] || continue
  files=$(cd $O && ls ${n}_corpus.npy ${n}_queries.npy ${n}_checkpoints.jsonl train-$n.json models/$n/ehi_* 2>/dev/null)
  tar -C $O -cf "$OUTDIR/$n.tar" $files
done
tail -n 80 $L/*.log > "$OUTDIR/logs.txt"
tail -n 3 $L/*.log
nvidia-smi --query-gpu=name,memory.used --format=csv 2>/dev/null
ls -la "$OUTDIR"
