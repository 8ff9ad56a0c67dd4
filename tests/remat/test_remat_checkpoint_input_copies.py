"""A cheap forward value a checkpoint reads as its input, stored once because the checkpoint's
barrier forbids duplicating it, which the program without remat may copy into each reader
(analysis/hloflops/remat/checkpoint_input_copies.py). TPU draw htpu 101 (linen_loop encdec,
save_only_these_names): the encoder's final layer norm is one fusion here, read by every decoder
block's cross-attention projections, their recomputes and their weights' gradients; the program
without remat copies it into its twelve readers (add, subtract, two multiplies: 720,896 FLOPs below
this program, the truth under the range's low end before). The unit tests use small hand-written
fusions; the replay is skipped without libtpu, as tests/remat/test_remat_tpu_generated.py."""

from __future__ import annotations

import pytest

import hloparse
from hloflops.remat.checkpoint_input_copies import checkpoint_input_copies

_FORWARD = '"jit(loss)/jvp(EncoderDecoder)/LayerNorm_0/add"'
_PLAIN = '"jit(loss)/jvp(EncoderDecoder)/decoder/block_0/cross_attn/key/dot_general"'
_GRADIENT = '"jit(loss)/transpose(jvp(EncoderDecoder))/decoder/checkpoint/block_0/cross_attn/key/dot_general"'
_RECOMPUTE = ('"jit(loss)/transpose(jvp(EncoderDecoder))/decoder/checkpoint/rematted_computation/'
              'block_0/cross_attn/key/dot_general"')


def _module(recompute: bool = True, expensive: bool = False, collective: bool = False, root: bool = False) -> str:
    scale = f"""  %s = f32[2,8]{{1,0}} rsqrt(%p1), metadata={{op_name={_FORWARD}}}
""" if expensive else f"""  %s = f32[2,8]{{1,0}} multiply(%p1, %p1), metadata={{op_name={_FORWARD}}}
"""
    first = _RECOMPUTE if recompute else _GRADIENT
    gathered = """  %ag = f32[2,16]{1,0} all-gather(%v), channel_id=1, replica_groups={{0,1}}, dimensions={1}
""" if collective else ""
    tail = "%v" if root else "%r3"
    return f"""HloModule m, is_scheduled=true

%norm (p0: f32[2,8], p1: f32[2,8]) -> f32[2,8] {{
  %p0 = f32[2,8]{{1,0}} parameter(0)
  %p1 = f32[2,8]{{1,0}} parameter(1)
  %d = f32[2,8]{{1,0}} subtract(%p0, %p1), metadata={{op_name={_FORWARD}}}
{scale}  ROOT %y = f32[2,8]{{1,0}} add(%d, %s), metadata={{op_name={_FORWARD}}}
}}

%reader (q: f32[2,8]) -> f32[2,8] {{
  %q = f32[2,8]{{1,0}} parameter(0)
  ROOT %n = f32[2,8]{{1,0}} negate(%q)
}}

ENTRY %main (x0: f32[2,8], x1: f32[2,8]) -> f32[2,8] {{
  %x0 = f32[2,8]{{1,0}} parameter(0)
  %x1 = f32[2,8]{{1,0}} parameter(1)
  %v = f32[2,8]{{1,0}} fusion(%x0, %x1), kind=kLoop, calls=%norm, metadata={{op_name={_FORWARD}}}
  %r0 = f32[2,8]{{1,0}} fusion(%v), kind=kLoop, calls=%reader, metadata={{op_name={first}}}
  %r1 = f32[2,8]{{1,0}} fusion(%v), kind=kLoop, calls=%reader, metadata={{op_name={_PLAIN}}}
  %vb = f32[2,8]{{1,0}} bitcast(%v)
  %r2 = f32[2,8]{{1,0}} fusion(%vb), kind=kLoop, calls=%reader, metadata={{op_name={_GRADIENT}}}
{gathered}  %r3 = f32[2,8]{{1,0}} add(%r0, %r1)
  %r4 = f32[2,8]{{1,0}} add(%r3, %r2)
  ROOT %r5 = f32[2,8]{{1,0}} add(%r4, {tail})
}}
"""


def test_checkpoint_input_stored_once_is_copied_per_reader_by_the_twin():
    # A recompute reader and two others (one through a bitcast): the twin may copy the chain into
    # both others, one more run than this program's stored copy, for each cheap op of the chain.
    found = checkpoint_input_copies(hloparse.parse(_module()))
    assert found == {("norm", "d"): 1, ("norm", "s"): 1, ("norm", "y"): 1}, found


def test_value_without_a_recompute_reader_is_not():
    # No checkpoint reads it: nothing forbade copying it here, the twin fuses it alike.
    assert checkpoint_input_copies(hloparse.parse(_module(recompute=False))) == {}


def test_chain_with_an_expensive_op_is_never_copied():
    # XLA duplicates no expensive op (rsqrt) into a consumer, with remat or without.
    assert checkpoint_input_copies(hloparse.parse(_module(expensive=True))) == {}


def test_a_reader_that_cannot_fuse_keeps_one_stored_copy_in_the_twin():
    # An all-gather reads it too: the twin stores it for the collective and copies it into the two
    # fusions, two more runs than here (ntpu 125's tp mesh).
    found = checkpoint_input_copies(hloparse.parse(_module(collective=True)))
    assert found == {("norm", "d"): 2, ("norm", "s"): 2, ("norm", "y"): 2}, found


def test_value_read_by_the_root_is_stored_by_both():
    assert checkpoint_input_copies(hloparse.parse(_module(root=True))) == {}


@pytest.mark.parametrize("seed", [101])
def test_tpu_draw_whose_twin_copies_the_encoder_norm_is_in_range(seed, monkeypatch):
    # Before the rule the truth (114,609,152) lay 409,600 under the low end (115,018,752).
    pytest.importorskip("jax")
    pytest.importorskip("libtpu", reason="libtpu is not installed: no TPU compiler to build the programs with")
    from tests.remat.generator import check, draw
    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    outcome = check(draw(seed, "tpu"))
    assert outcome.in_bounds("after"), outcome.describe()
    assert outcome.all_ok("before"), outcome.describe()
