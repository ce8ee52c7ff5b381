#!/usr/bin/env bash
# One device call of issue 15's plan (benchmarks/NOTES.md, "Device plan"), run from the
# repo root on the lent GPU machine with `.whl` carried (benchmarks/prepare_device.sh):
#
#   bash benchmarks/device_call.sh 1   # headline: 3 contenders x eager/compile/ro (+ VARIANT=name in eager); eager matrix
#                                      # (MATRIX=0: none);
#                                      # memory + opcount on CUDA (with the variant)
#   bash benchmarks/device_call.sh 2   # compile + ro, rewritten vs hiera-optim: tiny, large, base_q3
#   bash benchmarks/device_call.sh 3   # compile + ro, rewritten vs hiera-optim: small, video, base_q1
#   bash benchmarks/device_call.sh 4   # the whole compile + ro matrix on a host of 2 or 4 GPUs (nvidia-h200-x2/-x4):
#                                      # headline base with FAIR compile too, then every other cell rewritten vs
#                                      # hiera-optim; one timing process per GPU (each interleaves its own groups),
#                                      # --profile (GPU ms by kernel kind of one step per contender);
#                                      # on one GPU: GPU_CELLS="base,small,video" [RO_CELLS=..] [EAGER_CELLS=..]
#                                      # [MODES=compile] (GPU_CELLS' modes, default compile,ro)
#                                      # [FAIR_COMPILE=1] (FAIR compile in every GPU_CELLS cell, not only base)
#
# Phase A fills inductor's on-disk caches (FX graph + AOTAutograd) with parallel
# `bench.py --warm-only` processes, one per (cell, contender, mode) group, on the 16
# cores: compiling is CPU work, and one process compiles one graph at a time.  Phase B
# is ONE timing process (interleaved rounds, nothing else running): its compiles hit
# those caches (seen on the CPU: 177 s -> 8 s for the same graph), so only dynamo's
# trace is paid again.  Every phase has a wall limit; bench.py's --budget-s skips the
# groups that would not fit and says so.  Files under $OUT (8 at most come back):
# bench.log (both phases' summaries), headline/matrix_eager/compile_ro_partN .json, memory.txt/.json,
# opcount.txt/.json; the bench.md tables are printed last (the tool returns the output's end).
set -u
PART=${1:?usage: device_call.sh 1|2|3|4}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
START=$(date +%s)
LIMIT=${LIMIT:-520}            # whole call, seconds (the tool's limit is 600)
elapsed() { echo $(( $(date +%s) - START )); }
log() { echo "[device_call $(elapsed)s] $*" | tee -a "$OUT/bench.log"; }

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "wheel install failed (is .whl carried?)"; exit 2; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
log "part $PART; $(nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader 2>&1)"

