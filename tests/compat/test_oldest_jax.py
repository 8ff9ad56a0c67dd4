"""The jax-facing API on whatever jax is installed, down to the oldest release hloflops supports
(pyproject's `jax>=` bound, 0.4.13: the oldest jaxlib wheel for Python 3.11).

The main suite runs this file on the newest jax; CI's short job (.ci/oldest_jax.sh) runs it, with
`-m jax_oldest`, in a venv holding the oldest jax. Nothing here compares with numbers printed by
another jax: each check asks the installed XLA (`compiled.cost_analysis()` of the loop-free twin)
or counts the matmuls from the layer sizes, so it holds on every version.

Programs: seed 000's model (examples/make_examples.py: 24 nn.remat_scan layers of a Dense-silu-
Dense MLP with a residual, batch 8, d_model 10, d_ff 40, value_and_grad, optax sgd), and the same
MLP stack written in plain jax as a lax.scan, rolled and unrolled.
"""

from __future__ import annotations

import functools
import importlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

# CI's oldest-jax job sets HLOFLOPS_REQUIRE_JAX=1: there a missing jax or flax is a failure, not a
# skip (a job of skips would pass while checking nothing).
REQUIRED = os.environ.get("HLOFLOPS_REQUIRE_JAX") == "1"


def need(module: str):
    if REQUIRED:
        return importlib.import_module(module)
    return pytest.importorskip(module)


jax = need("jax")
jnp = need("jax.numpy")

import hloflops  # noqa: E402
import hloparse  # noqa: E402

pytestmark = pytest.mark.jax_oldest

BATCH, D_MODEL, D_FF, LAYERS = 8, 10, 40, 24
DENSE = 2 * BATCH * D_MODEL * D_FF  # one Dense of the MLP (either one: 10 -> 40 or 40 -> 10)


def dot_flops(report: hloflops.Report) -> int:
    return sum(row.total.flops for row in report.accounting.rows if row.opcode == "dot")


def cost_dict(compiled) -> dict[str, float]:
    cost = compiled.cost_analysis()  # a list of one dict before jax 0.4.30-ish, a dict since
    return dict(cost[0] if isinstance(cost, (list, tuple)) else cost)


def check_trip_counts(report: hloflops.Report, text: str, expected: int) -> None:
    """Every loop's trip count is known and right. Older XLA prints no known_trip_count in the
    while's backend_config: there the count is inferred from the condition ("pattern" or
    "evaluation"), never taken as 1 or left unknown."""
    assert report.loops, "the program has a while loop"
    printed = "known_trip_count" in text
    for loop in report.loops:
        assert loop.trip_count == expected, (loop.name, loop.trip_count, loop.source, loop.note)
        if printed:
            assert loop.source == "backend_config", (loop.name, loop.source)
        else:
            assert loop.source in ("pattern", "evaluation"), (loop.name, loop.source)
    assert report.is_exact


# ---- the plain-jax MLP stack -------------------------------------------------------------------

def _layer(x, p):
    h = jax.nn.silu(x @ p["w1"] + p["b1"])
    return x + (h @ p["w2"] + p["b2"])


def _stack(unroll: int):
    def forward(params, x):
        x, _ = jax.lax.scan(lambda x, p: (_layer(x, p), None), x, params, unroll=unroll)
        return x
    return forward


def _params():
    return {"w1": jnp.zeros((LAYERS, D_MODEL, D_FF)), "b1": jnp.zeros((LAYERS, D_FF)),
            "w2": jnp.zeros((LAYERS, D_FF, D_MODEL)), "b2": jnp.zeros((LAYERS, D_MODEL))}


@functools.lru_cache(maxsize=None)
def compiled_stack(kind: str, unroll: int):
    forward = _stack(unroll)
    if kind == "grad":
        fn = jax.grad(lambda params, x: jnp.mean(forward(params, x) ** 2))
    else:
        fn = forward
    return jax.jit(fn).lower(_params(), jnp.zeros((BATCH, D_MODEL))).compile()


