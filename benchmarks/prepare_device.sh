#!/usr/bin/env bash
# Download the wheels the GPU machine lacks into .whl/ (git-ignored), for python 3.12
# x86_64.  The device image has torch, triton, timm, numpy, matplotlib, pyyaml, tqdm,
# packaging, click, mypy-extensions (KINDS.md); it has no hiera-transformer, hiera-optim,
# libcst, black, pathspec>=1, platformdirs or pytokens.  Run from anywhere; the wheels
# land in <repo>/.whl.  See benchmarks/NOTES.md for the device command.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
mkdir -p .whl
WHEELS=(
  hiera-transformer==0.1.4   # FAIR Hiera (pure python)
  hiera-optim==0.2.1         # contender (pure python; needs torch+triton, both on the device)
  libcst==1.9.0              # the tool (native extension: cp312 manylinux wheel)
  black==26.10.1             # the tool formats inserted code (mypyc wheel, cp312)
  pathspec==1.1.1            # black: pathspec>=1.0.0 (the device's may be older)
  platformdirs==4.14.8       # black
  pytokens==0.4.1            # black: pytokens~=0.4.0
  click==8.5.1               # black (the device has one; carried to pin >=8)
  mypy_extensions==1.2.0     # black
)
# libcst needs pyyaml>=5.2 on python 3.12: the device has pyyaml.
for w in "${WHEELS[@]}"; do
  w=${w%%#*}; w=${w// /}
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "$w"
done
# keep one version of each distribution (two stop the whole install on the device)
dups=$(ls .whl/*.whl | xargs -n1 basename | cut -d- -f1 | tr 'A-Z-' 'a-z_' | sort | uniq -d)
if [ -n "$dups" ]; then echo "duplicate wheels in .whl: $dups (remove the old ones)" >&2; exit 1; fi
ls -la .whl
du -sh .whl
