"""Before optimization, a recompute whose every copy of a value is remat-marked counts as many
copies as the forward computes in another frame (`pairing._same_value`). The forward's copies are
found by abstract number, a signature of the inputs rather than their value, which two different
values can share: in a scanned LM block under `save_only_these_names` with gelu (tanh), the forward
loop body squares layer norm's centred input and gelu's input, two [B, T, D] values with one
abstract number. The recompute holds two copies of gelu's `x * x` (the primal's, and jvp's own for
the derivative `3 * x ** 2`), and both counted as recompute: multiply +16,384 on unseen TPU draw 242
(tokens 64), +4,096 at tokens 16 on CPU. The forward's copies under the recompute's own name (one)
decide."""

from __future__ import annotations

import pytest


def test_two_forward_squares_sharing_an_abstract_number_are_not_two_copies_of_gelus_square():
    pytest.importorskip("flax")
    from tests.programs.remat_forms import build
    from tests.remat.generator import Form, Outcome
    from tests.remat.judge import judge

    form = Form(form="linen_scan", arch="lm", policy="save_only_these_names", prevent_cse=True, batch=4,
                width=64, hidden=64, heads=4, tokens=16, layers=1, micro=4, unroll=1, adam=False,
                dtype="float32", act="tanh", head=False, platform="cpu", mesh="single")
    outcome = Outcome(form, (judge(build(form), "before"),))
    assert outcome.all_ok("before"), outcome.describe()
