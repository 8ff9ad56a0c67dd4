"""The narrow of a backward loop copy the program without remat's saving fusion makes too follows
that copy (analysis/hloflops/remat/saving_copy_narrows.py).

TPU draw 69 (a fori_loop of three relu MLP layers, dots_saveable, fsdp): the backward loop body
recomputes relu (`max` with `float_type_correction_info`, computed in f32) and narrows it to bf16
in one fusion; the program without remat computes relu twice in its forward loop, once into its
bf16 residual stack, narrowing both. hloflops.remat.backward_loop_copies settles the recomputed
`max` as that saving copy's, model FLOPs, but its narrow, paired by signature, stayed counted:
convert +6,144 beyond a truth of 0 (range [0, 18,432], reported 12,288 against 6,144). The narrow
now follows its op: the draw is exact.
Skipped without libtpu, as tests/remat/test_remat_tpu_generated.py."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("libtpu", reason="libtpu is not installed: no TPU compiler to build the programs with")

from tests.remat.generator import check, draw  # noqa: E402


def test_narrow_of_a_saving_copy_follows_it(monkeypatch):
    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    outcome = check(draw(69, "tpu"))
    after = next(v for v in outcome.verdicts if v.stage == "after")
    assert outcome.in_bounds("after"), outcome.describe()
    assert after.reported.get("convert", 0) == after.truth.get("convert", 0) == 0, outcome.describe()
    assert outcome.all_ok("after"), outcome.describe()
    assert outcome.all_ok("before"), outcome.describe()
