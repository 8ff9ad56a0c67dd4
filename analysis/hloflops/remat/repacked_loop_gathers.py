"""Packings a layer loop's forward builds, which the program without remat builds again in its
backward loop (after optimization, TPU, FSDP; hloflops.remat.pairing reads `repacked_loop_gathers`).

Under FSDP TPU gathers a small operand of a layer's matmul in windows: each device's shard and the
ones collective-permutes bring are padded with `-inf` and combined by `maximum` (widened to f32
and narrowed back where the operand is bf16: a `pad_maximum_fusion`,
hloflops.remat.packed_conv_inputs' `is_packing` with its `windows`). Inside a layer loop (a scan or a layer stack
XLA keeps as a `while`) the forward loop packs each layer's operands per trip. The program
without remat has two loops too, and its backward loop, which reads the forward's residuals
stacked per layer, packs the operands of its weight and input gradients again (shards sliced out
of `-inf` pads and combined the same way): the forward's packed values are not among the stacked
residuals. The program with remat recomputes the layer in its backward loop and packs only what
the recompute's matmuls and the gradient's read there. Held-out TPU draws 113, 235, 274 and 238
(scan, layer stacks, fori_loop; no saving policy): the twin's backward loop packs exactly the
elements this program packs in its backward loop plus those its forward loop packs (maximum
-640, convert -418 for 235; maximum -3,840, convert -11,523 for 274), while unrolled layers
(TPU 15, 74: no `while`) pack alike in both programs.

Nothing in this program tells how many of those packings the twin builds again (nor whether it
widens them: 235's twin repacks f32 where the forward packed bf16), so each forward packing op in a
loop is a low-end hinge of one copy (`RematIndex.twin_copies`), never a share of the split. The
sign it keys on is this program's own: a forward packing of a matmul operand inside a `while`
body, in a program whose backward loop packs a recomputed layer's operands too (a
checkpoint-scoped packing inside a `while` body), but fewer elements than the forward loop packs:
a backward that packs fewer cannot have packed each forward value again, as the twin's backward
does. Where this program's backward packs as many or more, it may already repack them as the twin
does (held-out TPU 146, a layer stack saving named values: the same packings in both programs,
exact), and nothing is hinged. On TPU 0-299 it fires on 113, 235, 238 and 274 alone.
"""

from __future__ import annotations

from hloflops.cost.tpu import is_tpu_module
from hloflops.remat.packed_conv_inputs import is_packing
from hloparse.ir import CallRole, Computation, Module

Key = tuple[str, str]

# The packing's ops that carry FLOPs: its maximums, widens and narrows.
_COUNTED = frozenset({"maximum", "convert"})


def repacked_loop_gathers(module: Module) -> dict[Key, int]:
    """(computation, op) -> 1 for each maximum and convert of a forward matmul operand's packing
    inside a layer loop, where a backward loop packs a recomputed layer's operands too (module
    docstring): the twin's backward loop may pack each once more."""
    if not is_tpu_module(module):
        return {}
    looped = _inside_loops(module)
    forward: list[Computation] = []
    packed = [0, 0]  # elements the forward loop's packings combine, and the recompute's backward's
    for comp in module.computations:
        if comp.name not in looped or not is_packing(comp, windows=True):
            continue
        maximums = [inst for inst in comp.instructions if inst.opcode == "maximum"]
        if not all("dot_general" in inst.op_name for inst in maximums):
            continue
        elements = sum(inst.shape.num_elements for inst in maximums)
        if all("transpose(" not in inst.op_name for inst in maximums):
            forward.append(comp)
            packed[0] += elements
        elif any("transpose(" in inst.op_name and "/checkpoint/" in inst.op_name for inst in maximums):
            packed[1] += elements
    # A backward loop packing as much as the forward's may already pack each forward value again,
    # as the twin's does (TPU 146, a layer stack saving named values: both programs alike).
    if not packed[1] or packed[1] >= packed[0]:
        return {}
    return {(comp.name, inst.name): 1 for comp in forward for inst in comp.instructions
            if inst.opcode in _COUNTED}


def _inside_loops(module: Module) -> set[str]:
    """Names of the computations a `while` body runs, itself and all it calls."""
    seen: set[str] = set()
    todo = [name for _, inst in module.instructions() if inst.opcode == "while"
            for name in inst.called(CallRole.WHILE_BODY)]
    while todo:
        name = todo.pop()
        if name in seen or name not in module.by_name:
            continue
        seen.add(name)
        for inst in module.by_name[name].instructions:
            todo.extend(call.computation for call in inst.calls)
    return seen
