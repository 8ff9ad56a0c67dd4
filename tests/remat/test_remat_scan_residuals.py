"""Scan forms after optimization: a residual's cheap chain is computed in different places with
remat and without, so the split of its copies rests on fusion, and the range must say so.

Without remat a scan's forward loop stores each residual the backward reads into a stack, XLA
copying the residual's cheap producers into the saving fusion; its backward loop reads the stored
value. With remat there is no such store: the backward loop recomputes the residual and XLA copies
its cheap chain into each gradient fusion that reads it. So a recompute copied into gradient
fusions may stand for a saving copy of the program without remat where the value is in more
residuals' chains than gradient fusions (counted, a hinge: hloflops.remat.across_loops,
`_saved_more_often`), and its copies in the gradient fusions beyond one may run only because of
remat (not counted, a hinge: hloflops.remat.fusion_copies, `_ReadStored`).
Under `save_only_these_names` the program with remat's own saving fusion copies the saved value's
cheap producers, which the program without remat saves only where its backward reads that value
(not counted, a hinge: hloflops.remat.rounding, `copied_into_saves`).

Drawn programs whose truth lay outside the reported range before these rules (reported - truth,
and the bound it missed)."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")

from tests.programs.remat_forms import build  # noqa: E402
from tests.remat.generator import draw  # noqa: E402
from tests.remat.judge import judge  # noqa: E402

OUT_OF_RANGE = {
    # the gradient fusions' copies of the recompute: the truth above the high bound
    131: "linen_remat_scan LM: multiply -19,328, subtract -8,192; high 202,624 < truth 237,024",
    135: "scan of attention blocks: multiply -7,872, subtract -20,458; high 3,372,288 < truth 3,400,362",
    # the policy's saving fusion copies the bias add
    110: "linen_scan MLP (tanh), save_only_these_names: add -40,960; high 81,920 < truth 122,875",
}


@pytest.mark.parametrize("seed", sorted(OUT_OF_RANGE))
def test_scan_residual_copies_keep_the_truth_inside_the_remat_bounds(seed):
    verdict = judge(build(draw(seed, "base")), "after")
    assert verdict.in_bounds, f"{OUT_OF_RANGE[seed]}\n{verdict.describe()}"
    # the matmuls' split is established: the range spans the cheap ops only
    matmuls = sum(verdict.reported.get(op, 0) for op in ("dot", "convolution"))
    assert verdict.bounds[0] >= matmuls, verdict.describe()
