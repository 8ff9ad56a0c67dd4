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
value out (a value the forward hands out is stored by both programs, and the backward of the
program without remat reads it stored), in a fusion of no matmul that reads a recomputed matmul's
output (nested fusions through their callers' operands): the recompute stores `h` and rebuilds the
chain from it, as the twin may from its forward's `h`. Not in a scan's backward loop body, whose
copies hloflops.remat.backward_loop_copies counts against the forward loop's saving fusion (TPU 12,
exact). It loosens (the range only, never the count) TPU draws 16, 26, 36, 52, 76, 84, 95, 104, 106,
130, 154, 163, 165, 190, 200, 230, 231, 236, 239 of 0-239, none of them exact."""

from __future__ import annotations

from hloflops.remat.fusion_copies import backward_loop_bodies
from hloflops.remat.names import ends_with, inner_tail, is_remat_named
from hloflops.remat.op_kinds import DUPLICATED, MATMUL_OPCODES, unit_free_shape
from hloflops.remat.sites import SiteKey, SiteOp
from hloflops.scopes import phase
from hloparse.ir import CallRole, Computation, Instruction, Module, parameter_number

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
    rebuilding = _rebuilding_fusions(module)
    # Not in a scan's backward loop body, whose twin reads what its forward loop stacked
    # (hloflops.remat.backward_loop_copies counts those copies; TPU 12 exact so).
    backward_loops = backward_loop_bodies(module, ops)
    out: set[SiteKey] = set()
    for op in ops:
        if not (op.marked and op.key in paired_by_value and op.key in remat and op.inst.opcode in _CHEAP
                and op.op_name and op.key[0] in rebuilding and op.frame not in backward_loops):
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


def _rebuilding_fusions(module: Module) -> set[str]:
    """The fused computations, holding no matmul, that read the output of a recomputed matmul (a
    remat-named `convolution` or `dot`, or a fusion holding one): where the recompute hands its
    matmul's output to fusions that rebuild the chain from it, the program without remat, whose
    backward has the same fusions, may read its forward's saved output there alike (TPU 231, 239)."""
    recomputed_matmul = {callee for _, inst in module.instructions() if inst.opcode == "fusion"
                         for callee in inst.called(CallRole.FUSION)
                         if any(i.opcode in MATMUL_OPCODES and is_remat_named(i)
                                for i in module.by_name[callee].instructions)}
    callers = {callee: (comp, inst) for comp, inst in module.instructions() if inst.opcode == "fusion"
               for callee in inst.called(CallRole.FUSION)}
    out: set[str] = set()
    for comp, inst in module.instructions():
        if inst.opcode != "fusion":
            continue
        callees = [c for c in inst.called(CallRole.FUSION)
                   if not any(i.opcode in MATMUL_OPCODES for i in module.by_name[c].instructions)]
        if not callees:
            continue
        for name in inst.operands:
            source, frame = _through_views(comp, name), comp
            # A fusion nested in another (a chain nested in a weight gradient's fusion) reads the
            # outer fusion's parameter: what the outer fusion's caller hands it.
            while source is not None and source.opcode == "parameter" and frame.name in callers:
                frame, outer = callers[frame.name]
                index = parameter_number(source)
                source = _through_views(frame, outer.operands[index]) if index < len(outer.operands) else None
            if source is None:
                continue
            if source.opcode in MATMUL_OPCODES and is_remat_named(source) or source.opcode == "fusion" \
                    and any(c in recomputed_matmul for c in source.called(CallRole.FUSION)):
                out.update(callees)
                break
    return out


def _through_views(comp: Computation, name: str) -> Instruction | None:
    """The instruction `name` reads through tuple elements, bitcasts and copies."""
    for _ in range(8):
        inst = comp.by_name.get(name)
        if inst is None or inst.opcode not in ("get-tuple-element", "bitcast", "copy") or not inst.operands:
            return inst
        name = inst.operands[0]
    return None
