"""A count by value that `fusion_copies` dropped in a gradient fusion: the recompute's sibling copy
that may hold it is a hinge (hloflops.remat.pairing calls `counts_passed_to_recompute_siblings`
right after hloflops.remat.fusion_copies and puts what it finds in the range).

`_same_value` (hloflops.remat.pairing) caps a value's recompute copies at its forward's count
(`ForwardTwins` where the recompute reads other inputs than the forward) and picks which copies by
order: the cap says how many copies run because of remat, not which. XLA copies a cheap op into
each fusion reading it, in the recompute as in the program without remat, so where the picked copy
sits in a gradient fusion (one whose outputs are no recompute), `fusion_copies` drops it as the
program without remat's own copy there. The recompute's copy of the forward's is then a sibling
(same value, same name, same frame and call site) in a fusion whose outputs are recompute, which
the cap left uncounted. `fusion_copies._counts_passed_on` passes the count on for a duplicated
transcendental only; the same holds for any cheap op.

TPU draw 263 (a whole-model checkpoint under tensor parallelism): a layer norm's `x - mean` runs
once in the forward's normalizing fusion, once in the recompute's and once in the layer norm's
gradient fusion (its scale gradient's reduces); the program without remat runs it in its
forward's normalizing fusion and the same gradient fusion. The recompute's two copies read the
recomputed activations, so their value is found against the forward's by signature and name
(`ForwardTwins`: one forward copy), and the cap picked the gradient fusion's copy, which
`fusion_copies` then dropped: subtract -1,024 per layer norm, the multiplies and adds under it
alike.

Counted as remat, sure, the passed count made vtpu 263 and 275 closer but eight other TPU draws of
240-299 worse (scans and layer stacks, 279's low end further above the truth): there the dropped
copy's count was one the program without remat's forward holds too (its fusions copy the value as
the recompute's gradient fusions do), and nothing in this program tells the two apart. So the
sibling is a hinge: unsure, the range's high end covers it, the reported count keeps the cap. Only
in a partitioned program (hloflops.remat.partitioned.is_partitioned), where it was seen: on one
device it widened the range of an exact draw (ntpu 160, an offloaded hk loop, whose recompute
fusions' siblings the program without remat computes alike), and in a layer loop likewise (utpu
221, an offloaded linen loop under FSDP): only in a loop-free program (a whole-model checkpoint)."""

from __future__ import annotations

from typing import Mapping

from hloflops.remat.op_kinds import DUPLICATED
from hloflops.remat.sites import SiteKey, SiteOp


def counts_passed_to_recompute_siblings(ops: list[SiteOp], fused: Mapping[str, frozenset[str]],
                                        counted: set[SiteKey], remat: set[SiteKey],
                                        dropped_copies: set[SiteKey]) -> set[SiteKey]:
    """Of `ops`, the marked cheap copies that may hold the count of a sibling `_same_value` counted
    (`counted`) and `fusion_copies` dropped as a gradient fusion's copy (in `dropped_copies`, no
    longer in `remat`): one sibling each, by order, uncounted, inside a fusion with a recompute
    output (in `remat`)."""
    def outputs_recompute(op: SiteOp) -> bool:
        outputs = fused.get(op.key[0], ())
        return any((op.key[0], name, op.key[2]) in remat for name in outputs)

    dropped: dict[tuple, int] = {}
    for op in ops:
        key = op.key
        if op.marked and key in counted and key in dropped_copies and key not in remat \
                and op.inst.opcode in DUPLICATED and key[0] in fused and not outputs_recompute(op):
            group = (op.exact, op.op_name, op.frame, key[2])
            dropped[group] = dropped.get(group, 0) + 1
    passed: set[SiteKey] = set()
    if not dropped:
        return passed
    for op in sorted(ops, key=lambda o: o.order):
        key = op.key
        group = (op.exact, op.op_name, op.frame, key[2])
        if dropped.get(group) and op.marked and key not in remat and key not in counted \
                and key[0] in fused and op.inst.name not in fused[key[0]] and outputs_recompute(op):
            passed.add(key)
            dropped[group] -= 1
    return passed
