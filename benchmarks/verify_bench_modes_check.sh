#!/usr/bin/env bash
# GPU check of `--verify-cuda --bench-modes` (issue 22): verify a copy of the installed
# upstream `hiera` package and time a training step of the original and the rewritten
# model in each mode (eager, torch.compile, torch.compile(mode="reduce-overhead")).
#
# Run from the repo root on a machine with a CUDA GPU and torch + timm installed:
#
#   bash benchmarks/verify_bench_modes_check.sh            # MODES=eager,compile,ro
#   MODES=ro bash benchmarks/verify_bench_modes_check.sh   # fewer modes, less compile time
#
# The wheels under ./.whl (benchmarks/prepare_device.sh: hiera-transformer, libcst, black
# and black's dependencies) are installed with --no-deps into a private target first, as
# benchmarks/device_call.sh does; without .whl they must already be installed.  The output
# is printed (and kept in $OUT/verify_bench_modes.log when OUT is set).  Expect several
# minutes: two models (Hiera-Tiny, MAE-Tiny) x both sides are compiled in each mode.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PY=${PYTHON:-python3}
MODES=${MODES:-eager,compile,ro}
SITE=$(mktemp -d /tmp/hiera-rewrite-site.XXXXXX)
if compgen -G ".whl/*.whl" > /dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl
  export PYTHONPATH="$SITE:$REPO"
else
  echo "no .whl/: using the installed hiera-transformer, libcst and black"
  export PYTHONPATH="$REPO"
fi
export PYTHONUNBUFFERED=1
"$PY" -c 'import torch; print("torch", torch.__version__, "on", torch.cuda.get_device_name() if torch.cuda.is_available() else "NO CUDA")'
HIERA=$("$PY" -c 'import hiera, os; print(os.path.dirname(hiera.__file__))')
WORK=$(mktemp -d /tmp/verify-bench-modes.XXXXXX)
cp -r "$HIERA" "$WORK/hiera"
rm -rf "$WORK/hiera/__pycache__"
LOG=${OUT:-$WORK}/verify_bench_modes.log
mkdir -p "$(dirname "$LOG")"
cd "$WORK"
echo "+ python -m hiera_rewrite --verify --check --verify-cuda --bench-modes $MODES hiera/   (in $WORK)"
set +e
"$PY" -m hiera_rewrite --verify --check --verify-cuda --bench-modes "$MODES" hiera/ 2>&1 | tee "$LOG"
rc=${PIPESTATUS[0]}
set -e
echo "exit code $rc (1: verified, the files would be rewritten; 3: verification failed; 2: usage error)"
echo "timing lines:"
grep -E "^training step of |^  (eager|compile|reduce-overhead): |^    (original|rewritten) |^timing " "$LOG" || echo "(none)"
exit $(( rc == 1 ? 0 : rc ))
