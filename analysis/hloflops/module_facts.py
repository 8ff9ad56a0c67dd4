"""What the engine's pass needs to know of a whole module before it costs an instruction: which
computations are fusion bodies (bytes are charged at the fusion's boundary) or silenced (XLA never
looks inside a kCustom gather/scatter fusion), and whether any shape has an unbounded dimension
(whose instructions the exact view cannot cost)."""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Iterable

from hloflops.cost.rules import custom_fusion_gather_or_scatter
from hloflops.cost.shapes import UNBOUNDED
from hloflops.graph import call_table
from hloparse.ir import CallRole, Computation, Instruction, Module


@dataclass(frozen=True)
class ModuleInfo:
    fusion_bodies: frozenset[str]  # fusion bodies and every computation they call
    silenced: frozenset[str]  # bodies of kCustom gather/scatter fusions and everything below them


def module_info(module: Module, order: list[str], *, silenced: bool = True) -> ModuleInfo:
    """The fusion bodies, and with `silenced` the silenced ones (only view "xla" reads them).
    `order` is module_bottom_up(module): walked from the callers down, everything a fusion body
    runs (a while or call inside it too) is inside the fusion, and so below a silenced body."""
    calls = call_table(module).calls
    by_name = module.by_name
    bodies: set[str] = set()
    quiet: set[str] = set()
    for name in reversed(order):  # callers first: whether a computation is inside is known before its callees
        sites = calls.get(name)
        if not sites:
            continue
        inside, hushed = name in bodies, name in quiet
        for callee, site in sites:
            if inside or (site["role"] == CallRole.FUSION and callee in by_name):
                bodies.add(callee)
            if hushed or (silenced and site["role"] == CallRole.FUSION and callee in by_name
                          and custom_fusion_gather_or_scatter(site["instruction"], by_name[callee]) is not None):
                quiet.add(callee)
    return ModuleInfo(frozenset(bodies), frozenset(quiet))


def has_unbounded_shapes(computations: Iterable[Computation]) -> bool:
    """Does any instruction's shape have an unbounded `?` dimension (each distinct shape once)."""
    distinct: dict[int, Any] = {}
    for comp in computations:  # in C: a module has far fewer shapes than instructions
        shapes = list(map(_SHAPE, comp.instructions))
        distinct.update(zip(map(id, shapes), shapes))
    return _any_unbounded(list(distinct.values()))


def _any_unbounded(shapes: list[Any]) -> bool:
    """Does any of `shapes`, or a tuple element within, have an unbounded `?` dimension."""
    while shapes:
        shape = shapes.pop()
        if UNBOUNDED in shape.dims:
            return True
        shapes.extend(shape.tuple_shapes)
    return False


_SHAPE = attrgetter("shape")


def has_unbounded(comp: Computation, inst: Instruction) -> bool:
    """Has the instruction's shape, or an operand's, an unbounded dimension?"""
    return _any_unbounded([inst.shape] + [comp.by_name[o].shape for o in inst.operands])
