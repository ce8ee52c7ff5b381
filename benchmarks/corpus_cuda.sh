#!/usr/bin/env bash
# `hiera-rewrite --verify --verify-cuda` on real forks of the corpus (issue 31 / issue 30:
# proven where it runs), one device call:
#
#   here:   python benchmarks/fork_corpus.py carry NAME...     # copies the laid-out repos into
#                                                              # benchmarks/results/issue31/export/ (git-ignored)
#   device: run command="bash benchmarks/corpus_cuda.sh", carry=[".whl", "benchmarks/results/issue31/export"]
#
# Each repo is verified from its folder's root with the files of its fork_corpus.json
# entry, in float64, float32, bfloat16 and float16 on CUDA (--verify-dtype bfloat16,float16;
# float32 always runs) and on CPU float64, JOBS repos at a time on the one GPU, each within
# PER_REPO seconds. The timing lines verify prints after parity are NOT measurements here:
# the repos share the GPU (--bench-batch 2 keeps them short). $OUT: <repo>.log, summary.md.
#
# KERNELS="default math" also runs each repo with every fused SDPA kernel switched off
# (flash, memory-efficient, cuDNN: a sitecustomize.py on PYTHONPATH, so verify's workers
# get it too). Both sides then run the math kernel; a row failing only in the default run
# is the fused kernel's precision, not the rewrite. Logs: <repo>.<kernel>.log.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
REPO=$PWD
SRC=${SRC:-benchmarks/results/issue31/export}
JOBS=${JOBS:-3}
PER_REPO=${PER_REPO:-150}
PY=${PYTHON:-python3}  # PYTHON=.venv/bin/python with no .whl: a dry run where hiera-rewrite is installed
SITE=/tmp/corpus-cuda-site
if [ -z "${PYTHON:-}" ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl \
    || { echo "wheel install failed (is .whl carried?)"; exit 2; }
  # the installed package holds codemods/ as hiera_rewrite.codemods (package-dir in pyproject)
  TREE=/tmp/corpus-cuda-tree
  rm -rf "$TREE" && mkdir -p "$TREE" && cp -r hiera_rewrite "$TREE/" && cp -r codemods "$TREE/hiera_rewrite/codemods"
  export PYTHONPATH="$SITE:$TREE"
fi
export PYTHONUNBUFFERED=1
KERNELS=${KERNELS:-default}
MATH_SITE=/tmp/corpus-cuda-math
mkdir -p "$MATH_SITE"
cat > "$MATH_SITE/sitecustomize.py" <<'PY'
import torch
torch.backends.cuda.enable_flash_sdp(False)
torch.backends.cuda.enable_mem_efficient_sdp(False)
torch.backends.cuda.enable_cudnn_sdp(False)
PY
"$PY" -c 'import torch; print("torch", torch.__version__, "on", torch.cuda.get_device_name() if torch.cuda.is_available() else "NO CUDA")' | tee "$OUT/summary.md"
one() {  # one repo: $1 = <owner>+<name>, $2 = default or math
  local slug=$1 name=${1#*+} log kernel=$2 pp=${PYTHONPATH:-}
  log="$OUT/${1/+/__}.log"  # no "+" in a file name that comes back from the device
  if [ "$KERNELS" != default ]; then log="$OUT/${1/+/__}.$kernel.log"; fi
  if [ "$kernel" = math ]; then pp="$MATH_SITE${pp:+:$pp}"; fi
  local files
  files=$("$PY" -c "import json,sys; print(' '.join(next(e['hiera_files'] for e in json.load(open('$REPO/benchmarks/fork_corpus.json')) if e['repo'].replace('/', '+') == '$slug')))")
  local start=$(date +%s)
  ( cd "$REPO/$SRC/$slug/$name" && PYTHONPATH="$pp" timeout -k 10 "$PER_REPO" "$PY" -P -m hiera_rewrite --verify --check --verify-cuda \
      --verify-dtype bfloat16,float16 --bench-batch 2 $files ) > "$log" 2>&1
  local rc=$? verdict
  verdict=$(grep -oE "^verify: (PASSED|FAILED|NOT PROVEN)[^;]*" "$log" | tail -1 | cut -c9-120)
  echo "| $slug ($kernel) | ${verdict:-exit $rc} | $(( $(date +%s) - start )) s | $(grep -cE '^  (float|bfloat)[0-9]* cuda' "$log") cuda rows |" >> "$OUT/summary.md"
}
echo "| repo | verdict | seconds | rows |" >> "$OUT/summary.md"
echo "| --- | --- | --- | --- |" >> "$OUT/summary.md"
running=0
for kernel in $KERNELS; do
  for dir in "$SRC"/*/; do
    one "$(basename "$dir")" "$kernel" &
    running=$((running + 1))
    if [ "$running" -ge "$JOBS" ]; then wait -n; running=$((running - 1)); fi
  done
done
wait
cat "$OUT/summary.md"
for f in "$OUT"/*.log; do echo "== $(basename "$f")"; grep -E "^(not proven|FAILED|verify: (PASSED|FAILED|NOT PROVEN)|timing|  (float|bfloat)[0-9]* cuda.*(fail|FAIL))" "$f" | cut -c1-300 | head -4; done
exit 0