def test_forward_scan_equals_its_unrolled_twin() -> None:
    """Rolled (a while of 24 trips) against unrolled (no loop): ours on the twin equals XLA's own
    count of it exactly, and ours on the rolled program has the twin's matmuls and transcendentals."""
    rolled, unrolled = compiled_stack("forward", 1), compiled_stack("forward", LAYERS)
    twin = hloflops.analyze(unrolled)
    assert not twin.loops
    xla = cost_dict(unrolled)
    assert (twin.flops, twin.total.transcendentals, twin.total.bytes_accessed) == (
        xla["flops"], xla["transcendentals"], xla["bytes accessed"])
    report = hloflops.analyze(rolled)
    check_trip_counts(report, rolled.as_text(), LAYERS)
    assert dot_flops(report) == dot_flops(twin) == LAYERS * 2 * DENSE
    assert report.total.transcendentals == xla["transcendentals"] == LAYERS * BATCH * D_FF  # silu's logistic
    # What the rolled program does beyond the twin is its loop control (the counter and its
    # compare, 24 times): positive and small, never a missing layer.
    assert 0 < report.flops - twin.flops < LAYERS * 20


def test_grad_scan_matmuls_against_the_twin() -> None:
    """The gradient: forward 2 matmuls a layer, backward 4 (dW and dx of each Dense). The unrolled
    twin drops one of them, layer 0's dx (the input is not differentiated, so XLA removes it as
    dead code); the rolled body cannot, since it is one body for all 24 layers."""
    rolled, unrolled = compiled_stack("grad", 1), compiled_stack("grad", LAYERS)
    twin = hloflops.analyze(unrolled)
    xla = cost_dict(unrolled)
    assert (twin.flops, twin.total.transcendentals) == (xla["flops"], xla["transcendentals"])
    report = hloflops.analyze(rolled)
    check_trip_counts(report, rolled.as_text(), LAYERS)
    assert dot_flops(report) == LAYERS * 6 * DENSE
    assert dot_flops(twin) == LAYERS * 6 * DENSE - DENSE
    assert report.total.transcendentals == xla["transcendentals"]


def test_compare_reproduces_this_xla() -> None:
    """compare() on a Compiled and on the text it prints: XLA's numbers, and our reproduction of
    them (the loop body once, as XLA counts) equal to the float."""
    rolled = compiled_stack("grad", 1)
    for source in (rolled, rolled.as_text()):
        comparison = hloflops.compare(source)
        assert comparison.estimate_matches == {"flops": True, "transcendentals": True, "bytes_accessed": True}, (
            comparison.estimate, comparison.xla)
        assert comparison.report.flops == hloflops.analyze(rolled).flops
        assert comparison.ratio > 10  # the story of seed 000: XLA counts the 24-trip loops once


def test_lowered_and_count() -> None:
    """analyze(Lowered) reads the module before optimizations; count(fn)(*args) jits and compiles."""
    forward = _stack(1)
    lowered = jax.jit(forward).lower(_params(), jnp.zeros((BATCH, D_MODEL)))
    before = hloflops.analyze(lowered)
    check_trip_counts(before, lowered.as_text(dialect="hlo"), LAYERS)
    assert dot_flops(before) == LAYERS * 2 * DENSE
    counted = hloflops.count(forward)(_params(), jnp.zeros((BATCH, D_MODEL)))
    assert counted.flops == hloflops.analyze(compiled_stack("forward", 1)).flops


# ---- seed 000 itself (flax nn.remat_scan) --------------------------------------------------------

@functools.lru_cache(maxsize=None)
def seed000(use_remat_scan: bool):
    need("flax")
    need("optax")
    from examples.make_examples import seed000_listed, seed000_remat_scan

    fn, args, options = (seed000_remat_scan if use_remat_scan else seed000_listed)()
    return jax.jit(fn, **options["jit"]).lower(*args).compile()


