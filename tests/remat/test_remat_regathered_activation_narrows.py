"""An activation narrowed again for the recompute's gather (hloflops.remat.regathered_narrows): under
tensor parallelism the recompute's gather of a matmul's output reads a narrow of its own of the value
CSE merged with the forward's; the program without remat narrows it once (TPU draw 291)."""

from __future__ import annotations

import pytest


def test_drawn_tpu_activation_narrowed_twice_puts_the_truth_inside_the_range(monkeypatch) -> None:
    # TPU draw 291 (scan_unrolled, tensor-parallel, tanh): convert -768 and out of range before
    pytest.importorskip("libtpu", reason="libtpu is not installed: no TPU compiler to build the programs with")
    from tests.remat.test_remat_tpu_generated import _checked
    outcome = _checked(291, monkeypatch)
    verdict = next(v for v in outcome.verdicts if v.stage == "after")
    assert verdict.in_bounds, verdict.describe()
    assert outcome.matmul_ok("after"), outcome.describe()
