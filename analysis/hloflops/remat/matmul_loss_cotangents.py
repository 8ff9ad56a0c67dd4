"""The loss's cotangent handed out of the forward's last matmul's own output fusion: copies the
program without remat surely runs (hloflops.remat.pairing calls `matmul_loss_cotangents` on what
hloflops.remat.loss_cotangent_copies finds).

`loss_cotangent_copies` finds the cotangent of the loss's mean, `y * (2 / n)`, that XLA's
multi-output fusion merged into the loss's own fusion beside `sum(y * y)`, read stored by k
readers; the program without remat sometimes copies the multiply into each reader (k - 1 more
runs) and sometimes merges it alike (runs it once), so its k - 1 copies are a range hinge. Where
that fusion is the TPU output fusion (`kind=kOutput`) of the forward's last matmul, the matmul
computing `y` itself (`y = x @ W + b (+ residual)`, then the cotangent and the square-sum as
sibling outputs of the matmul's epilogue), the program without remat copied the multiply into
every reader on every cached TPU draw 0-359: 73 of 73 such fusions (its copies were k - 1, or more
on 11 tensor-parallel draws, never fewer). There the twin fuses the loss's sum out of the matmul's
epilogue into a backward fusion reading the stored `y` (TPU 65: beside the first layer-norm
gradient), and the cotangent, a cheap multiply of a parameter, is copied into its readers' fusions.
So those k - 1 copies are the twin's alone, sure (`RematIndex.twin_stores`, a negative share).

Not where the matmul is a loop body's (its op_name under `while/body`: the last layer of a layer
stack or scan that XLA peeled out of the loop): the twin merged the cotangent alike on 2 of 16 such
fusions (TPU 75, 206, tensor-parallel), so those stay hinges; nor a `kLoop` loss fusion without a
matmul (20 copied, 20 merged: nothing here tells them apart)."""

from __future__ import annotations

from typing import Mapping

from hloflops.remat.checkpoint_input_copies import checkpoint_input_copies
from hloflops.remat.gradient_reader_copies import gradient_reader_copies
from hloflops.remat.loss_cotangent_copies import loss_cotangent_copies, narrowed_cotangent_copies
from hloflops.remat.op_kinds import MATMUL_OPCODES
from hloflops.remat.sites import one_call_site
from hloflops.scopes import phase
from hloparse.ir import Computation, Module

# A loop body's op in jax's names: the matmul of a layer XLA peeled out of its loop.
_LOOP_BODY = "while/body"


def loss_cotangent_hinges(module: Module, hinged: dict[tuple[str, str], int]
                          ) -> tuple[dict[tuple[str, str], int], set[tuple[str, str]]]:
    """TPU's hinges of copies the twin may make (hloflops.remat.pairing's wiring, moved here): the
    loss's cotangent, a checkpoint's cheap input stored once, a chain only the recompute stores
    (loss_cotangent_copies, checkpoint_input_copies, gradient_reader_copies; the twin may copy each
    into every reader), and the f32 chain a fusion of its own narrows for its readers (its narrows
    unsure: `narrowed_cotangent_copies`), each into `hinged` as its most copies. Returns the
    cotangent's copies the twin surely runs (`matmul_loss_cotangents`: a sure share, no hinge) and
    the unsure narrows."""
    loss_copies = loss_cotangent_copies(module)
    for key, n in (*loss_copies.items(), *checkpoint_input_copies(module).items(),
                   *gradient_reader_copies(module).items()):
        hinged[key] = max(hinged.get(key, 0), n)
    stores = matmul_loss_cotangents(module, loss_copies)
    for key in stores:
        hinged.pop(key, None)
    cotangent_copies, cotangent_narrows = narrowed_cotangent_copies(module)
    for key, n in cotangent_copies.items():
        hinged[key] = max(hinged.get(key, 0), n)
    return stores, set(cotangent_narrows)


def matmul_loss_cotangents(module: Module, copies: Mapping[tuple[str, str], int]) -> dict[tuple[str, str], int]:
    """Of `copies` (loss_cotangent_copies: (fused computation, op) -> readers less one), those
    whose fusion is the output fusion of a forward matmul outside every loop body that computes
    the value the cotangent reads (module docstring): the same keys and counts, now sure."""
    callers = one_call_site(module)
    out: dict[tuple[str, str], int] = {}
    for (callee, name), n in copies.items():
        site = callers.get(callee)
        comp = module.by_name.get(callee)
        if site is None or comp is None or n <= 0 or site[1].fusion_kind != "kOutput":
            continue
        if _reads_last_matmul(comp, name):
            out[(callee, name)] = n
    return out


def _reads_last_matmul(comp: Computation, name: str) -> bool:
    """The cotangent `name` reads, through the fusion's ops, a forward matmul of the fusion, and
    every matmul of the fusion lies outside a loop body."""
    matmuls = [inst for inst in comp.instructions if inst.opcode in MATMUL_OPCODES]
    if not matmuls or any(_LOOP_BODY in inst.op_name or phase(inst.op_name) != "forward" for inst in matmuls):
        return False
    wanted = {inst.name for inst in matmuls}
    seen: set[str] = set()
    pending = [name]
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        if current in wanted:
            return True
        inst = comp.by_name.get(current)
        if inst is not None:
            pending += inst.operands
    return False
