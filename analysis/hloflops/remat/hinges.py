"""The rows the remat split hinges on (`Report.remat_hinges`), from the pairing's index: what makes
`remat_flops_bounds` a range where the program alone cannot settle the split."""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from hloflops.remat.index import RematIndex
from hloflops.remat.sites import Key
from hloflops.results import RematHinge, Row


def remat_hinges(rows: Sequence[Row], index: RematIndex) -> tuple[RematHinge, ...]:
    """The rows the remat split hinges on (`RematIndex.weak` counted, `RematIndex.unsure` not): a
    counted one with the FLOPs it counts (a `Row.remat_part`'s share); and the values the program
    without remat copies more often (`RematIndex.twin_copies`), with those copies' FLOPs."""
    twin, stores = index.twin_copies, index.twin_stores
    narrows = index.twin_narrows  # converts of a row's result (no FLOPs of its own to copy)
    trips = index.twin_trips  # one trip more of a peeled loop's op: hloflops.remat.peeled_iterations
    forms = index.twin_forms  # a packed layer's weight gradient: hloflops.remat.weight_gradient_forms
    sums = index.twin_sums  # a windowed weight gradient's partial sums: hloflops.remat.windowed_gradient_sums
    if not (index.weak or index.unsure or twin or narrows or trips or forms or sums):
        return ()

    def counted(r: Row) -> int:  # the remat FLOPs of the row's own (not the twin's stores taken off)
        return r.remat_flops + r.total.flops * stores.get((r.computation, r.name), 0) if r.remat else 0

    return tuple(RematHinge(r.name, r.computation, r.opcode, counted(r) or r.total.flops, counted(r) > 0)
                 for r in rows
                 if r.total.flops and ((r.computation, r.name) in index.weak if counted(r) > 0
                                       else (r.computation, r.name) in index.unsure)) + \
        tuple(RematHinge(r.name, r.computation, r.opcode, r.total.flops * twin[(r.computation, r.name)],
                         counted(r) > 0, twin[(r.computation, r.name)])
              for r in rows if r.total.flops and (r.computation, r.name) in twin) + \
        tuple(RematHinge(r.name, r.computation, "convert", r.executions * n * elements, counted(r) > 0, n)
              for r in rows for n, elements in (narrows.get((r.computation, r.name), (0, 0)),) if n and elements) + \
        tuple(RematHinge(r.name, r.computation, r.opcode, r.total.flops // trips[(r.computation, r.name)],
                         counted(r) > 0, 1)
              for r in rows if r.total.flops and (r.computation, r.name) in trips) + \
        tuple(RematHinge(r.name, r.computation, "add", r.executions * sums[(r.computation, r.name)],
                         counted(r) > 0, 1)
              for r in rows if (r.computation, r.name) in sums) + \
        _form_hinges(rows, forms, counted)


def _form_hinges(rows: Sequence[Row], forms: Mapping[Key, int | None],
                 counted: Callable[[Row], int]) -> tuple[RematHinge, ...]:
    """A packed layer's weight gradient the twin may write in its other form
    (hloflops.remat.weight_gradient_forms): its FLOPs per execution times the row's executions, the
    low end (negative) or the high end; a packing of it (None) with its own FLOPs, where not remat."""
    found = []
    for r in rows:
        per = forms.get((r.computation, r.name), 0)
        if per is None and r.total.flops and not counted(r):
            found.append(RematHinge(r.name, r.computation, r.opcode, r.total.flops, False, twin_form=1))
        elif per:
            found.append(RematHinge(r.name, r.computation, r.opcode, abs(per) * r.executions, False,
                                    twin_form=1 if per > 0 else -1))
    return tuple(found)
