"""Recomputes that stand in for the copy the program without remat makes saving a residual
(hloflops.remat.saved_copies), after optimization, in Haiku `hk.layer_stack` attention LMs.

Softmax's `p = e * (1 / s)` reads the exponential's fusion, so by `_reads_elementwise_fusion` the
program without remat would store it once for its forward's `p @ v` and its saving fusion. But
`p` reads one full-size value (the row sum comes broadcast): XLA duplicates such a producer into
every consumer that can fuse it whatever the others do, so that program computes `p` in its
forward and again in the fusion saving it, and the recompute's `p` in the backward loop stands
for that copy (held-out more 218, multiply +1,048,576 under `multi_head_attention` before; more
94 and 221 +4,194,304).

The recomputed value `v + b`, handed heads-major to CPU library fusions that carry no op_name (the
backward's `dO @ v.T` and the recompute's `p @ v`): the backward's matmul is the one the pairing
did not count as a recompute, so the program without remat saves `v + b` for it, copying the add
(more 98: add +8,192 before). The key recomputed in two layouts (transposed for the recomputed
scores, as it is for the query's gradient), one copy counted against its forward: the other stands
for the twin's one saving copy, whichever fusion hands it out (linen LMs, more 129: value +4,096 and
key -4,096 before, which cancelled in the add sum)."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("haiku")

import hloparse  # noqa: E402
from hloflops.accounting import account  # noqa: E402
from tests.remat.generator import build, check, draw  # noqa: E402
from tests.remat.judge import module_text  # noqa: E402


def _split_under(form, scope: str, opcode: str) -> tuple[int, int]:
    """(remat FLOPs reported, program - twin) of `opcode` under name scope `scope`, after optimization."""
    pair = build(form)
    sums = {}
    for which, program in (("remat", pair.remat), ("plain", pair.plain)):
        acc = account(hloparse.parse(module_text(program, "after")), xla={"flops": 0.0})
        rows = [r for r in acc.rows if r.opcode == opcode and scope in r.scope]
        sums[which] = (sum(r.total.flops for r in rows), sum(r.remat_flops for r in rows if r.remat))
    return sums["remat"][1], sums["remat"][0] - sums["plain"][0]


def test_softmax_probabilities_duplicated_into_the_twins_saving_fusion():
    reported, truth = _split_under(draw(218, "more"), "multi_head_attention", "multiply")
    assert reported == truth


def test_value_handed_to_an_unnamed_backward_matmul_is_saved_by_the_twin():
    outcome = check(draw(98, "more"))
    verdict = next(v for v in outcome.verdicts if v.stage == "after")
    assert "add" not in verdict.misses and outcome.in_bounds("after"), verdict.describe()


@pytest.mark.parametrize("scope", ["self_attn/value", "self_attn/key"])
def test_projection_recomputed_in_two_layouts_is_saved_once_by_the_twin(scope):
    reported, truth = _split_under(draw(129, "more"), scope, "add")
    assert reported == truth
