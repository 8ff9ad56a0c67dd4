"""An offload policy's saved residual, as hloflops.remat.stored_gradient_chains's gate reads it.

That gate asks whether a recompute of a stored gradient chain rebuilds the activation's input from
a value the policy saved (and the bias): then the two programs' chains start from different stored
values, and this program's stored chain says nothing of how the program without remat fused its
own (which may copy the cheap chain into each matmul reader). A policy that saves a value in device
memory leaves an identity rounding on it; one that offloads it (`offload_dot_with_no_batch_dims`,
`save_and_offload_only_these_names`) writes it to host memory and reads it back for the backward
(`copy-start`/`copy-done` pairs whose shapes lie in memory space `S(5)`, XLA's host), with no
rounding. The value is as much the policy's own: the program without remat offloads nothing and
stores what its backward reads (the activation), so the chains start apart just the same (TPU 321,
an `nnx_loop` MLP under tp: the twin copies the tanh gradient chain into both matmul fusions of
two layers, truth -7,168 against this program's one stored copy)."""

from __future__ import annotations

from typing import Iterable

from hloflops.remat.moved_values import HOST_MEMORY_SPACE
from hloparse.ir import Instruction


def offloaded(passed: Iterable[Instruction]) -> bool:
    """Did a walk to a value's source pass a copy into or out of host memory (a shape, or a
    copy-start's tuple part, in XLA's host memory space)?"""
    for inst in passed:
        if inst.opcode not in ("copy-start", "copy-done"):
            continue
        parts = inst.shape.tuple_shapes or (inst.shape,)
        if any(part.layout is not None and part.layout.memory_space == HOST_MEMORY_SPACE for part in parts):
            return True
    return False
