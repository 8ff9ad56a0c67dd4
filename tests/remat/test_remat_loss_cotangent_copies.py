"""The loss's cotangent that TPU's fusion hands out of the loss's own fusion, which the program
without remat may copy into each reader (analysis/hloflops/remat/loss_cotangent_copies.py).
TPU draw 17 (whole_model attn, save_only_these_names, fsdp): the loss fusion computes `y * c`
beside `sum(y * y)` and hands it to three gradient fusions; the program without remat hands out
`y` and copies the multiply into all three (multiply truth 512 below this program's split). TPU
draw 42 (eqx_list, tp) has the same structure here, and its program without remat merges the
cotangent alike: so the copies are a range hinge. The unit tests use small hand-written fusions;
the replays are skipped without libtpu, as tests/remat/test_remat_tpu_generated.py."""

from __future__ import annotations

import pytest

import hloparse
from hloflops.remat.loss_cotangent_copies import loss_cotangent_copies, narrowed_cotangent_copies

_LOSS = '"jit(loss)/jvp()/reduce_sum"'
_COTANGENT = '"jit(loss)/transpose(jvp())/mul;jit(loss)/transpose(jvp())/broadcast_in_dim"'


def _module(with_loss: bool, root_reads: bool = False) -> str:
    loss = f"""  %sq = f32[2,8]{{1,0}} multiply(%y, %y), metadata={{op_name="jit(loss)/jvp()/square"}}
  %zero = f32[] constant(0)
  %sum = f32[] reduce(%sq, %zero), dimensions={{0,1}}, to_apply=%add, metadata={{op_name={_LOSS}}}
""" if with_loss else ""
    out = "(f32[2,8], f32[])" if with_loss else "(f32[2,8], f32[2,8])"
    second = "%sum" if with_loss else "%y"
    tail = "%g" if root_reads else "%r2"
    return f"""HloModule m, is_scheduled=true

%add (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}}

%loss_fusion (p0: f32[2,8], p1: f32[2,8]) -> {out} {{
  %p0 = f32[2,8]{{1,0}} parameter(0)
  %p1 = f32[2,8]{{1,0}} parameter(1)
  %y = f32[2,8]{{1,0}} add(%p0, %p1), metadata={{op_name="jit(loss)/jvp()/add"}}
{loss}  %c = f32[] constant(0.0625)
  %cb = f32[2,8]{{1,0}} broadcast(%c), dimensions={{}}, metadata={{op_name={_COTANGENT}}}
  %g = f32[2,8]{{1,0}} multiply(%y, %cb), metadata={{op_name={_COTANGENT}}}
  ROOT %t = {out} tuple(%g, {second})
}}

%reader (q: f32[2,8]) -> f32[2,8] {{
  %q = f32[2,8]{{1,0}} parameter(0)
  ROOT %n = f32[2,8]{{1,0}} negate(%q), metadata={{op_name="jit(loss)/transpose(jvp())/dot_general"}}
}}

ENTRY %main (x0: f32[2,8], x1: f32[2,8]) -> f32[2,8] {{
  %x0 = f32[2,8]{{1,0}} parameter(0)
  %x1 = f32[2,8]{{1,0}} parameter(1)
  %f = {out} fusion(%x0, %x1), kind=kLoop, calls=%loss_fusion
  %g = f32[2,8]{{1,0}} get-tuple-element(%f), index=0
  %r0 = f32[2,8]{{1,0}} fusion(%g), kind=kLoop, calls=%reader
  %r1 = f32[2,8]{{1,0}} negate(%g)
  %r2 = f32[2,8]{{1,0}} add(%r0, %r1)
  ROOT %r3 = f32[2,8]{{1,0}} add(%r2, {tail})
}}
"""


def test_cotangent_handed_out_beside_the_loss_is_copied_per_reader_by_the_twin():
    # Two readers of the hand-out (a fusion and an unfused negate): the twin runs one copy more.
    found = loss_cotangent_copies(hloparse.parse(_module(with_loss=True)))
    assert found == {("loss_fusion", "g"): 1}, found


