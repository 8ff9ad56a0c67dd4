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
