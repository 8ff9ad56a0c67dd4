"""Rematerialization (recomputation) and the forward / backward / other phase of each op.

Two kinds of recomputation show up in HLO:

* jax's `checkpoint` / flax's `remat`: the backward pass recomputes the forward inside a
  `rematted_computation` name scope; every fused instruction carries that in its op_name.
* XLA's HloRematerialization pass: it clones an instruction under the name `<name>.remat`
  (`.remat2`, ...) and keeps the original.

Only real recomputation counts. XLA's CSE can merge a forward op with its recompute (they
compute the same value when nothing keeps them apart); the one op left may carry the
`rematted_computation` name, but nothing runs twice, so it is model FLOPs. We therefore call
an op remat only when it pairs with a forward twin still in the module: a forward-phase op
(jvp, not transposed) with the same opcode, the same shape and the same name scope once the
transformation wrappers (`jvp(...)`, `transpose(...)`, `checkpoint`, `rematted_computation`,
`while/body`, `closed_call`, `jit(...)`) are stripped. Twins pair one to one: with R
remat-named ops and F forward ops under one key, min(R, F) are recomputation. That stays right
when layers share names (a checkpointed plain function in a Python loop names every layer's
dot alike) and CSE merged some layers but not others: whichever name the merged op kept, the
surviving forward and recompute ops pair up. A remat-named op left without a twin (CSE merged
it, or XLA's fusion duplicated a recomputed op into several consumers) counts as model FLOPs.
For a `.remat` clone the twin is the original instruction of the same name without the suffix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Mapping

from analysis.scopes import WRAPPER, is_absolute, model_path, phase, scope, split_components  # noqa: F401
from hloparse.ir import Computation, Instruction, Module

REMAT_SCOPE = "rematted_computation"
XLA_REMAT_SUFFIX = re.compile(r"\.remat\d*$")



class OpNames:
    """Every instruction's op_name as a whole name stack. Before optimization, jax lowers each
    inner jitted function (`closed_call`, `checkpoint`'s body, ...) to a computation whose ops
    are named relative to it, and the `call` that runs it carries the caller's part
    (`checkpoint/rematted_computation/while/body/closed_call`): we join them along the call
    chain. While bodies, conditions and branches continue their enclosing function's names.
    After optimization the names are already whole and are kept as they are."""

    def __init__(self, module: Module, order: Iterable[str] | None = None):
        from analysis.loops.execution import control_order, is_executing_site

        self.prefix: dict[str, str] = {}
        for name in order if order is not None else control_order(module):
            comp = module.by_name[name]
            here = self.prefix.setdefault(name, "")
            for inst in comp.instructions:
                for site in inst.calls:
                    if not is_executing_site(inst, site.role) or site.computation in self.prefix:
                        continue
                    is_call = inst.opcode == "call"
                    self.prefix[site.computation] = self.join(here, inst.op_name) if is_call else here

    @staticmethod
    def join(prefix: str, op_name: str) -> str:
        if not prefix or is_absolute(op_name):
            return op_name
        return f"{prefix}/{op_name}" if op_name else prefix

    def of(self, computation: str, inst: Instruction) -> str:
        return self.join(self.prefix.get(computation, ""), inst.op_name)


def is_remat_named(inst: Instruction, op_name: str | None = None) -> bool:
    return REMAT_SCOPE in (inst.op_name if op_name is None else op_name) or bool(XLA_REMAT_SUFFIX.search(inst.name))


@dataclass(frozen=True)
class RematIndex:
    """Which instructions of a module are real recomputation."""

    remat: frozenset[tuple[str, str]]  # (computation, instruction) pairs
    remat_named: int  # instructions carrying a remat name (some may be merged by CSE)
    merged: tuple[tuple[str, str], ...]  # remat-named but left without a forward twin: model FLOPs

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self.remat


def find_remat(module: Module, computations: Iterable[Computation] | None = None,
               op_names: OpNames | None = None) -> RematIndex:
    comps = list(computations) if computations is not None else list(module.computations)
    op_names = op_names or OpNames(module)
    forward: dict[tuple, int] = {}  # twin key -> forward ops not yet paired
    names: set[str] = set()
    candidates: list[tuple[Computation, Instruction, str]] = []
    for comp in comps:
        for inst in comp.instructions:
            names.add(inst.name)
            op_name = op_names.of(comp.name, inst)
            if is_remat_named(inst, op_name):
                candidates.append((comp, inst, op_name))
            elif phase(op_name) == "forward":
                key = _twin_key(inst, op_name)
                forward[key] = forward.get(key, 0) + 1
    remat: set[tuple[str, str]] = set()
    merged: list[tuple[str, str]] = []
    for comp, inst, op_name in candidates:
        clone_of = XLA_REMAT_SUFFIX.sub("", inst.name)
        if clone_of != inst.name:
            twin = clone_of in names
        else:
            key = _twin_key(inst, op_name)
            twin = forward.get(key, 0) > 0
            if twin:
                forward[key] -= 1
        (remat.add if twin else merged.append)((comp.name, inst.name))
    return RematIndex(frozenset(remat), len(candidates), tuple(merged))


def _twin_key(inst: Instruction, op_name: str) -> tuple:
    return inst.opcode, model_path(op_name), inst.shape.element_type, inst.shape.dims


def remat_fusion_bodies(module: Module, index: RematIndex) -> Mapping[str, bool]:
    """Fused computations called by an XLA `.remat` clone of a fusion: everything in them is
    recomputation too (their instructions keep their original names)."""
    result: dict[str, bool] = {}
    for comp, inst in module.instructions():
        if inst.opcode == "fusion" and (comp.name, inst.name) in index and XLA_REMAT_SUFFIX.search(inst.name):
            for callee in inst.called("fusion"):
                result[callee] = True
    return result
