"""A recompute the forward computes only on TPU's packed layout of a convolution's output is a
stand-in, not the linearization's own work (analysis/hloflops/remat/packed_layout_recomputes.py).

Unseen TPU draw utpu 187 (linen scan conv, save_only_these_names): the forward computes relu's
`max(x, 0)` on the packed convolution output `[32, 32, 5, 256]`, the backward's recompute of it on
the saved pre-activation `[4, 32, 32, 256]`; by signature the forward computes nothing of that
shape, so the recompute and its narrow were sure model FLOPs, while the program without remat read
relu's output stored (maximum +3,145,728: the truth 14,155,776 over the high end 10,223,616). Here
the shapes are small: packed `[4, 4, 3, 8]` (H 4, f 4 rows of w 2 and a halo column, C 8) against
`[2, 4, 4, 8]` (N 2, W 4: f w = N W)."""

from __future__ import annotations

import hloparse
from hloflops.remat.by_platform import Decided
from hloflops.remat.packed_layout_recomputes import packed_layout_recomputes
from hloflops.remat.sites import SiteOp

_FORWARD = "jit(loss)/jvp(ConvNet)/stack/while/body/closed_call/blocks/block/jit(relu)/max"
_RECOMPUTE = ("jit(loss)/transpose(jvp(ConvNet))/stack/while/body/closed_call/checkpoint/rematted_computation/"
              "blocks/block/jit(relu)/max")

_SHAPES = "(f32[@P]{3,2,1,0:T(8,128)}, f32[1,2,4,4,8]{4,3,2,1,0:T(8,128)})"
_LAYOUT = "{" + _SHAPES + "->" + _SHAPES + "}"

HLO = """HloModule packed, is_scheduled=true, entry_computation_layout=@L

ENTRY main {
  x = f32[@P] parameter(0)
  s = f32[1,2,4,4,8] parameter(1)
  z = f32[] constant(0)
  zp = f32[@P] broadcast(z), dimensions={}
  zs = f32[1,2,4,4,8] broadcast(z), dimensions={}
  f = f32[@P] maximum(x, zp), metadata={op_name="@F"}, backend_config={"scoped_memory_configs":[]}
  r = f32[1,2,4,4,8] maximum(s, zs), metadata={op_name="@R"}
  ROOT out = (f32[@P], f32[1,2,4,4,8]) tuple(f, r)
}
"""


def _stand_ins(forward_shape: str, remat: bool = False) -> set[str]:
    text = HLO.replace("@L", _LAYOUT).replace("@P", forward_shape)
    module = hloparse.parse(text.replace("@F", _FORWARD).replace("@R", _RECOMPUTE))
    entry = module.entry
    ops = [SiteOp((entry.name, inst.name, 0), inst, name, name == _RECOMPUTE, name == _RECOMPUTE, i, None, None,
                  entry.name)
           for i, (inst, name) in enumerate((entry.by_name[n], op) for n, op in (("f", _FORWARD), ("r", _RECOMPUTE)))]
    keys = {op.inst.name: op.key for op in ops}
    decided = Decided({keys["r"]} if remat else set(), {keys["r"]}, set(), set())
    packed_layout_recomputes(module, ops, decided)
    return {key[1] for key in decided.stand_ins}


def test_a_recompute_of_an_op_the_forward_runs_packed_is_a_stand_in():
    assert _stand_ins("4,4,3,8") == {"r"}


def test_one_the_forward_runs_in_its_own_layout_is_left_to_the_other_rules():
    assert _stand_ins("2,4,4,8") == set()


def test_a_shape_that_is_no_packing_of_it_is_not_a_sign():
    # [4, 4, 3, 8] of [2, 4, 4, 8] holds f w = 8 = N W; [4, 3, 3, 8] holds 6, no packing of it
    assert _stand_ins("4,3,3,8") == set()


def test_a_recompute_already_counted_stays_as_it_is():
    assert _stand_ins("4,4,3,8", remat=True) == set()
