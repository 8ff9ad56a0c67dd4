"""When an offload policy's saved residual opens hloflops.remat.stored_gradient_chains's gate.

That gate asks whether a recompute of a stored gradient chain rebuilds the activation's input from a
value the policy saved (and the bias): then the two programs' chains start from different stored
values, and this program's stored chain says nothing of how the program without remat fused its own
(which may copy the cheap chain into each matmul reader). A policy that saves a value in device
memory leaves an identity rounding on it; one that offloads it (`offload_dot_with_no_batch_dims`,
`save_and_offload_only_these_names`) writes it to host memory and reads it back for the backward
(hloflops.remat.host_read_residuals finds that round trip), with no rounding. The value is as much
the policy's own: the program without remat offloads nothing and stores what its backward reads (the
activation), so the chains start apart just the same (TPU 321, an `nnx_loop` MLP under tp: the twin
copies the tanh gradient chain into both matmul fusions of two layers, truth -7,168 against this
program's one stored copy).

Only for a chain holding an expensive recompute (tanh, gelu's tanh, a divide): XLA's instruction
fusion never copies an expensive op into several consumers, so the recompute is what makes this
program compute the chain once and store it, and the twin, whose chain reads the stored activation
and is cheap throughout, may copy it. A chain of cheap recomputes alone (relu's `select(h > 0, g,
0)` under the recomputed bias add) says the opposite: XLA chose to store it here, cheap as it was,
and the twin stored its own alike (TPU 51, held-out 90 and 176, relu MLPs under
offload_dot_with_no_batch_dims: truth 0, the same stored chain in both programs)."""

from __future__ import annotations

from typing import Iterable

from hloflops.remat.op_kinds import EXPENSIVE
from hloparse.ir import Computation


def offloaded_chain(comp: Computation, chain: Iterable[str]) -> bool:
    """May an offloaded residual open the gate for this chain (of the fused computation `comp`):
    does it hold an expensive op (module docstring)?"""
    return any(getattr(comp.by_name.get(name), "opcode", None) in EXPENSIVE for name in chain)

