"""XLA's own rematerialization: the clones its remat pass makes of an instruction (and of a
fusion), named after the original with a `.remat` suffix (hloflops.remat.names.XLA_REMAT_SUFFIX).
The original of the same name is the clone's twin (hloflops.remat.pairing asks `has_xla_clones`
and `xla_clones`; hloflops.accounting `remat_fusion_bodies`)."""

from __future__ import annotations

from typing import Mapping

from hloflops.remat.index import RematIndex
from hloflops.remat.names import XLA_REMAT_SUFFIX
from hloflops.remat.sites import Key
from hloparse.ir import Computation, Module


def has_xla_clones(comps: list[Computation]) -> bool:
    """Is any instruction named like an XLA `.remat` clone? (One search of all names joined:
    a third of the time of a test per instruction; the names read by a comprehension, whose
    attribute loads are specialised, not by `map` of an attrgetter.)"""
    return ".remat" in "\n".join([inst.name for comp in comps for inst in comp.instructions])


def xla_clones(comps: list[Computation]) -> set[Key]:
    """XLA's clones (fusions too): the original of the same name is the twin."""
    clones = [(comp.name, inst.name) for comp in comps for inst in comp.instructions if ".remat" in inst.name]
    if not clones:
        return set()
    names = {inst.name for comp in comps for inst in comp.instructions}
    found: set[Key] = set()
    for comp_name, name in clones:
        clone_of = XLA_REMAT_SUFFIX.sub("", name)
        if clone_of != name and clone_of in names:
            found.add((comp_name, name))
    return found


def remat_fusion_bodies(module: Module, index: RematIndex) -> Mapping[str, bool]:
    """Fused computations called by an XLA `.remat` clone of a fusion: everything in them is
    recomputation too (their instructions keep their original names)."""
    result: dict[str, bool] = {}
    if not any(".remat" in name for _, name in index.remat):  # no clone is remat: no need to look
        return result
    for comp, inst in module.instructions():
        if inst.opcode == "fusion" and XLA_REMAT_SUFFIX.search(inst.name) and (comp.name, inst.name) in index:
            for callee in inst.called("fusion"):
                result[callee] = True
    return result
