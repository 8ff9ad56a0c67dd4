"""The four seed reports (/work/shared/seeds), on the bundled XLA dumps in examples/.

Every expected number is derived in the comment above it from the model's shapes; a dot
`[m,k] x [k,n]` costs 2*m*k*n flops. The dumps were made by examples/make_examples.py (jax
0.10.2, CPU), so what XLA's optimizer did to each program is fixed and written down here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import hloparse
from hloflops.accounting import RESIDUAL, account, remat_by_loop, remat_by_scope
from hloflops.remat import find_remat, model_path
from hloflops.loops.tripcount import all_trip_counts

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str, stage: str = "after") -> hloparse.Module:
    return hloparse.load(EXAMPLES / f"{name}.{stage}_optimizations.hlo")


def dot_flops(acc, *, remat: bool | None = None) -> int:
    return sum(r.total.flops for r in acc.rows
               if r.opcode in ("dot", "convolution") and (remat is None or r.remat == remat))


def xla_flops(module_text: str) -> float:
    pytest.importorskip("jax")
    from hloflops.xla.compare import xla_cost_of_text

    return xla_cost_of_text(module_text)["flops"]


def check_reconciliation(acc) -> None:
    assert sum(acc.reconciliation.values()) == acc.total.flops - int(acc.xla_estimate["flops"])
    assert sum(r.total.flops for r in acc.rows) == acc.total.flops


# ---- seed 000: 24-layer MLP, B=8, d_model=10, d_ff=40 -------------------------------------------
B, D, F, L = 8, 10, 40, 24
DENSE = 2 * B * D * F  # either Dense of a layer: [8,10]x[10,40] or [8,40]x[40,10] = 6400 flops
PARAMS = L * (D * F + F + F * D + D)  # 20400, the report's parameter count


def test_seed000_remat_scan():
    module = load("seed000_remat_scan")
    acc = account(module)
    assert acc.xla_estimate["flops"] == xla_flops((EXAMPLES / "seed000_remat_scan.after_optimizations.hlo").read_text())
    # XLA counts each of the two 24-step loops (forward scan, backward scan) once: below the
    # report's sanity floor of batch * params. The loop-aware count is above it.
    assert PARAMS == 20400 and acc.xla_estimate["flops"] < B * PARAMS < acc.total.flops
    assert sorted((loop.trip_count, loop.source) for loop in acc.loops) == [(24, "backend_config")] * 2
    # Dots: forward 24 * 2 Dense; backward 24 * (dW + dx for both Dense) - the scan cannot skip
    # the first layer's input gradient; recompute: 24 * Dense_0 only. Dense_1's recomputed
    # output is not needed by the backward (its gradient needs its input and weight), so XLA
    # removed that recompute: what really runs again is Dense_0.
    forward, backward, recompute = L * 2 * DENSE, L * 4 * DENSE, L * DENSE
    assert dot_flops(acc) == forward + backward + recompute == 1_075_200
    assert dot_flops(acc, remat=True) == recompute == 153_600
    # Every remat row has its forward twin in the forward loop, run as often, costing the same:
    # remat_flops is exactly the recomputed forward.
    assert acc.remat_flops == _twin_flops(acc, module) and acc.remat_flops > recompute
    assert acc.model_flops == acc.total.flops - acc.remat_flops
    check_reconciliation(acc)
    assert acc.reconciliation[RESIDUAL] == 0  # no custom-calls, every sum below 2^24
    # The ground truth: the same model compiled without remat (nested nn.scan, what remat_scan
    # builds less its remat; tests/programs/old_jax_remat.py) runs 192,024 flops fewer, 24 of
    # them a loop counter of remat_scan's inner 1-trip loop: 192,000 are recompute.
    assert acc.remat_flops == 192_000
    # Per loop: all recomputation runs in the backward loop. Per scope: under stack/Dense_0 the
    # recomputed dot and its bias add ([8,40] = 320 flops). XLA's fusion copied that add into two
    # backward fusions: the copy in the fusion whose output is recompute is remat; the other sits
    # in a gradient fusion, where the program without remat has it too: 24 * (6400 + 320).
    by_loop = remat_by_loop(acc)
    backward = max(acc.loops, key=lambda loop: loop.total.flops).name
    assert by_loop[backward][1] == acc.remat_flops and sum(f for f, _ in by_loop.values()) == acc.total.flops
    by_scope = remat_by_scope(acc, depth=2)
    assert by_scope["stack/Dense_0"][1] == L * (DENSE + B * F)
    assert sum(r for _, r in by_scope.values()) == acc.remat_flops


def _twin_flops(acc, module) -> int:
    """Sum, over remat rows, of the flops of the forward row with the same model path."""
    forward = {}
    for r in acc.rows:
        if r.phase == "forward" and not r.remat:
            inst = module.computation(r.computation).by_name[r.name]
            forward.setdefault((r.opcode, model_path(inst.op_name)), r.total.flops)
    total = 0
    for r in acc.rows:
        if r.remat:
            inst = module.computation(r.computation).by_name[r.name]
            total += forward[(r.opcode, model_path(inst.op_name))]
    return total


def test_seed000_listed():
    acc = account(load("seed000_listed"))
    # No loops: our total is XLA's (1071201 < 2^24, so no float32 rounding either).
    assert acc.loops == () and acc.total.flops == acc.xla_estimate["flops"] == 1_071_201
    # Forward 24 * 2 Dense, backward 24 * 4 Dense minus the first layer's input gradient (the
    # inputs are data, not parameters).
    assert dot_flops(acc) == L * 2 * DENSE + L * 4 * DENSE - DENSE == 915_200
    assert acc.remat_flops == 0 and acc.reconciliation == {RESIDUAL: 0}


def test_seed000_rolled_and_listed_model_dots_differ_by_one_input_gradient():
    rolled = account(load("seed000_remat_scan"))
    listed = account(load("seed000_listed"))
    assert dot_flops(rolled) - dot_flops(rolled, remat=True) == dot_flops(listed) + DENSE


def test_seed000_before_optimization_recomputes_both_dense():
    # Before XLA's optimizer, jax's recompute holds the whole layer forward (both Dense, 24
    # layers); the ops of the inner jitted functions are named relative to their `call`, whose
    # op_name carries `checkpoint/rematted_computation`.
    acc = account(load("seed000_remat_scan", "before"), xla={"flops": 0.0})
    assert dot_flops(acc, remat=True) == L * 2 * DENSE == 307_200
    assert dot_flops(acc) == L * 2 * DENSE + L * 4 * DENSE + L * 2 * DENSE


def test_seed000_before_and_after_optimization_trip_counts():
    before = sorted(tc.value for tc in all_trip_counts(load("seed000_remat_scan", "before")).values())
    after = sorted(tc.value for tc in all_trip_counts(load("seed000_remat_scan", "after")).values())
    # remat_scan(lengths=(24, 1)) nests a length-1 scan in each layer; XLA's optimizer
    # inlines loops that run once, leaving the two 24-step loops.
    assert after == [24, 24] and [n for n in before if n != 1] == after and before.count(1) == 3


# ---- seed 001: Net2 of 4 remat'd Dense(16) layers built in setup, x: [8,16], grad -------------

def test_seed001_remat_net2():
    acc = account(load("seed001_remat_net2"))
    dense = 2 * 8 * 16 * 16  # 4096
    # Forward 4 Dense, dW for 4, dx for layers 1-3 (layer 0's input is data).
    assert dot_flops(acc) == 4 * dense + 4 * dense + 3 * dense == 45_056
    # nn.remat wraps only the Dense; its output is not needed by its own gradient and tanh sits
    # outside the remat, so nothing is recomputed: XLA removed the recompute entirely.
    assert acc.remat_flops == 0
    assert acc.loops == () and acc.total.flops == acc.xla_estimate["flops"] == 48_192


# ---- seed 002: nn.scan over 10 steps of Dense(10) - BatchNorm - Dense(1), x: [10,4,2] ----------

def test_seed002_scan_batchnorm():
    module = load("seed002_scan_batchnorm")
    acc = account(module)
    assert sorted(loop.trip_count for loop in acc.loops) == [10, 10]  # forward scan, backward scan
    # Per step: Dense_0 forward [4,2]x[2,10] = 160, Dense_1 forward [4,10]x[10,1] = 80,
    # Dense_1 dW [10,4]x[4,1] = 80, Dense_0 dW [2,4]x[4,10] = 160. Dense_1's input gradient
    # [4,1]x[1,10] is an outer product XLA rewrites into a multiply; Dense_0's is not needed.
    assert dot_flops(acc) == 10 * (160 + 80 + 80 + 160) == 4_800
    assert acc.remat_flops == 0
    check_reconciliation(acc)
    assert acc.reconciliation[RESIDUAL] == 0
    before = sorted(tc.value for tc in all_trip_counts(load("seed002_scan_batchnorm", "before")).values())
    assert before == [10, 10]


# ---- seed 004: one Dense(32) tied across four remat'd blocks, x: [8,32], grad -----------------

def test_seed004_tied_remat():
    module = load("seed004_tied_remat")
    acc = account(module)
    dense = 2 * 8 * 32 * 32  # 16384: the forward dot, the input gradient and the weight gradient alike
    # Forward 4, input gradients for blocks 1-3, weight gradients 4: 11 dots.
    assert dot_flops(acc) == 11 * dense == 180_224
    # XLA's CSE merged each recomputed dot with its forward dot (same operands: tied weights and
    # the saved block input). Blocks 0 and 3 kept the remat-named copy, blocks 1 and 2 the
    # forward one; either way each forward dot runs once, so no dot FLOPs are remat.
    assert dot_flops(acc, remat=True) == 0
    index = find_remat(module)
    merged_dots = [n for c, n in index.merged if module.computation(c).by_name[n].opcode == "dot"]
    assert len(merged_dots) == 2
    # What is recomputed: XLA's fusion duplicated each block's bias add ([8,32] = 256 flops)
    # into a backward fusion under the remat name while the forward add also stays: 4 * 256.
    assert acc.remat_flops == 4 * 8 * 32 == 1024
    assert acc.loops == () and acc.total.flops == acc.xla_estimate["flops"] == 192_992


def test_seed004_before_optimization_still_recomputes_the_dots():
    # Before optimization each of the four blocks' dots is recomputed (4 * 16384); it is XLA's
    # CSE that later merges each recompute with its forward dot.
    acc = account(load("seed004_tied_remat", "before"), xla={"flops": 0.0})
    assert dot_flops(acc, remat=True) == 4 * 2 * 8 * 32 * 32 == 65_536
