"""The forward's copy of a cheap chain nested two fusions deep: the projection's fusion is itself
fused into the fusion of the matmul reading its output (hloflops.remat.gradient_reader_copies).
wtpu 313 (scan attention, tp, nothing_saveable, one layer): the query's and key's projections sit in
the attention scores' fusion and the value's in the probabilities' product's, each with a nested copy
of layer norm's `(x - mean) * rstd`; the recompute stores its own copy narrowed for the weights'
gradients. The twin copies the chain into those three gradients too (subtract -3,584 and multiply
-6,784 per-opcode truth), and the low end stood 17,920 above the truth while only copies directly
under a matmul fusion were seen. held-out vtpu 282 (scan attention, tp, no policy) the same."""

from __future__ import annotations

import hloparse
from hloflops.remat.gradient_reader_copies import gradient_reader_copies
from tests.remat.test_remat_gradient_reader_copies import _FORWARD, _module

# The projection's fusion called from the scores' matmul fusion, not from the entry.
_SCORES = f"""
%scores (s0: f32[2,8], s1: f32[2,8], s2: f32[8,4]) -> f32[2,2] {{
  %s0 = f32[2,8]{{1,0}} parameter(0)
  %s1 = f32[2,8]{{1,0}} parameter(1)
  %s2 = f32[8,4]{{1,0}} parameter(2)
  %q = f32[2,4]{{1,0}} fusion(%s0, %s1, %s2), kind=kOutput, calls=%proj, metadata={{op_name="{_FORWARD}/dot_general"}}
  ROOT %qk = f32[2,2]{{1,0}} dot(%q, %q), lhs_contracting_dims={{1}}, rhs_contracting_dims={{1}},
    metadata={{op_name="{_FORWARD}/dot_general"}}
}}
"""


def _nested(**flags: bool) -> str:
    text = _module(**flags)
    text = text.replace("\n%stored ", _SCORES + "\n%stored ", 1)
    return text.replace("%y = f32[2,4]{1,0} fusion(%x0, %x1, %x2), kind=kOutput, calls=%proj",
                        "%y = f32[2,2]{1,0} fusion(%x0, %x1, %x2), kind=kOutput, calls=%scores")


def test_a_forward_copy_nested_in_a_projection_inside_another_matmuls_fusion_counts_too():
    text = _nested()
    assert "calls=%scores" in text and "%qk" in text
    assert gradient_reader_copies(hloparse.parse(text)) == {("norm", "d"): 1, ("norm", "s"): 1}


def test_nested_the_signs_still_hold():
    # only the recompute's matmul reads the stored value, or the stored chain is the forward's own
    assert gradient_reader_copies(hloparse.parse(_nested(gradient=False))) == {}
    assert gradient_reader_copies(hloparse.parse(_nested(recompute=False))) == {}
    assert gradient_reader_copies(hloparse.parse(_nested(expensive=True))) == {}
