"""The partial sums of a weight gradient the program without remat may compute window by window
(after optimization, TPU, FSDP; hloflops.remat.pairing reads `windowed_gradient_sums`).

Under FSDP TPU may run a layer's matmul as a windowed einsum: the gathered operand arrives shard
by shard (collective-permutes), each window packed from `-inf` pads and maximums
(hloflops.remat.repacked_loop_gathers), one convolution per window. Inside a layer loop the
program without remat, whose backward loop reads only the forward's stacked shards, packs those
windows again there (repacked_loop_gathers' hinges) and may compute the layer's weight gradient
from them as a windowed einsum too: one convolution per window, contracting the batch rows that
window holds, and an `add` of the partial weight gradients per window beyond the first (TPU 274:
`add(bitcast(conv_0), conv_1)` of `f32[16,64]`, the local weight, named `linear/dot_general`).
This program's backward loop recomputes the layer from an operand it gathered whole for the
recompute and computes the weight gradient in one convolution, with no such add. So the twin runs
adds this program does not, which no split of this program's ops shows: the low end of the range
is above the truth's total (held-out TPU 274: add +3,072 over truth, 399: +3,072; the recompute's
own bias add is real recompute, the twin's partial sums offset it).

Nothing in this program tells which layers' weight gradients the twin windows (274's twin windows
`linear`'s, not `linear_1`'s, both windowed in the forward), so each forward windowed matmul of
n windows gives a low-end hinge of n - 1 adds of its kernel's elements per execution
(`RematIndex.twin_sums`), never a share of the split. It keys on repacked_loop_gathers' sign (a
forward loop packing more than the backward loop does: the backward gathers whole), and fires on
the forward convolutions that read those packings.
"""

from __future__ import annotations

from collections import defaultdict

from hloflops.remat.repacked_loop_gathers import repacked_loop_gathers
from hloflops.remat.sites import Key
from hloparse.ir import Computation, Instruction, Module


def windowed_gradient_sums(module: Module) -> dict[Key, int]:
    """(computation, convolution) -> elements of one partial-sum add the twin's windowed weight
    gradient may run per execution, for each window but the first of a forward windowed matmul in
    a layer loop whose packings the twin may repack (module docstring)."""
    packings = {comp for comp, _ in repacked_loop_gathers(module)}
    if not packings:
        return {}
    windows: dict[str, list[tuple[Computation, Instruction, int]]] = defaultdict(list)
    for comp, inst in module.instructions():
        if inst.opcode != "convolution" or "transpose(" in inst.op_name or len(inst.operands) != 2:
            continue
        operands = [comp.by_name.get(name) for name in inst.operands]
        packed = [op is not None and any(call.computation in packings for call in op.calls) for op in operands]
        if sum(packed) != 1:
            continue
        kernel = operands[packed.index(False)]
        if kernel is not None:
            windows[inst.op_name].append((comp, inst, kernel.shape.num_elements))
    out: dict[Key, int] = {}
    for convs in windows.values():
        for comp, inst, elements in sorted(convs, key=lambda c: (c[0].name, c[1].name))[1:]:
            out[(comp.name, inst.name)] = elements
    return out
