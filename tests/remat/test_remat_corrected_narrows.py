"""The unnamed narrow of a type-corrected cheap op takes the op's answer
(analysis/hloflops/remat/corrected_narrows.py).

Held-out TPU draw 88 (a scan of one relu MLP layer, save_and_offload_only_these_names, fsdp): TPU
computes the recompute's relu in f32 and narrows it (`max` with `float_type_correction_info`, an
unnamed `convert` to bf16), nested in the fusion of the last weight's gradient matmul, as the
program without remat nests its own relu there. The offload rule took the `max` out of remat
(hloflops.remat.offloaded_residuals), but the narrow, named after the max and paired by signature,
stayed: convert +64 beyond the truth, range [128, 128] against a truth of 0. The narrow now follows
its op: reported 0, in range.
Skipped without libtpu, as tests/remat/test_remat_tpu_generated.py."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("libtpu", reason="libtpu is not installed: no TPU compiler to build the programs with")

from tests.remat.generator import check, draw  # noqa: E402


def test_narrow_of_a_relu_taken_out_of_remat_follows_it(monkeypatch):
    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    outcome = check(draw(88, "tpu"))
    after = next(v for v in outcome.verdicts if v.stage == "after")
    assert outcome.in_bounds("after"), outcome.describe()
    assert sum(after.reported.values()) == sum(after.truth.values()) == 0, outcome.describe()
    assert outcome.all_ok("before"), outcome.describe()
