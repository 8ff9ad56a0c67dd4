"""What value numbering (hloflops.remat.values) hands the pairing: the numbers per computation
and call site (`Numbered`), or per instruction (`ValueNumbers`). Apart from the numbering itself so
that a reader of the pairing meets the records without the algorithm."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Union

from hloparse.ir import Computation, Module

Val = Union[int, tuple]  # an array's number, or a tuple of Vals for a tuple-shaped value


@dataclass
class ValueNumbers:
    """`exact`, `abstract`, `frame` and `tainted` per (computation, instruction) (see hloflops.remat.values'
    docstring). `shared` lists callees inlined from more than one call site: their instructions
    keep the numbers of the first site."""

    exact: dict[tuple[str, str], Val] = field(default_factory=dict)
    abstract: dict[tuple[str, str], Val] = field(default_factory=dict)
    frame: dict[tuple[str, str], str] = field(default_factory=dict)
    tainted: set[tuple[str, str]] = field(default_factory=set)
    shared: set[str] = field(default_factory=set)


Number = tuple[Val, Val, bool]  # an instruction's (exact, abstract, tainted)
# The calls that reach a computation: None at ENTRY, else (the caller's chain, the calling
# computation, the calling instruction). Linked, so a chain of thousands of nested calls (issue
# 12) costs one node per call, not one tuple per depth.
Chain = Union[tuple, None]


def _in_order(comp: Computation, exact: Mapping[str, Val], abstract: Mapping[str, Val],
              tainted: set[str]) -> list[Number]:
    """Each instruction's `Number` (exact, abstract, tainted), in instruction order."""
    return [(exact[i.name], abstract[i.name], i.name in tainted) for i in comp.instructions]


@dataclass
class Numbered:
    """The numbering as the pairing reads it: per computation numbered from ENTRY, the frame it
    is taken in and its instructions' numbers by name, as the numbering left them (no `Number`
    per instruction to build: `numbers` makes the list where one is read)."""

    frame: dict[str, str] = field(default_factory=dict)
    exact: dict[str, dict[str, Val]] = field(default_factory=dict)
    abstract: dict[str, dict[str, Val]] = field(default_factory=dict)
    tainted: dict[str, set[str]] = field(default_factory=dict)
    shared: set[str] = field(default_factory=set)
    # A shared callee's numbers at its second and later call sites: (frame, exact, abstract,
    # tainted) per site. An unrolled scan's step or a checkpointed block lowered once and called
    # once per layer computes a different value at each site (it reads another layer's inputs).
    sites: dict[str, list[tuple[str, dict[str, Val], dict[str, Val], set[str]]]] = field(default_factory=dict)
    # The `Chain` that reaches each computation at each of its sites, in `numbers_per_site`'s
    # order: a callee's ops are named at each site by that site's calls (remat.names' `site_names`).
    chains: dict[str, list[Chain]] = field(default_factory=dict)

    def numbers(self, comp: Computation) -> list[Number] | None:
        """Each instruction's `Number`, in instruction order; None where `comp` is not numbered."""
        exact = self.exact.get(comp.name)
        if exact is None:
            return None
        return _in_order(comp, exact, self.abstract[comp.name], self.tainted[comp.name])

    def numbers_per_site(self, comp: Computation) -> list[tuple[str, list[Number]]]:
        """(frame, `numbers`) at each call site of `comp` (one for a computation numbered once;
        none where it is not numbered, or where it is shared but its sites were not kept)."""
        first = self.numbers(comp)
        if first is None:
            return []
        later = self.sites.get(comp.name)
        if comp.name in self.shared and later is None:
            return []
        out = [(self.frame[comp.name], first)]
        for frame, exact, abstract, tainted in later or ():
            out.append((frame, _in_order(comp, exact, abstract, tainted)))
        return out

    def value_numbers(self, module: Module) -> ValueNumbers:
        out = ValueNumbers(shared=set(self.shared))
        for name in self.exact:
            frame, comp = self.frame[name], module.by_name[name]
            for inst, (exact, abstract, taint) in zip(comp.instructions, self.numbers(comp) or ()):
                key = (name, inst.name)
                out.exact[key], out.abstract[key], out.frame[key] = exact, abstract, frame
                if taint:
                    out.tainted.add(key)
        return out

    @staticmethod
    def of(module: Module, values: ValueNumbers) -> Numbered:
        """The same numbers, read back from per-instruction dicts."""
        out = Numbered(shared=set(values.shared))
        for comp in module.computations:
            keys = [(comp.name, inst.name) for inst in comp.instructions]
            if keys and keys[0] in values.exact:
                out.frame[comp.name] = values.frame[keys[0]]
                out.exact[comp.name] = {k[1]: values.exact[k] for k in keys}
                out.abstract[comp.name] = {k[1]: values.abstract[k] for k in keys}
                out.tainted[comp.name] = {k[1] for k in keys if k in values.tainted}
        return out
