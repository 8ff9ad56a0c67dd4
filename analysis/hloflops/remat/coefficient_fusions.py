"""A recompute fusion that hands out a statistic together with the gradient of its coefficient
(TPU, no loop; hloflops.remat.by_platform's `tpu_rules` calls `coefficient_fusions`).

A layer norm's input gradient multiplies the cotangent by the derivative of `r = rsqrt(v)`,
`-0.5 * r / v`. The program without remat computes `r` in its forward, where no cotangent exists
yet, so the coefficient's product with the cotangent is a fusion of its backward, and TPU copies
the chain of `r` into it (`v * (1 / n) + eps`, the rsqrt, the divide): its forward's `r` and that
gradient fusion are two copies of the chain (TPU draws 0 and 17, whole-model checkpoints: five of
six layer norms, and one of two, each `multiply_multiply_fusion` beside the forward's fusion of
`r`). Here the recompute and the backward run in one computation, and TPU fuses the recompute of
`r` with that product into one fusion handing out both: it stands for that program's gradient
fusion, its forward's copy for the other, so its ops are model FLOPs (the divide, which no other
fusion here computes, marks the coefficient). Not where the recompute hands `r` out alone (the
first layer's norm, with no input gradient), nor in a module with a loop (a scan's backward loop
reads the residuals its forward stacked: hloflops.remat.backward_loop_copies)."""

from __future__ import annotations

from hloflops.remat.op_kinds import DUPLICATED, EXPENSIVE
from hloflops.remat.sites import SiteKey, SiteOp
from hloflops.scopes import phase
from hloparse.ir import CallRole, Module


def coefficient_fusions(module: Module, ops: list[SiteOp], remat: set[SiteKey]) -> set[SiteKey]:
    """The remat ops of each fusion of the entry whose outputs are a marked expensive op counted
    remat and an unmarked op of the transpose computed from a marked divide of that op (module
    docstring): model FLOPs."""
    if any(inst.opcode == "while" for _, inst in module.instructions()):
        return set()
    by_inst: dict[tuple[str, str], list[SiteOp]] = {}
    for op in ops:
        by_inst.setdefault(op.key[:2], []).append(op)
    found: set[SiteKey] = set()
    for inst in module.entry.instructions:
        if inst.opcode != "fusion":
            continue
        comp = module.by_name.get(next(iter(inst.called(CallRole.FUSION)), ""))
        if comp is None or comp.root.opcode != "tuple":
            continue
        outputs = [comp.by_name[name] for name in comp.root.operands if name in comp.by_name]
        ops_of = {i.name: by_inst.get((comp.name, i.name), []) for i in comp.instructions}
        statistics = [i for i in outputs if i.opcode in EXPENSIVE and ops_of[i.name]
                      and all(op.marked and op.key in remat for op in ops_of[i.name])]
        gradients = [i for i in outputs if ops_of[i.name] and not any(op.marked for op in ops_of[i.name])
                     and phase(ops_of[i.name][0].op_name) == "backward"]
        if len(statistics) != 1 or not gradients:
            continue
        r = statistics[0].name
        coefficients = {i.name for i in comp.instructions if i.opcode == "divide" and r in i.operands
                        and all(op.marked for op in ops_of[i.name])}
        if not coefficients or not all(_computed_from(comp, g.name, coefficients) for g in gradients):
            continue
        found |= {op.key for i in comp.instructions if i.opcode in DUPLICATED
                  for op in ops_of[i.name] if op.key in remat}
    return found


def _computed_from(comp, name: str, sources: set[str]) -> bool:
    """Is `name` computed (in `comp`) from one of `sources`?"""
    seen: set[str] = set()
    stack = [name]
    while stack:
        current = stack.pop()
        if current in sources:
            return True
        if current in seen or current not in comp.by_name:
            continue
        seen.add(current)
        stack.extend(comp.by_name[current].operands)
    return False