def test_seed000_remat_scan() -> None:
    """Seed 000's train step as this jax compiles it: two loops of 24 trips (forward, backward),
    exact; the matmuls are the listed twin's (24 layers, forward 2 and backward 4 each) plus the
    remat's recompute of each layer's Dense_0 (silu's gradient needs its output; Dense_1's is
    not needed, so XLA drops its recompute); XLA's own number is reproduced to the float."""
    compiled = seed000(True)
    text = compiled.as_text()
    report = hloflops.analyze(hloparse.parse(text))  # the text this XLA prints, through our parser
    check_trip_counts(report, text, LAYERS)
    assert len(report.loops) == 2
    listed = hloflops.analyze(seed000(False))
    assert not listed.loops
    assert dot_flops(listed) == LAYERS * 6 * DENSE - DENSE  # layer 0's dx is dead code there
    assert dot_flops(report) == LAYERS * 6 * DENSE + LAYERS * DENSE
    assert report.total.transcendentals == 2 * listed.total.transcendentals  # silu forward + its recompute
    comparison = hloflops.compare(compiled)
    assert all(comparison.estimate_matches.values()), (comparison.estimate, comparison.xla)
    assert comparison.report.flops == report.flops


# ---- hloflops run: XLA's dump files of this jax ----------------------------------------------------

def _tanh_scan(w, x):
    c, _ = jax.lax.scan(lambda c, _: (jnp.tanh(c @ w), None), x, None, length=7)
    return c.sum()


RUN_SCRIPT = """
import jax, jax.numpy as jnp
def f(w, x):
    c, _ = jax.lax.scan(lambda c, _: (jnp.tanh(c @ w), None), x, None, length=7)
    return c.sum()
print(jax.jit(f)(jnp.ones((16, 16)), jnp.ones((4, 16))))
"""


def test_run_reads_this_jax_dump(tmp_path: Path) -> None:
    """`hloflops run -- python train.py`: XLA dumps with this jax's file names; the batch finds the
    optimized module and counts it as analyze() counts the same function compiled here."""
    script = tmp_path / "train.py"
    script.write_text(RUN_SCRIPT)
    db = tmp_path / "runs.sqlite"
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, "-m", "hloflops", "run", "--db", str(db), "--", sys.executable, str(script)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    with sqlite3.connect(db) as connection:
        rows = connection.execute("SELECT status, flops, n_loops, n_unknown_trip_counts FROM modules "
                                  "WHERE module_name = 'jit_f'").fetchall()
    here = hloflops.analyze(jax.jit(_tanh_scan).lower(jnp.ones((16, 16)), jnp.ones((4, 16))).compile())
    assert here.loops and here.loops[0].trip_count == 7
    assert rows == [("ok", here.flops, len(here.loops), 0)], (rows, done.stdout)


# ---- the remat split on this jax (tests/programs/old_jax_remat.py) ---------------------------------

@functools.lru_cache(maxsize=None)
def remat_program(name: str) -> str:
    from tests.programs import old_jax_remat

    if name.startswith("seed000"):
        need("flax")
        need("optax")
    fn, args, options = old_jax_remat.build(name)
    return jax.jit(fn, **options).lower(*args).compile().as_text()


@pytest.mark.parametrize("pair", ["seed000", "checkpoint_scan"])
def test_remat_split_is_the_difference(pair: str) -> None:
    """Seed 000's nn.remat_scan model (and a lax.scan of a jax.checkpoint'd layer) as this jax
    names its recompute (0.4.13: `.../remat/...`, later `.../rematted_computation/...`): the remat
    dot FLOPs are what the program runs beyond its twin without remat, the model dot FLOPs are the
    twin's."""
    def dots(text: str) -> tuple[int, int]:
        rows = hloflops.analyze(hloparse.parse(text)).accounting.rows
        return (sum(r.total.flops for r in rows if r.opcode == "dot" and r.remat),
                sum(r.total.flops for r in rows if r.opcode == "dot" and not r.remat))

    remat, plain = dots(remat_program(f"{pair}_remat")), dots(remat_program(f"{pair}_plain"))
    assert plain == (0, LAYERS * 6 * DENSE)
    assert remat[0] == sum(remat) - sum(plain) == LAYERS * DENSE  # each layer's Dense_0 (silu's gradient needs it)
    assert remat[1] == plain[1]
