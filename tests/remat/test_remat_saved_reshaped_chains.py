"""A cheap recompute that a scan's backward loop hands out reshaped to weight gradients alone
stands in for the copy the program without remat makes when it saves that value, whatever the
chain reads (hloflops.remat.saved_copies, `_copied_for_weight_gradients`).

The forward's matmul reads a `[batch, tokens, hidden]` activation reshaped to
`[batch * tokens, hidden]`, so in the program without remat every reader of the activation is a
fusion (the reshape's and the one saving it into the residual stack) and XLA copies its cheap
chain into both. Gelu's product `(h + b) * 0.5 * (1 + t)` reads the fusion of its tanh `t`; with
remat the backward loop recomputes the product in a fusion of its own for the next layer's
weight gradient: the same copy, model FLOPs. Drawn programs whose product was counted as
recompute (after optimization, reported - truth on the rule before)."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")
pytest.importorskip("haiku")

import hloparse  # noqa: E402
from hloparse.ir import CallRole  # noqa: E402
from hloflops.remat import REMAT_SCOPE, find_remat  # noqa: E402
from tests.programs.remat_forms import build  # noqa: E402
from tests.remat.generator import draw  # noqa: E402
from tests.remat.judge import module_text  # noqa: E402

DRAWN = {
    98: "hk_layer_stack attention, gelu, dots_with_no_batch_dims_saveable: add +57,344, multiply +56,704",
    122: "linen_scan LM, nothing_saveable: add +425,984, multiply +377,856",
}


def _root(module, fusion):
    comp = module.by_name[fusion.called(CallRole.FUSION)[0]]
    root = comp.root
    while root.opcode == "bitcast" and root.operands[0] in comp.by_name:
        root = comp.by_name[root.operands[0]]
    return comp, root


def _products_over_a_tanh_fusion(module):
    """The loop-body fusions whose root is a reshape (bitcast) of a recomputed multiply and that
    read a fusion whose root is a tanh."""
    found = []
    for comp, inst in module.instructions():
        if comp.name == module.entry.name or inst.opcode != "fusion":
            continue
        callee, root = _root(module, inst)
        if callee.root.opcode != "bitcast" or root.opcode != "multiply" or REMAT_SCOPE not in root.op_name:
            continue
        operands = [comp.by_name[o] for o in inst.operands if o in comp.by_name]
        if any(o.opcode == "fusion" and _root(module, o)[1].opcode == "tanh" for o in operands):
            found.append(callee)
    return found


@pytest.mark.parametrize("seed", sorted(DRAWN))
def test_recomputed_product_handed_to_weight_gradients_reshaped_is_the_twins_saving_copy(seed):
    module = hloparse.parse(module_text(build(draw(seed, "more")).remat, "after"))
    products = _products_over_a_tanh_fusion(module)
    assert products, DRAWN[seed]
    remat = find_remat(module).remat
    counted = [(c.name, i.name) for c in products for i in c.instructions if (c.name, i.name) in remat]
    assert not counted, f"{DRAWN[seed]}: {counted}"
