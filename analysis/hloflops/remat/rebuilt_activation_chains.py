"""A recomputed activation chain whose forward runs only inside its matmul's output fusion, handed
out as the chain's end: how many copies run because of remat rests on the twin's fusion (after
optimization; TPU).

TPU fuses a dense layer's activation (gelu's `x ** 3`, `0.044715 * ...`, `1 + tanh(...)`) into the
matmul's output fusion and hands out only the activation, narrowed for the next matmul. The
program without remat may save the matmul's output `h` from that fusion as a second output
(`(bf16 gelu(h), f32 h)`) and rebuild the chain from the stored `h` in every backward fusion that
reads it (gelu's derivative, the f32 activation a weight gradient reads): TPU draws 231 (plain
jax gradient accumulation, tensor parallel) and 239 (haiku, a Python loop of attention layers,
tensor parallel) have as many chain copies in the twin's backward as in the recompute, so none of
the recompute's copies runs because of remat (231: multiply +393,728, add +163,840; 239: multiply
+32,768, add +16,384, both out of range). But the program without remat may as well save the
chain's values themselves (then every recompute copy is remat), and nothing in this program tells
which: the pairing by value (a value the forward computes k times is recomputed at most k times)
counts k copies as sure. Those copies are loose here: counted as before, the range covering both
answers.

Only a cheap elementwise recompute paired by value whose forward copies, all unmarked, lie inside
fusions holding a matmul (kOutput fusions nesting a `convolution` or `dot`) that do not hand the
value out: a value the forward hands out is stored by both programs, and the backward of the
program without remat reads it stored."""

from __future__ import annotations

from hloflops.remat.names import ends_with, inner_tail
from hloflops.remat.op_kinds import DUPLICATED, MATMUL_OPCODES, unit_free_shape
from hloflops.remat.sites import SiteKey, SiteOp
from hloflops.scopes import phase
from hloparse.ir import CallRole, Module

_CHEAP = DUPLICATED - {"convert"}


def rebuilt_activation_chains(module: Module, ops: list[SiteOp], remat: set[SiteKey],
                              paired_by_value: set[SiteKey]) -> set[SiteKey]:
    """The recompute copies paired by value that this module's docstring leaves to the range."""
    inside_matmuls = _matmul_fusion_internals(module)
    if not inside_matmuls:
        return set()
    # The forward's copies of a recompute: unmarked forward ops of its opcode and element shape
    # whose name ends as the recompute's inside its checkpoint (a value number may differ: the
    # recompute reads its matmul's output in another precision).
    forward: dict[tuple, list[SiteOp]] = {}
    for op in ops:
        if not op.marked and op.op_name and phase(op.op_name) == "forward" and op.inst.opcode in _CHEAP:
            forward.setdefault((op.inst.opcode, unit_free_shape(op.inst.shape)), []).append(op)
    out: set[SiteKey] = set()
    for op in ops:
        if not (op.marked and op.key in paired_by_value and op.key in remat and op.inst.opcode in _CHEAP
                and op.op_name):
            continue
        tail = inner_tail(op.op_name)
        twins = [twin for twin in forward.get((op.inst.opcode, unit_free_shape(op.inst.shape)), [])
                 if ends_with(twin.op_name, tail)]
        if twins and all(twin.key[:2] in inside_matmuls for twin in twins):
            out.add(op.key)
    return out


def _matmul_fusion_internals(module: Module) -> set[tuple[str, str]]:
    """(fused computation, instruction) of the values computed inside a fusion that holds a matmul
    and not handed out of it (not its root, nor an element of its root tuple)."""
    out: set[tuple[str, str]] = set()
    for _, inst in module.instructions():
        if inst.opcode != "fusion":
            continue
        for callee in inst.called(CallRole.FUSION):
            body = module.by_name.get(callee)
            if body is None or not any(i.opcode in MATMUL_OPCODES for i in body.instructions):
                continue
            root = body.root
            handed = {root.name} | (set(root.operands) if root.opcode == "tuple" else set())
            out |= {(callee, i.name) for i in body.instructions if i.name not in handed}
    return out
