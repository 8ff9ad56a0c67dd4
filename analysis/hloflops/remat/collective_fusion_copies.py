"""A recompute's cheap copies inside TPU's async collective fusions: a hinge
(hloflops.remat.pairing puts `collective_fusion_copies` in the range).

Under SPMD (tensor parallelism above all) TPU's compiler overlaps a matmul with the collective
that feeds it (an all-gather or collective-permute of its operand, run step by step in an
`async_collective_fusion` computation) and copies the operand's cheap producers into each such
fusion, nested fusions of their own: a layer norm's normalizing chain read by the query's, the
key's and the value's projections is computed once per projection there. Whether the program
without remat's forward does the same follows how XLA scheduled its collectives, which this
program does not show: scanning the cached TPU draws 0-299, its forward holds as many copies in
such fusions as the recompute in some (TPU draws 2 and 6, whole-model checkpoints: 38 and 19
copies in the recompute's collective fusions, 39 and 19 in the twin's forward) and none in others
(vtpu 263: the recompute copies each block's first layer norm into three collective fusions,
the twin's forward computes it once, in a plain fusion; subtract -11,264, multiply -22,528 after
the count by value). `_same_value` caps those copies at the forward's count, and the cap holds
where the twin's forward copies as the recompute does.

The sign in this program is what the recompute reads its copies for. Where it recomputes the
matmuls (draws 2 and 6: `nothing_saveable`, no policy), the copies feed the recompute's own
collective matmuls, as the twin's forward's feed its matmuls: the twin copies alike, and both draws
are exact. Where the recompute runs no matmul (a policy saving the dots: vtpu 263 and 275, htpu 93),
its cheap values feed only gradients, and XLA copies each into every gradient collective fusion
reading it (the weight gradients' matmuls, overlapping their collectives: 94, 81 and 82 copies),
where the twin materializes the value once for its forward matmul and its gradient fusions copied
0, 18 and 52 of them. How many the twin copies is not in this program: in such a program a marked
copy there that no rule counted is unsure, not model FLOPs (the range's high end covers it, the
reported count keeps the cap)."""

from __future__ import annotations

from hloflops.remat.op_kinds import DUPLICATED, MATMUL_OPCODES
from hloflops.remat.sites import SiteKey, SiteOp
from hloparse.ir import Module

# TPU's name for a fusion overlapping a collective with the ops reading or feeding it.
_COLLECTIVE_FUSION = "async_collective_fusion"


def collective_fusion_copies(module: Module, ops: list[SiteOp]) -> set[SiteKey]:
    """The remat-marked cheap ops (`DUPLICATED` opcodes) of `ops` in computations an async
    collective fusion calls, directly or through nested fusions, where the recompute runs no
    matmul (`ops` hold no marked one)."""
    if not any(comp.name.startswith(_COLLECTIVE_FUSION) for comp in module.computations) \
            or any(op.marked and op.inst.opcode in MATMUL_OPCODES for op in ops):
        return set()
    caller: dict[str, str] = {}
    for comp in module.computations:
        for inst in comp.instructions:
            for call in inst.calls:
                caller.setdefault(call.computation, comp.name)
    inside: dict[str, bool] = {}

    def nested(name: str) -> bool:
        if name not in inside:
            seen, chain, found = set(), [], False
            while name in caller and name not in seen:
                seen.add(name)
                chain.append(name)
                name = caller[name]
                if name.startswith(_COLLECTIVE_FUSION) or inside.get(name):
                    found = True
                    break
            for link in chain:
                inside[link] = found
            return found
        return inside[name]

    return {op.key for op in ops if op.marked and op.inst.opcode in DUPLICATED and nested(op.key[0])}