def test_cotangent_handed_out_of_a_fusion_without_the_loss_is_not():
    # A backward fusion of its own (TPU draw 41): the twin hands it out alike.
    assert loss_cotangent_copies(hloparse.parse(_module(with_loss=False))) == {}


def test_cotangent_read_by_the_root_is_stored_by_both():
    # An output of the computation: both programs store it (TPU draws 40, 80, 83).
    assert loss_cotangent_copies(hloparse.parse(_module(with_loss=True, root_reads=True))) == {}


@pytest.mark.parametrize("seed", [17, 42])
def test_tpu_draws_where_the_twin_copies_the_cotangent_or_not_are_in_range(seed, monkeypatch):
    # 17: the twin copies the cotangent into its three readers (multiply +512, inside the range);
    # 42: the twin merges it into its loss fusion alike and runs it once, so a sure share of the
    # copies (a first version of the rule) broke this exact draw: multiply -768, out of range.
    pytest.importorskip("jax")
    pytest.importorskip("libtpu", reason="libtpu is not installed: no TPU compiler to build the programs with")
    from tests.remat.generator import check, draw
    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    outcome = check(draw(seed, "tpu"))
    assert outcome.in_bounds("after"), outcome.describe()
    if seed == 42:
        assert outcome.all_ok("after"), outcome.describe()
    assert outcome.all_ok("before"), outcome.describe()


def _narrowed_module(readers: int) -> str:
    """The cotangent in a backward fusion of its own that narrows it to bf16 (TPU draw 216's form)."""
    reads = "\n".join(f'  %r{i} = bf16[2,8]{{1,0}} negate(%f)' for i in range(readers))
    ends = ", ".join(f"%r{i}" for i in range(readers))
    return f"""HloModule m, is_scheduled=true

%cotangent_fusion (p0: f32[2,8], p1: f32[2,8]) -> bf16[2,8] {{
  %p0 = f32[2,8]{{1,0}} parameter(0)
  %p1 = f32[2,8]{{1,0}} parameter(1)
  %y = f32[2,8]{{1,0}} add(%p0, %p1), metadata={{op_name="jit(loss)/jvp()/add"}}
  %c = f32[] constant(0.0625)
  %cb = f32[2,8]{{1,0}} broadcast(%c), dimensions={{}}, metadata={{op_name={_COTANGENT}}}
  %g = f32[2,8]{{1,0}} multiply(%y, %cb), metadata={{op_name={_COTANGENT}}}
  ROOT %n = bf16[2,8]{{1,0}} convert(%g)
}}

ENTRY %main (x0: f32[2,8], x1: f32[2,8]) -> (bf16[2,8]) {{
  %x0 = f32[2,8]{{1,0}} parameter(0)
  %x1 = f32[2,8]{{1,0}} parameter(1)
  %f = bf16[2,8]{{1,0}} fusion(%x0, %x1), kind=kLoop, calls=%cotangent_fusion
{reads}
  ROOT %t = (bf16[2,8]) tuple({ends})
}}
"""


def test_cotangent_narrowed_for_two_readers_hinges_its_chain_and_narrow():
    # TPU draws 88, 140, 204, 216: the twin copies the f32 chain (`y`'s add and the multiply) into
    # both readers and runs no narrow; nothing here rules out its narrowing once alike (draw 94).
    copies, narrows = narrowed_cotangent_copies(hloparse.parse(_narrowed_module(2)))
    assert copies == {("cotangent_fusion", "y"): 1, ("cotangent_fusion", "g"): 1}, copies
    assert narrows == {("cotangent_fusion", "n")}, narrows


def test_cotangent_narrowed_for_one_reader_is_no_hinge():
    # One reader (TPU draw 94): the twin runs it once, narrow and all, like this program.
    assert narrowed_cotangent_copies(hloparse.parse(_narrowed_module(1))) == ({}, frozenset())
