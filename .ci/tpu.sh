#!/usr/bin/env bash
# CI's TPU job: a fresh venv with jax[tpu] at the jax the main suite runs (libtpu compiles TPU
# programs ahead of time on this CPU host: no TPU needed), hloflops installed into it from a copy of
# this checkout, then the TPU catalogue (tests/tpu/catalogue.py) compiled again for v4, v5e, v5p
# and v6e into a temporary folder and the TPU tests run on those modules and on the stored ones
# (tests/data/tpu), whose numbers must be the fresh ones'. A few minutes, most of it pip.
# Where libtpu cannot be installed (no wheel for this platform) the job says so and skips, except
# under CI=true, where that is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
JAX="${HLOFLOPS_TPU_JAX:-$(python3 -c 'import jax; print(jax.__version__)' 2>/dev/null || true)}"
[ -n "$JAX" ] || { echo "tpu.sh: no jax in python3 (run the main suite's install first) and HLOFLOPS_TPU_JAX unset" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
py="$work/venv/bin/python"
if ! "$py" -m pip install -q "jax[tpu]==$JAX" pytest >"$work/pip.log" 2>&1; then
    tail -5 "$work/pip.log" >&2
    if [ "${CI:-}" = "true" ]; then
        echo "tpu.sh: FAILED: jax[tpu]==$JAX (libtpu) cannot be installed here, and CI requires the TPU job" >&2
        exit 1
    fi
    echo "tpu.sh: SKIPPED: jax[tpu]==$JAX (libtpu) cannot be installed on this machine; CI runs this job" >&2
    exit 0
fi
# hloflops itself as a user installs it, built from a copy (a build leaves build/ beside its sources)
mkdir "$work/src" && cp -r pyproject.toml README.md analysis hloparse "$work/src/"
"$py" -m pip install -q "$work/src"
# flax, optax, equinox and dm-haiku for the remat twins compiled for TPU (tests/remat/test_remat_tpu*.py:
# the generator's TPU draws use every form), which the main suite skips where libtpu is not installed
"$py" -m pip install -q flax optax equinox dm-haiku
"$py" -c "import jax, sys; from importlib.metadata import version; print('tpu job: jax', jax.__version__, 'libtpu', version('libtpu'))"
# libtpu's lockfile would stop a second process on the same host; these compile only, no device.
export ALLOW_MULTIPLE_LIBTPU_LOAD=1
PYTHONPATH="$PWD" "$py" -m tests.tpu.generate "$work/tpu"
HLOFLOPS_TPU_DATA="$work/tpu" "$py" -m pytest -q -p no:cacheprovider tests/tpu \
    tests/remat/test_remat_tpu.py tests/remat/test_remat_tpu_sharded.py tests/remat/test_remat_tpu_generated.py