case $PART in
  1) WARM_LIMIT=200
     WARM=("base compile fair" "base compile rewritten" "base compile optim" "base ro rewritten" "base ro optim")
     ;;
  2) WARM_LIMIT=210; CELLS=tiny,large,base_q3 ;;
  3) WARM_LIMIT=210; CELLS=small,video,base_q1 ;;
  4) WARM_LIMIT=230
     NGPU=$(nvidia-smi -L | wc -l)
     # per GPU: the cells its timing processes run, ';'-separated (phase B ~150-250 s each);
     # on one GPU name them: GPU_CELLS="base,small,video" bash benchmarks/device_call.sh 4
     if [ -n "${GPU_CELLS:-}" ]; then IFS=';' read -r -a GPU_CELLS <<< "$GPU_CELLS"
     else case $NGPU in
       4) GPU_CELLS=("base" "large,tiny" "base_q1,small" "video,base_q3") ;;
       2) GPU_CELLS=("base,large,tiny" "base_q1,small,video,base_q3") ;;
       *) echo "part 4 on $NGPU GPU(s): give GPU_CELLS"; exit 2 ;;
     esac; fi
     NGPU=${#GPU_CELLS[@]}
     ALL_CELLS=$(IFS=,; echo "${GPU_CELLS[*]}")
     # cell-major, so GPU i % NGPU spreads each cell's warm-ups (their memory) over the GPUs
     WARM=()
     MODES=${MODES:-compile,ro}
     case ",$ALL_CELLS," in *,base,*) WARM+=("base compile fair") ;; esac
     for c in ${ALL_CELLS//,/ }; do
       [ "${FAIR_COMPILE:-}" = 1 ] && [ "$c" != base ] && WARM+=("$c compile fair")
       for m in ${MODES//,/ }; do WARM+=("$c $m rewritten" "$c $m optim"); done
     done
     # RO_CELLS: cells timed in reduce-overhead only (their compile group ran in an earlier call);
     # EAGER_CELLS: cells timed in eager, all three contenders, last (no compile, no warm-up process)
     RO_CELLS=${RO_CELLS:-}
     for c in ${RO_CELLS//,/ }; do WARM+=("$c ro rewritten" "$c ro optim"); done
     ;;
  *) echo "unknown part $PART"; exit 2 ;;
esac
if [ "$PART" != 1 ] && [ "$PART" != 4 ]; then
  WARM=()
  for c in ${CELLS//,/ }; do
    for m in compile ro; do WARM+=("$c $m rewritten" "$c $m optim"); done
  done
fi
rm -rf /tmp/warm_*.log /tmp/b_*

# ---- phase A: fill the compile caches in parallel ----------------------------------------
CORES=$(nproc)
THREADS=$(( CORES / ${#WARM[@]} )); [ "$THREADS" -lt 1 ] && THREADS=1
pids=()
i=0
for w in "${WARM[@]}"; do
  set -- $w
  # inductor's caches are keyed by the graph and the device model, not the index: a
  # warm-up on any GPU serves the timing process of another (all see their GPU as cuda:0)
  [ "$PART" = 4 ] && export CUDA_VISIBLE_DEVICES=$(( i % NGPU ))
  TORCHINDUCTOR_COMPILE_THREADS=$THREADS timeout "$WARM_LIMIT" python3 benchmarks/bench.py --warm-only \
    --warmup 1 --steps 1 --budget-s "$WARM_LIMIT" --cells "$1" --modes "$2" --contenders "$3" \
    > "/tmp/warm_$i.log" 2>&1 &
  pids+=($!); i=$((i + 1))
done
unset CUDA_VISIBLE_DEVICES
if [ "$PART" = 1 ]; then
  # counts and allocator bytes, not timings: they may share the machine with phase A
  # (opcount's kernel counts and GPU busy ms hold; its wall ms is contended here)
  ( timeout 100 python3 benchmarks/memory.py --device cuda --dtype bf16 --batch 128 ${VARIANT:+--variant $VARIANT} --json "$OUT/memory.json" \
      > "$OUT/memory.txt" 2>&1
    timeout 100 python3 benchmarks/opcount.py --device cuda --dtype bf16 --batch 128 ${VARIANT:+--variant $VARIANT} --json "$OUT/opcount.json" \
      > "$OUT/opcount.txt" 2>&1 ) &
  pids+=($!)
fi
wait "${pids[@]}"
for f in /tmp/warm_*.log; do
  grep -hE "^\[bench .*(=== cell|: build|warm-up|ERROR)" "$f" | sed "s|^|$(basename "$f" .log) |" >> "$OUT/bench.log"
done
log "phase A done (warm-up processes: ${#WARM[@]}, $THREADS compile threads each)"

# ---- phase B: one timing process ---------------------------------------------------------
bench() {  # out-name, budget, bench.py args...
  local name=$1 budget=$2; shift 2
  log "phase B: bench.py $* (budget ${budget}s)"
  python3 benchmarks/bench.py "$@" --budget-s "$budget" --expect-warm-s 40 --out "/tmp/b_$name" > "/tmp/b_$name.log" 2>&1
  log "bench.py $name rc $?"
  cp "/tmp/b_$name/bench.json" "$OUT/$name.json" 2>/dev/null
  grep -hE "^\[bench " "/tmp/b_$name.log" >> "$OUT/bench.log"
}
if [ "$PART" = 1 ]; then
  bench headline $(( LIMIT - $(elapsed) - 100 )) --cells headline --modes eager,compile,ro \
    ${VARIANT:+--variant $VARIANT --variant-modes eager}
  [ "${MATRIX:-1}" = 1 ] && bench matrix_eager $(( LIMIT - $(elapsed) - 10 )) --cells tiny,small,large,base_q1,base_q3,video --modes eager
elif [ "$PART" = 4 ]; then
  # one timing sequence per GPU, side by side (separate GPUs; the host has cores to spare);
  # the headline base first and alone with FAIR compile too, the other cells rewritten vs hiera-optim
  bpids=()
  for g in $(seq 0 $(( NGPU - 1 ))); do
    ( export CUDA_VISIBLE_DEVICES=$g
      rest=",${GPU_CELLS[$g]},"
      case $rest in *,base,*)
        bench "compile_ro_gpu${g}_base" $(( LIMIT - $(elapsed) - 15 )) --cells base --modes "$MODES" \
          --contenders fair,rewritten,optim --profile
        rest=${rest/,base,/,} ;;
      esac
      rest=${rest#,}; rest=${rest%,}
      others=rewritten,optim; [ "${FAIR_COMPILE:-}" = 1 ] && others=fair,rewritten,optim
      [ -n "$rest" ] && bench "compile_ro_gpu$g" $(( LIMIT - $(elapsed) - 15 )) --cells "$rest" \
        --modes "$MODES" --contenders "$others" --profile ) &
    bpids+=($!)
  done
  wait "${bpids[@]}"
  [ -n "${RO_CELLS:-}" ] && CUDA_VISIBLE_DEVICES=0 bench ro_only $(( LIMIT - $(elapsed) - 15 )) --cells "$RO_CELLS" \
    --modes ro --contenders rewritten,optim --profile
  [ -n "${EAGER_CELLS:-}" ] && CUDA_VISIBLE_DEVICES=0 bench eager $(( LIMIT - $(elapsed) - 5 )) --cells "$EAGER_CELLS" \
    --modes eager --profile
else
  bench "compile_ro_part$PART" $(( LIMIT - $(elapsed) - 15 )) --cells "$CELLS" --modes compile,ro \
    --contenders rewritten,optim
fi
log "done"
# the tables last: the tool returns the end of the output
for f in /tmp/b_*/bench.md; do [ -f "$f" ] && { echo; echo "== $f"; cat "$f"; }; done
[ -f "$OUT/memory.txt" ] && { echo; echo "== memory.txt (head)"; head -30 "$OUT/memory.txt"; }
[ -f "$OUT/opcount.txt" ] && { echo; echo "== opcount.txt (head)"; head -12 "$OUT/opcount.txt"; }
exit 0
