"""Where `fusion_copies.saved_matmul_epilogues` may walk from a recomputed bias add to its saved
matmul output through one output of a multi-output fusion (TPU's kOutput fusion of the forward's
matmul handing out jax's rounded residual beside the raw output its activation reads), and that
walk's step (hloflops.remat.fusion_copies calls both)."""

from __future__ import annotations

from hloflops.remat.sites import SiteOp
from hloparse.ir import CallRole, Instruction, Module

# Activations whose jvp reads their output, not their input (jax: tanh's `1 - y * y`, logistic's
# `y * (1 - y)`): a backward without remat reads the stored `y`, never the bias add's sum under it.
_OUTPUT_DERIVATIVES = frozenset({"tanh", "logistic"})


def only_output_derivatives(module: Module, op: SiteOp) -> bool:
    """Does every reader of the bias add in its computation apply such an activation? Then the
    program without remat runs no copy of the add in its backward, whether its forward stored the
    sum or not; where the sum feeds gelu's polynomial, relu's compare or attention's matmuls, its
    backward reads the sum and XLA may copy the add there from the stored matmul output (htpu 102
    and ntpu 170, gelu; tpu 43 and ntpu 148, attention's projections: the twin ran those copies)."""
    users = module.by_name[op.key[0]].users.get(op.inst.name, ())
    return bool(users) and all(user.opcode in _OUTPUT_DERIVATIVES for user in users)


def fusion_output(module: Module, source: Instruction | None, gte: Instruction
                  ) -> tuple[str, Instruction | None] | None:
    """(fused computation, op) of the root tuple's element that `gte` reads of the fusion `source`;
    None where `source` is no fusion (a loop's tuple) or its root no tuple."""
    if source is None or source.opcode != "fusion":
        return None
    callees = list(source.called(CallRole.FUSION))
    callee = module.by_name.get(callees[0]) if len(callees) == 1 else None
    if callee is None or callee.root.opcode != "tuple":
        return None
    index = int(gte.attributes.get("index", "0"))
    if not 0 <= index < len(callee.root.operands):
        return None
    return callee.name, callee.by_name.get(callee.root.operands[index])
