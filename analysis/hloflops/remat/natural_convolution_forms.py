"""A 3x3 convolution TPU runs natural where the same program packs that geometry: the program
without remat may pack it, more FLOPs (after optimization, TPU only; hloflops.remat.pairing adds
`natural_convolution_forms` to the twin's forms beside hloflops.remat.weight_gradient_forms).

TPU runs a 3x3 convolution over `[N, H, W, C]` in one of two forms. Packed (window 3x3,
`pad=1_1x0_0`, `0b1f_01io->0b1f`, output `[H, f, w, C]` with `f w >= N W`: the W taps laid out
as shifted pieces along a minor dimension, hloflops.remat.packed_conv_inputs) counts the W halo
and the padding of W to `f w` as taps; natural (`b01f_01io->b01f`, `pad=1_1x1_1`; a weight
gradient `f01b_i01o->01bf` with window `HxW`) counts only the in-bounds ones. The form is a layout
choice: where a value must keep the default layout, XLA runs the convolutions producing and reading
it natural and packs the rest. Host offload is such a pin: a forward activation copied to host
memory (`S(5)`) and read back for the backward stays `[N, H, W, C]`, so the convolution writing it,
the one reading its relu, and the weight gradients reading it back run natural, while the program
without remat, which offloads nothing, packs every one of them (TPU vtpu 250, 259, 296: 2 to 4
forward convolutions and their weight gradients natural here, packed there; truths -966M, -69M,
-286M, the program with remat running fewer convolution FLOPs than its twin). No other TPU draw
of 0-299 runs a forward 3x3 convolution natural beside a packed one of the same geometry; where
every convolution is natural (small images) or every one packed, both programs agree.

So a natural forward (or recompute) convolution, or the natural weight gradient of a layer whose
forward here is natural, in a module that packs a forward convolution of the same geometry (its
`H`, `f w >= N W`), is a range hinge: the twin may run it packed, the low end drops by the packed
count for its channels (the per-channel count of the largest such packed convolution here) over
its own, and by the packing of its input such a twin adds (30 FLOPs per `H f w Cin`, the rate of
hloflops.remat.weight_gradient_forms: the twins' forward packings run 6-10 per element of
`[H, f, w + 2, Cin]`). Never a share of the split: nothing here says the twin packs (its own pins
may hold). A weight gradient whose layer's forward is packed here is
hloflops.remat.weight_gradient_forms's; data gradients are left (natural ones in vtpu 250, 259
are natural in the twin as well).
"""

from __future__ import annotations

from typing import Mapping

from hloflops.cost.tpu import is_tpu_module
from hloflops.cost.windows import convolution_flops
from hloflops.remat.weight_gradient_forms import PACKED_FORWARD, PACKING_RATE, layer_path, operand_shapes, same_layer
from hloparse.ir import Instruction, Module

Key = tuple[str, str]

_NATURAL_FORWARD = "b01f_01io->b01f"
_NATURAL_WGRAD = "f01b_i01o->01bf"


def natural_convolution_forms(module: Module) -> Mapping[Key, int]:
    """(computation, op) -> minus the FLOPs per execution the twin may run more where it packs this
    natural convolution (module docstring): low-end hinges (`RematHinge.twin_form` -1)."""
    out: dict[Key, int] = {}
    if not is_tpu_module(module):
        return out
    packed = _packed_forwards(module)
    if not packed:
        return out
    packed_layers = {path for path, *_ in packed}
    natural_layers = set()
    candidates = []
    for comp, inst in module.instructions():
        if inst.opcode != "convolution" or len(inst.operands) != 2:
            continue
        labels = inst.attributes.get("dim_labels", "")
        shapes = operand_shapes(comp, inst)
        if shapes is None or inst.conv_dim_labels is None:
            continue
        lhs, rhs = shapes
        if labels == _NATURAL_FORWARD and _forward(inst) and _padded_by_one(inst, 3) \
                and rhs.dims[:2] == (3, 3) and len(lhs.dims) == 4:
            natural_layers.add(layer_path(inst.op_name))
            candidates.append((comp, inst, lhs.dims, rhs.dims[2], rhs.dims[3]))
        elif labels == _NATURAL_WGRAD and "transpose(" in inst.op_name and _padded_by_one(inst, None) \
                and inst.shape.dims[:2] == (3, 3) and len(lhs.dims) == 4:
            path = layer_path(inst.op_name)
            if any(same_layer(path, layer) for layer in packed_layers):
                continue  # hloflops.remat.weight_gradient_forms's
            candidates.append((comp, inst, lhs.dims, inst.shape.dims[2], inst.shape.dims[3]))
    for comp, inst, (n, h, w, _), cin, cout in candidates:
        if "transpose(" in inst.op_name and not any(same_layer(layer_path(inst.op_name), layer)
                                                    for layer in natural_layers):
            continue  # a weight gradient whose forward is not here natural: not this pin
        fitting = [(per, pieces) for _, per, (ph, f, pw) in packed for pieces in (ph * f * pw,)
                   if ph == h and n * w <= f * pw < 2 * n * w]
        if not fitting:
            continue
        per, pieces = max(fitting)
        own = convolution_flops(inst, *operand_shapes(comp, inst), inst.shape)
        twin = per * cin * cout
        if twin > own:
            out[(comp.name, inst.name)] = -(twin - own + PACKING_RATE * pieces * cin)
    return out


def _forward(inst: Instruction) -> bool:
    """A forward convolution or its recompute, not a gradient."""
    return "transpose(" not in inst.op_name or "rematted_computation" in inst.op_name


def _padded_by_one(inst: Instruction, size: int | None) -> bool:
    """Two spatial window dims padded by one on both sides (of `size` taps, or wider than 3: a
    weight gradient's window spans the image)."""
    window = inst.window or ()
    return len(window) == 2 and all(
        wd.pad_low == 1 and wd.pad_high == 1 and wd.stride == 1 and not wd.reversal
        and (wd.size == size if size else wd.size > 3) for wd in window)


def _packed_forwards(module: Module) -> list[tuple[tuple[str, ...], int, tuple[int, int, int]]]:
    """(layer path, FLOPs per input-output channel pair, (H, f, w) of its output) of each packed
    3x3 forward convolution or recompute."""
    found = []
    for comp, inst in module.instructions():
        if inst.opcode != "convolution" or inst.attributes.get("dim_labels") != PACKED_FORWARD \
                or len(inst.operands) != 2 or not _forward(inst) or inst.conv_dim_labels is None:
            continue
        window = inst.window or ()
        if len(window) != 2 or any(wd.size != 3 or wd.reversal for wd in window) \
                or (window[1].pad_low, window[1].pad_high) != (0, 0):
            continue
        shapes = operand_shapes(comp, inst)
        if shapes is None or shapes[1].dims[:2] != (3, 3) or len(inst.shape.dims) != 4:
            continue
        cin, cout = shapes[1].dims[2], shapes[1].dims[3]
        flops = convolution_flops(inst, *shapes, inst.shape)
        h, f, w, _ = inst.shape.dims
        found.append((layer_path(inst.op_name), flops // (cin * cout), (h, f, w)))
    return found
