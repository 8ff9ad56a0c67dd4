"""The compare behind a mask TPU packed into bits between two fusions
(analysis/hloflops/remat/unpacked_masks.py). A backward op reads relu's mask through an unpacking
convert that carries jax's name for the compare; hloflops.remat.backward_loop_copies asks which
recomputed value is the residual, and it is the compare in the packing fusion: the program without
remat computes that compare once to save the mask (held-out TPU 109: the recompute's `gt` counted
remat, compare +401,408, before; model FLOPs, the saving copy, after). The module is
tests/remat/test_remat_packed_masks.py's loop: a packing fusion and an unpacking reader."""

from __future__ import annotations

import hloparse
from hloflops.remat.sites import SiteOp, one_call_site
from hloflops.remat.unpacked_masks import packed_compare
from tests.remat.test_remat_packed_masks import _RECOMPUTE, _T, HLO


def _ops():
    module = hloparse.parse(HLO.replace("@T", _T).replace("@NAME", _RECOMPUTE))
    ops = [SiteOp((comp, inst.name, 0), inst, inst.op_name, inst.name == "gt", inst.name == "gt", i, None, None, "body")
           for comp in ("pack", "unpack") for i, inst in enumerate(module.by_name[comp].instructions)]
    return module, {op.key: op for op in ops}


def test_the_unpacking_convert_reads_back_the_packed_compare():
    module, by_key = _ops()
    found = packed_compare(module, one_call_site(module), by_key, by_key[("unpack", "m", 0)])
    assert found is not None and found.key == ("pack", "gt", 0), found


def test_any_other_op_reads_back_nothing():
    module, by_key = _ops()
    callers = one_call_site(module)
    for name in ("a", "sel", "pb"):
        assert packed_compare(module, callers, by_key, by_key[("unpack", name, 0)]) is None


def test_a_word_packed_in_eight_bits_is_widened_back_before_the_and():
    # A short dimension packs into u8 (ntpu 127): narrowed after the shift, widened after the broadcast.
    text = HLO.replace("@T", _T).replace("@NAME", _RECOMPUTE)
    text = text.replace("lhs = u32[]", "lhs = u8[]").replace("rhs = u32[]", "rhs = u8[]") \
        .replace("ROOT o = u32[]", "ROOT o = u8[]")
    text = text.replace("c0 = u32[] constant(0)", "s8 = u8[2,8,4]{2,1,0:T(8,128)} convert(s)\n  c0 = u8[] constant(0)")
    text = text.replace("reduce(s, c0)", "reduce(s8, c0)").replace("u32[8,4]", "u8[8,4]")
    text = text.replace("pb = u32[2,8,4]{2,1,0:T(8,128)} broadcast(p), dimensions={1,2}",
                        "pn = u8[2,8,4]{2,1,0:T(8,128)} broadcast(p), dimensions={1,2}\n"
                        "  pb = u32[2,8,4]{2,1,0:T(8,128)} convert(pn)")
    module = hloparse.parse(text)
    ops = [SiteOp((comp, inst.name, 0), inst, inst.op_name, inst.name == "gt", inst.name == "gt", i, None, None, "body")
           for comp in ("pack", "unpack") for i, inst in enumerate(module.by_name[comp].instructions)]
    by_key = {op.key: op for op in ops}
    assert "convert(pn)" in text and "reduce(s8, c0)" in text
    found = packed_compare(module, one_call_site(module), by_key, by_key[("unpack", "m", 0)])
    assert found is not None and found.key == ("pack", "gt", 0), found
