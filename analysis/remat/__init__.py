"""Rematerialization (recomputation) and the forward / backward / other phase of each op.

Remat FLOPs are FLOPs executed a second time for a value the program already computed. Two
kinds of recomputation show up in HLO:

* jax's `checkpoint` / flax's `remat`: the backward pass recomputes the forward inside a
  `rematted_computation` name scope (before optimization, jax also puts an
  `optimization-barrier` on the recompute's inputs so that CSE keeps it apart); older jax
  (0.4.13 to 0.4.20 at least) names the whole transpose of the checkpoint, recompute and
  backward ops alike, with one `remat` frame (hloflops.remat.names: how it is told from a
  user's module named `remat`);
* XLA's HloRematerialization pass: it clones an instruction as `<name>.remat` (`.remat2`, ...)
  and keeps the original.

A name is only a hint: XLA's CSE can merge a forward op with its recompute (nothing then runs
twice, but the one op left may carry the remat name: "phantom remat"), and XLA's
simplifications can hand a remat name to a backward op that recomputes nothing. So an op is
remat only when it is remat-marked (remat name or older jax's frame, `.remat` clone, or
computed from an optimization barrier's output) and pairs with an op that computes the same
value (hloflops.remat.values):

1. Same value, same inputs (equal exact value number): typically the forward and its recompute
   in one computation (the entry of a loop-free program, one loop body). The value is computed
   once; every marked op beyond that first computation is recomputation. If every op of the
   value is marked, CSE merged the forward away and one of them is model FLOPs.
2. A recompute inside a loop body whose forward runs in another loop's body (a scan's backward
   loop against its forward loop) reads its inputs from a different loop state, so its value
   is matched by computation instead: an op in another frame applying the same computation to
   inputs of the same shapes (equal abstract value number) whose op_name ends the way the
   recompute's name ends inside its checkpoint (`Dense_0/dot_general`).
3. An XLA `.remat` clone pairs with its original (the same name without the suffix).

Remat-named ops that pair with nothing are listed (`RematIndex.merged`, `Report.remat_unpaired`)
and counted as model FLOPs.
"""

from hloflops.remat.names import (  # noqa: F401
    REMAT_SCOPE, XLA_REMAT_SUFFIX, OpNames, inner_tail, is_remat_named,
)
from hloflops.remat.pairing import RematIndex, find_remat, remat_fusion_bodies  # noqa: F401
from hloflops.remat.values import ValueNumbers, value_numbers  # noqa: F401
from hloflops.scopes import WRAPPER, is_absolute, model_path, phase, scope, split_components  # noqa: F401
