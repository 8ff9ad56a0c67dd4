"""Forward ops copied into the fusion that stores a policy's saved residual where no identity
rounding marks it (hloflops.remat.pairing calls `copied_into_unmarked_saves` beside
hloflops.remat.rounding's `copied_into_saves`).

jax marks a residual a checkpoint policy saves by an identity reduce-precision
(hloflops.remat.rounding), but not one an offload policy saves (`save_and_offload_only_these_names`,
`offload_dot_with_no_batch_dims`): its residual goes to the host through a device-placement
annotation, which the CPU compiler drops, so the forward loop stores it into its stack like any
other. Such a stack still tells itself apart by its readers: the backward loop reads it only in
the recompute (remat-named recomputes of forward ops), where a residual the linearization needs is
read by the backward's own ops. The program without remat has no recompute: it saves what its
linearization reads (tanh's `t`, not `h`) and never copies `h`'s chain into a saving fusion. So
the cheap unmarked ops XLA copied under the stored value, whose value the forward computes in
another fusion too, run because of remat, as with a marked residual (held-out more seed 195,
`tanh(x @ w + b)` under `save_and_offload_only_these_names`: the bias add copied into the saving
fusion, add -8,192 before). A stack some backward op reads itself is left alone: whether the
program without remat copies the chain into its own saving fusion is its fusion's business, and
without the marker the stack may be any residual of the program's own."""

from __future__ import annotations

from hloparse.ir import Module
from hloflops.remat.op_kinds import DUPLICATED, EXPENSIVE, is_identity_rounding
from hloflops.remat.rounding import LoopFusions, computed_from, recomputes_forward
from hloflops.remat.sites import SiteKey, SiteOp
from hloflops.remat.stack_readers import stack_readers


def copied_into_unmarked_saves(module: Module, ops: list[SiteOp], remat: set[SiteKey]) -> set[SiteKey]:
    """The cheap unmarked ops under the value a loop body's fusion stores by a dynamic-update-slice
    (no identity rounding in the fusion) into a stack that other loops read only in recomputes of
    forward ops, whose value the forward computes in another fusion too: remat (module docstring)."""
    if not module.is_scheduled:
        return set()
    fusions = LoopFusions(module, ops)
    comps, values, by_key, forward, callers = (fusions.comps, fusions.values, fusions.by_key, fusions.forward,
                                               fusions.callers)
    counted: set[SiteKey] = set()
    for (comp_name, _site), members in comps.items():
        comp = module.by_name[comp_name]
        updates = [i for i in comp.instructions if i.opcode == "dynamic-update-slice" and len(i.operands) > 1]
        if not updates or comp_name not in callers or any(is_identity_rounding(i) for i in comp.instructions):
            continue
        readers = stack_readers(module, *callers[comp_name])
        if not readers or not all(recomputes_forward(by_key.get((c, i.name)), forward) for c, i in readers):
            continue
        under = computed_from(comp, [u.operands[1] for u in updates])
        counted |= {op.key for op in members if op.inst.name in under and not op.marked and op.key not in remat
                    and op.inst.opcode in DUPLICATED and op.inst.opcode not in EXPENSIVE
                    and len(values[op.exact]) > 1}
    return counted
