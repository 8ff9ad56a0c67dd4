"""An elementwise op XLA could not move below a broadcast because a checkpoint's optimization
barrier stood between them runs on the broadcast's whole result, where the program without remat
runs it on the broadcast's operand: the FLOPs beyond the operand's are remat
(hloflops.remat.unsunk_broadcasts, `Row.remat_part`). Handwritten: no jax needed; the last test
replays the generated draws of the `more` family it was found on (a bf16 conv net checkpointed
as a whole: the mean pool's cotangent widened to f32 after its broadcast, in four fusions)."""

from __future__ import annotations

import pytest

import hloparse
from hloflops.accounting import account, remat_by_scope
from tests.remat.judge import by_opcode


def _meta(name: str) -> str:
    return f'metadata={{op_name="{name}"}}'


BACKWARD = "jit(loss)/transpose(jvp(ConvNet))/broadcast_in_dim"
GRADIENT = "jit(loss)/transpose(jvp(ConvNet))/stack/checkpoint/Conv_0/mul"
RECOMPUTE = "jit(loss)/transpose(jvp(ConvNet))/stack/checkpoint/rematted_computation/Conv_0/mul"


def _module(widen: str = "convert(b)", operand: str = "bf16[2,128]{1,0}", dims: str = "{0,3}") -> str:
    return f"""
HloModule unsunk, is_scheduled=true

widen_fusion {{
  p = {operand} parameter(0)
  b = bf16[2,4,4,128]{{3,2,1,0}} broadcast(p), dimensions={dims}, {_meta(BACKWARD)}
  ROOT w = f32[2,4,4,128]{{3,2,1,0}} {widen}
}}

ENTRY main {{
  x = f32[2,4,4,128]{{3,2,1,0}} parameter(0)
  g = {operand} parameter(1)
  t = f32[2,4,4,128]{{3,2,1,0}} multiply(x, x), {_meta("jit(loss)/jvp(ConvNet)/stack/Conv_0/mul")}
  rt = f32[2,4,4,128]{{3,2,1,0}} multiply(x, x), {_meta(RECOMPUTE)}
  c = f32[2,4,4,128]{{3,2,1,0}} fusion(g), kind=kLoop, calls=widen_fusion
  d = f32[2,4,4,128]{{3,2,1,0}} multiply(c, rt), {_meta(GRADIENT)}
  ROOT out = (f32[2,4,4,128]{{3,2,1,0}}, f32[2,4,4,128]{{3,2,1,0}}) tuple(t, d)
}}
"""


WHOLE, SMALL = 2 * 4 * 4 * 128, 2 * 128


def test_a_widen_left_above_a_broadcast_is_remat_beyond_its_operand():
    acc = account(hloparse.parse(_module()), xla={"flops": 0.0})
    rows = {r.name: r for r in acc.rows}
    assert rows["rt"].remat and rows["rt"].remat_flops == WHOLE
    w = rows["w"]
    assert w.remat and w.remat_part == (WHOLE - SMALL, WHOLE) and w.remat_flops == WHOLE - SMALL
    assert acc.remat_flops == WHOLE + (WHOLE - SMALL)  # the recompute's product and the widen's share
    assert by_opcode(acc, remat=True) == {"multiply": WHOLE, "convert": WHOLE - SMALL}
    assert sum(remat for _, remat in remat_by_scope(acc).values()) == acc.remat_flops
    assert acc.remat_flops_bounds == (acc.remat_flops, acc.remat_flops)


def test_a_scalar_broadcast_is_left_alone():
    # A scalar's broadcast: the widen runs on every element in the program without remat too.
    acc = account(hloparse.parse(_module(operand="bf16[]", dims="{}")), xla={"flops": 0.0})
    rows = {r.name: r for r in acc.rows}
    assert not rows["w"].remat and rows["w"].remat_part is None
    assert acc.remat_flops == WHOLE


def test_an_op_reading_another_full_size_value_sinks_nothing():
    # `add(broadcast(p), q)` of a full-size q: no broadcast can move below it, in either program.
    text = _module().replace("  ROOT w = f32[2,4,4,128]{3,2,1,0} convert(b)",
                             "  q = bf16[2,4,4,128]{3,2,1,0} parameter(1)\n"
                             "  s = bf16[2,4,4,128]{3,2,1,0} add(b, q)\n"
                             "  ROOT w = f32[2,4,4,128]{3,2,1,0} convert(s)")
    text = text.replace("fusion(g), kind", "fusion(g, x2), kind").replace(
        "  g = bf16", "  x2 = bf16[2,4,4,128]{3,2,1,0} parameter(2)\n  g = bf16")
    acc = account(hloparse.parse(text), xla={"flops": 0.0})
    rows = {r.name: r for r in acc.rows}
    assert "s" in rows and all(rows[n].remat_part is None and not rows[n].remat for n in ("s", "w"))
    assert acc.remat_flops == WHOLE


def test_before_optimization_nothing_is_partial():
    # jax's lowered text broadcasts before it converts everywhere: only after XLA's simplifier is a
    # broadcast left above an op the sign of a barrier.
    text = _module().replace(", is_scheduled=true", "")
    acc = account(hloparse.parse(text), xla={"flops": 0.0})
    assert all(r.remat_part is None for r in acc.rows)


@pytest.mark.parametrize("seed", [30])
def test_a_conv_net_checkpointed_whole_splits_exactly_after_optimization(seed):
    # The `more` draw it was found on: a bf16 conv net under `nn.remat` per block in a Python loop,
    # the mean pool's cotangent widened after its broadcast in four fusions (convert -261,120 before).
    pytest.importorskip("jax")
    pytest.importorskip("flax")
    from tests.remat.generator import check, draw

    outcome = check(draw(seed, "more"))
    assert outcome.all_ok("after"), outcome.describe()


def test_reports_split_a_partial_row():
    from hloflops.report.folded import folded_stacks
    from hloflops.report.report import Report

    report = Report(account(hloparse.parse(_module()), xla={"flops": 0.0}))
    lines = dict(line.rsplit(" ", 1) for line in folded_stacks(report).splitlines())
    widen = [(stack, int(v)) for stack, v in lines.items() if ";convert" in stack]
    assert sorted(v for _, v in widen) == [SMALL, WHOLE - SMALL]
    assert any(stack.endswith("[remat]") and v == WHOLE - SMALL for stack, v in widen)
    assert report.remat_flops == WHOLE + (WHOLE - SMALL)
    assert {g.key: g.remat_flops for g in report.by_opcode()}["convert"] == WHOLE - SMALL


def test_row_records_carry_the_remat_share():
    """The JSON rows and the CSV say how many of a row's FLOPs are remat, not only that it is:
    a reader summing `flops` where `remat` would count the widen's model share as recompute."""
    import csv
    import io

    from hloflops.cli import _csv_text
    from hloflops.report.report import Report

    report = Report(account(hloparse.parse(_module()), xla={"flops": 0.0}))
    records = {r["name"]: r for r in report.to_records()}
    assert records["w"]["remat"] and records["w"]["remat_flops"] == WHOLE - SMALL
    assert records["rt"]["remat_flops"] == records["rt"]["flops"] == WHOLE
    assert records["t"]["remat_flops"] == 0
    assert sum(r["remat_flops"] for r in records.values()) == report.remat_flops
    assert [r["remat_flops"] for r in report.to_dict(rows=True)["rows"] if r["name"] == "w"] == [WHOLE - SMALL]
    rows = {r["name"]: r for r in csv.DictReader(io.StringIO(_csv_text(report, None, None)))}
    assert int(rows["w"]["remat_flops"]) == WHOLE - SMALL
