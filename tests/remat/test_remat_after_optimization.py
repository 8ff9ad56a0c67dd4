"""Drawn programs (tests/remat/generator.py) whose remat split after optimization was wrong on
some opcode, each replayed at the size where it failed and judged on every opcode against its
twin without the remat wrapper (tests/remat/judge.py). What each draw missed is written by it
(reported - truth, jax 0.10.2, CPU); the rule that fixed it is in docs/remat.md.
"""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")
pytest.importorskip("equinox")

from tests.programs.remat_forms import Form  # noqa: E402
from tests.remat.generator import check  # noqa: E402

# relu's mask in the backward: XLA copies the forward's bias add into the mask's gradient fusion
# in both programs; in the program with remat the copy carries the recompute's name (and was
# counted as recompute where the forward's own copy was in sight).
GRADIENT_FUSION_COPIES = {
    "eqx seed 31, add +3,072": Form(
        form='eqx_list', arch='mlp', policy='none', prevent_cse=True, batch=2, width=16, hidden=512, heads=2,
        tokens=8, layers=3, micro=2, unroll=1, adam=True, dtype='float32', act='relu', head=False),
    "nnx seed 35, add +24,576": Form(
        form='nnx_loop', arch='mlp', policy='nothing_saveable', prevent_cse=True, batch=8, width=32, hidden=512,
        heads=4, tokens=4, layers=6, micro=4, unroll=1, adam=False, dtype='float32', act='relu', head=False),
    "nnx seed 48, add +5,120": Form(
        form='nnx_loop', arch='mlp', policy='save_only_these_names', prevent_cse=True, batch=16, width=32,
        hidden=64, heads=4, tokens=8, layers=5, micro=2, unroll=1, adam=True, dtype='float32', act='relu',
        head=False),
}


@pytest.mark.parametrize("form", list(GRADIENT_FUSION_COPIES.values()), ids=list(GRADIENT_FUSION_COPIES))
def test_copies_in_a_gradient_fusion_are_model_work(form):
    outcome = check(form)
    assert outcome.all_ok("after"), outcome.describe()
    assert outcome.all_ok("before"), outcome.describe()
