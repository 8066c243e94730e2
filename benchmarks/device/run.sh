#!/usr/bin/env bash
# Run device scripts on a lent GPU machine, in one call of the device tool: set up, then each script in turn
# with its own deadline in seconds. Results (<name>.json, <name>.log) go to $OUT.
#
#   here, once per machine:  bash benchmarks/device/prepare.sh          (fills the git-ignored .dev/)
#   device tool, carry .dev: bash benchmarks/device/run.sh ehi:360
#   here, no GPU:            SMOKE=1 bash benchmarks/device/run.sh gpu_check:60 hce:60
# ARGS: more options for every script (e.g. ARGS="--sections encode train").
# LIMIT: seconds for the whole call, setup included (default 420): a script gets at most what is left of it less
# 20 s, and is killed 15 s after its own deadline; each script writes its result file after every stage.
set -uo pipefail
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
OUTDIR=${OUT:-benchmarks/out/device}
LIMIT=${LIMIT:-420}
mkdir -p "$OUTDIR"
start=$(date +%s)
if [ -n "${SMOKE:-}" ]; then
  if [ -z "${PY:-}" ]; then
    if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
  fi
  opts=(--smoke)
else
  PY=${PY:-python3}
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .dev/whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
  nvidia-smi -L
  $PY -m benchmarks.device.device_pack unpack .dev/model /tmp/minilm || exit 1
  opts=(--data .dev --model /tmp/minilm)
fi
echo "setup $(( $(date +%s) - start )) s"
status=0
for spec in "$@"; do
  name=${spec%%:*}
  seconds=${spec##*:}
  t=$(date +%s)
  left=$(( LIMIT - (t - start) - 20 ))
  [ "$seconds" -le "$left" ] || seconds=$left
  if [ "$seconds" -lt 30 ]; then
    echo "$name: skipped, $left s left of LIMIT=$LIMIT"
    status=1
    continue
  fi
  timeout -k 5 $(( seconds + 15 )) $PY -m "benchmarks.device.$name" "${opts[@]}" ${ARGS:-} --out "$OUTDIR" --seconds "$seconds" \
    > "$OUTDIR/$name.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] || status=1
  echo "$name: exit $rc after $(( $(date +%s) - t )) s"
  grep -E "done in|Error|error:|Traceback" "$OUTDIR/$name.log" | tail -n 12
done
echo "total $(( $(date +%s) - start )) s"
exit $status
