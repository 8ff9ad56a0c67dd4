#!/usr/bin/env bash
# CI's short job on the oldest jax hloflops supports (pyproject's `jax>=` bound): a fresh venv with
# that jax and the core dependencies, hloflops installed into it from this checkout (a wheel, not
# editable), then the jax-facing tests (`-m jax_oldest`, tests/compat/): compare, count,
# analyze(Compiled|Lowered), `hloflops run`, and seed 000's model as that XLA compiles and prints
# it. About 2 minutes, most of it pip. Exits non-zero if any step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
OLDEST=0.4.13  # the oldest jaxlib wheel for Python 3.11
grep -q "\"jax>=$OLDEST\"" pyproject.toml || { echo "oldest_jax.sh: pyproject's jax bound is not >=$OLDEST" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
py="$work/venv/bin/python"
# The releases of jax 0.4.13's time: numpy 2, scipy 1.13 (no scipy.linalg.tril) and ml_dtypes 0.3
# came later and break it; flax 0.7.2 / optax 0.1.7 / chex 0.1.82 accept it. flax goes in without
# its checkpointing dependencies (orbax, tensorstore: a third of the download, never imported here).
"$py" -m pip install -q "jax==$OLDEST" "jaxlib==$OLDEST" 'numpy<2' 'scipy<1.13' 'ml_dtypes<0.3' \
    'optax==0.1.7' 'chex==0.1.82' msgpack rich PyYAML typing_extensions pytest
"$py" -m pip install -q --no-deps 'flax==0.7.2'
# hloflops itself as a user installs it, built from a copy (a build leaves build/ beside its sources)
mkdir "$work/src" && cp -r pyproject.toml README.md analysis hloparse "$work/src/"
"$py" -m pip install -q "$work/src"
"$py" -c "import jax, sys; v = jax.__version__; print('oldest job: jax', v); sys.exit(v != '$OLDEST')"
JAX_PLATFORMS=cpu HLOFLOPS_REQUIRE_JAX=1 "$py" -m pytest -q -p no:cacheprovider -m jax_oldest tests/compat
