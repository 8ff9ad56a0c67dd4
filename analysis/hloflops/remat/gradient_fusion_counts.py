"""A recompute's copy of a cheap value in a gradient fusion, counted by value against forward copies
found by name (hloflops.remat.forward_twins' `ForwardTwins`): not sure, in the range.

Where every copy of a value is remat-marked (the recompute reads other inputs than the forward),
`_same_value` counts as many of its copies as `ForwardTwins` finds forward copies of the same
signature whose names end with the recompute's inner name. That name can be shared by two values:
a layer norm's mean `sum(x) * (1 / n)` (`layer_norm_1/div`) and its variance `sum(x * x) * (1 / n)`
(`layer_norm_1/jit(_var)/div`) are multiplies of one signature whose inner names agree once the
`jit(_var)` wrapper is dropped, so the variance's class counts the mean's forward copy as its own
(TPU draw 279, an hk.layer_stack of one layer: the forward copies the variance into two fusions
and the mean into one, the recompute the variance into three, and all three counted).

XLA copies a cheap value into every fusion that reads it, with remat as without. One of the
recompute's copies sits in a gradient fusion: a fusion whose outputs are all the backward's own
ops (the layer norm's `-0.5 * rsqrt(var) / var * g / n`, none in the checkpoint's recompute scope).
The program without remat has that fusion too, and reads there what its forward stored (the sum of
squares), copying the cheap chain down to it into the fusion just as this program copies the
recompute's (draw 279's twin: the variance copied into two forward fusions and into that gradient
fusion, three in all). Whether such a copy runs because of remat rests on the forward's count being
the value's own, which the names cannot settle: it stays counted, but as a hinge (`RematIndex.weak`),
not a sure share. Copies in fusions computing a recompute keep their count; so do classes counted
against forward copies in another loop body, which already rest on fusion
(hloflops.remat.across_loops).
"""

from __future__ import annotations

from typing import Mapping

from hloflops.remat.names import REMAT_SCOPE
from hloflops.remat.sites import SiteKey, SiteOp
from hloflops.scopes import phase


def counted_in_gradient_fusions(ops: list[SiteOp], counted: set[SiteKey],
                                fused: Mapping[str, frozenset[str]]) -> set[SiteKey]:
    """The copies of `counted` (a class's copies `_same_value` counted against the forward copies
    `ForwardTwins` found in the class's own frame) that sit in a gradient fusion: one whose outputs
    are all unmarked ops the backward names outside the checkpoint's recompute scope."""
    if not counted:
        return set()
    by_name = {op.key[:2]: op for op in ops}
    out: set[SiteKey] = set()
    for key in counted:
        outputs = fused.get(key[0])
        if not outputs or key[1] in outputs:
            continue
        # (a view among the outputs hands on another's value: no op of its own)
        values = [op for name in outputs if (op := by_name.get((key[0], name))) is not None]
        if values and all(not op.marked and op.op_name and REMAT_SCOPE not in op.op_name
                          and phase(op.op_name) == "backward" for op in values):
            out.add(key)
    return out
