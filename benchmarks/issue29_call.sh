#!/usr/bin/env bash
# One device call (issues 29 and 30), run from the repo root on the lent H200. The device
# has no hiera-transformer/hiera-optim (carried as wheels in `.whl`) and needs no
# libcst/black: the rewritten code is `hiera-rewrite --export` of the current emission,
# made here first and carried (exports are git-ignored: third-party source):
#
#   hiera-rewrite --export benchmarks/results/issue29/export   # here (new or empty folder)
#   run: command="bash benchmarks/issue29_call.sh", carry=[".whl", "benchmarks/results/issue29/export"]
#
#   bash benchmarks/issue29_call.sh
#
# Phase A (in parallel): inductor caches filled by 5 `bench.py --warm-only` processes
# (base compile x FAIR/rewritten/hiera-optim, base ro x rewritten/hiera-optim), and the GPU
# parity suite (benchmarks/gpu_parity.py, issue 30; correctness only, no timing).
# Phase B: ONE timing process, the headline (Hiera-Base MAE 224, B=128, mask 0.6, bf16),
# eager/compile/ro, interleaved rounds, nothing else running.
# $OUT: bench.json, bench.md, device.log (phase B's output), bench.log (both phases'
# summaries), gpu_parity.{md,json,log}, parity_stdout.log.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
START=$(date +%s)
LIMIT=${LIMIT:-560}
SRC=benchmarks/results/issue29/export
elapsed() { echo $(( $(date +%s) - START )); }
log() { echo "[issue29_call $(elapsed)s] $*" | tee -a "$OUT/bench.log"; }

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "wheel install failed (is .whl carried?)"; exit 2; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
log "$(nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader 2>&1)"
python3 -c "import torch; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version())" | tee -a "$OUT/bench.log"

WARM_LIMIT=200
WARM=("base compile fair" "base compile rewritten" "base compile optim" "base ro rewritten" "base ro optim")
THREADS=$(( $(nproc) / ${#WARM[@]} )); [ "$THREADS" -lt 1 ] && THREADS=1
pids=(); i=0
for w in "${WARM[@]}"; do
  set -- $w
  TORCHINDUCTOR_COMPILE_THREADS=$THREADS timeout -k 10 "$WARM_LIMIT" python3 benchmarks/bench.py --warm-only \
    --warmup 1 --steps 1 --budget-s "$WARM_LIMIT" --cells "$1" --modes "$2" --contenders "$3" \
    --rewritten-src "$SRC" > "/tmp/warm_$i.log" 2>&1 &
  pids+=($!); i=$((i + 1))
done
( timeout -k 10 200 python3 benchmarks/gpu_parity.py --device cuda --all-goldens --rewritten-src "$SRC" --out "$OUT" \
    > "$OUT/parity_stdout.log" 2>&1; echo "gpu_parity rc $?" >> "$OUT/parity_stdout.log"
  # diagnostic (tables in parity_stdout.log): the upstream fp16 cells without a loss scale
  # (fp16 as no one trains it: unscaled gradients underflow in the fused kernels)
  echo "=== diagnostic: --loss-scale 1" >> "$OUT/parity_stdout.log"
  timeout -k 10 60 python3 benchmarks/gpu_parity.py --device cuda --only upstream --dtypes fp16 --loss-scale 1 \
    --rewritten-src "$SRC" >> "$OUT/parity_stdout.log" 2>&1 ) &
pids+=($!)
wait "${pids[@]}"
for f in /tmp/warm_*.log; do
  cp "$f" "$OUT/" 2>/dev/null
  grep -hE "^\[bench .*(=== cell|: build|warm-up|ERROR)" "$f" | sed "s|^|$(basename "$f" .log) |" >> "$OUT/bench.log"
done
log "phase A done; $(tail -1 "$OUT/parity_stdout.log")"

log "phase B: headline"
timeout -k 10 $(( LIMIT - $(elapsed) )) python3 benchmarks/bench.py --cells headline --modes eager,compile,ro --rewritten-src "$SRC" \
  --budget-s $(( LIMIT - $(elapsed) - 10 )) --expect-warm-s 40 --out /tmp/b_headline > "$OUT/device.log" 2>&1
log "bench.py rc $?"
cp /tmp/b_headline/bench.json /tmp/b_headline/bench.md "$OUT/" 2>/dev/null
grep -hE "^\[bench " "$OUT/device.log" >> "$OUT/bench.log"
log "done"
echo; grep -E "^cells:|^worst|FAIL" "$OUT/gpu_parity.md" 2>/dev/null | cut -c1-400 | head -24
echo; grep -E "^=== diag|^cells:|^\| upstream" "$OUT/parity_stdout.log" | cut -c1-300
echo; cat "$OUT/bench.md" 2>/dev/null | grep -A12 "ratios per cell" 
echo; grep -E "^\| (fair|rewritten|optim) " "$OUT/bench.md" 2>/dev/null
exit 0
