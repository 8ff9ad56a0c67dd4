"""TPU computes a bf16 program's elementwise ops in f32, widening each bf16 constant they read
inside every fusion that computes them: such a widen is part of the work of the ops reading it
there, not a value of its own. Where those ops are all recompute-named and left uncounted (TPU
draw 29, linen_remat_scan gelu: the recompute loop's stack-writing fusion copies the whole gelu
chain, whose multiplies no forward copy is left to pair with; the program without remat has the
same fusion), the widens of its constants were paired by value with the forward's widens of the
same constants and counted: 4 converts of `[8, 4, 128]` over 2 trips counted where the ops they feed
were not (convert +146,656 -> +113,888; hloflops.remat.type_corrections `widens_of_uncounted_ops`).
They now take their readers' answer: out of the count, unsure where those are."""

from __future__ import annotations

import pytest

import hloparse
from hloflops.remat import find_remat
from hloflops.remat.type_corrections import is_widen

_RECOMPUTE = "rematted_computation"


def _constant_widens_counted_above_uncounted_recomputes(text: str) -> list[tuple[str, str]]:
    module = hloparse.parse(text)
    index = find_remat(module)
    found = []
    for comp in module.computations:
        for inst in comp.instructions:
            if (comp.name, inst.name) not in index.remat or not is_widen(comp, inst.name):
                continue
            source = comp.by_name[inst.operands[0]]
            if source.opcode != "broadcast" or comp.by_name[source.operands[0]].opcode != "constant":
                continue
            readers = comp.users.get(inst.name, ())
            if readers and all((comp.name, r.name) not in index.remat
                               and _RECOMPUTE in str(r.attributes.get("metadata", "")) for r in readers):
                found.append((comp.name, inst.name))
    return found


def test_tpu_scan_recompute_widens_of_constants_take_their_uncounted_readers_answer(monkeypatch):
    pytest.importorskip("libtpu", reason="libtpu is not installed: no TPU compiler to build the programs with")
    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    from tests.programs.remat_forms import build
    from tests.remat.generator import draw
    from tests.remat.judge import module_text
    form = draw(29, "tpu")
    text = module_text(build(form).remat, "after")
    assert _constant_widens_counted_above_uncounted_recomputes(text) == []
