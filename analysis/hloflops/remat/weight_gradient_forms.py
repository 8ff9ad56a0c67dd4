"""A weight gradient of a packed convolution layer, which TPU writes packed or natural and the
program without remat may write the other way (after optimization, TPU only; hloflops.remat.pairing
calls `weight_gradient_forms`).

Where TPU packs a 3x3 convolution's forward (window 3x3, `pad=1_1x0_0`: the W taps laid out as
shifted pieces along a minor dimension, hloflops.remat.packed_conv_inputs), it writes the layer's
weight gradient in one of two forms. Packed: window `Hx(w+1)x1` over the three shifted pieces of
the activation (`dim_labels=0f1b2_0i1o2->02bf1`, out `[3,3,Cin,Cout,1]`), the W halo materialized
as zeros, so it counts the taps a packed forward counts, and needs a packing fusion of its own
(`-inf` pads, maximums, converts, masks). Natural: window `HxW` with `pad=1_1x1_1`
(`f01b_i01o->01bf`), counting only the in-bounds taps, `2 N Cin Cout (3H-2)(3W-2)`. Which form XLA
takes follows how it fused the bias gradient beside it (natural: the cotangent read from a
multi-output fusion with the bias gradient's reduce; packed: a packed cotangent), and it decides
that separately in the program without remat: TPU 36, 97, 121, 165 natural here and packed there,
73 packed here and natural there, while 11, 89, 67, 96, 166 show the same forms in both. Nothing
in this program tells which form the twin took, so each such weight gradient is a range hinge
(`RematIndex.twin_forms`), never a share of the split:
- natural here: the twin may run it packed, `packed - natural` more FLOPs (packed: the layer's
  forward convolution's count in this program, which the packed weight gradient equals): the low
  end drops by that and by the packing fusions such a twin adds for the activation: its three
  shifted pieces `[H, f, w+1, Cin, 3]` (H, f, w+1 as the layer's packed forward output here), two
  of them packed on their own first, each element at most 3 widens, 2 maximums and a narrow: 30
  FLOPs per `H f (w+1) Cin` (TPU 36, 97, 121: the twins' packings are 26-30 of them). Those are
  not in this program, so the hinge names the weight gradient alone.
- packed here: the twin may run it natural, the high end rises by `packed - natural` and by this
  program's own packing fusion(s) of the weight gradient's operands (which the twin would not run).
  `natural` is not in this program either: its lower bound from the packed operand
  `[H, f, w+1, Cin, 3]` (f rows of w columns each, N W = f w, each row from one image: N <= f) is
  `2 Cin Cout (3H-2) (3 f w - 2 f)`, so the rise is never short of the twin's saving.
"""

from __future__ import annotations

from typing import Mapping

from hloflops.cost.tpu import is_tpu_module
from hloflops.cost.windows import convolution_flops
from hloflops.remat.packed_conv_inputs import is_packing
from hloflops.remat.sites import one_call_site
from hloparse.ir import CallRole, Computation, Instruction, Module, Shape

Key = tuple[str, str]

_PACKED_WGRAD = "0f1b2_0i1o2->02bf1"
_NATURAL_WGRAD = "f01b_i01o->01bf"
PACKED_FORWARD = "0b1f_01io->0b1f"
# FLOPs per `H f (w+1) Cin` of the packing a packed weight gradient's activation needs: its three
# shifted pieces `[H, f, w+1, Cin, 3]`, and two of them packed on their own first (`[.., Cin, 1]`),
# each element at most 3 widens, 2 maximums and a narrow (module docstring).
PACKING_RATE = 6 * (3 + 1 + 1)


def weight_gradient_forms(module: Module) -> Mapping[Key, int | None]:
    """(computation, op) -> FLOPs per execution by which the twin's form of a packed layer's weight
    gradient may move the truth (module docstring): negative, the twin may run that many more (the
    low end); positive, that many fewer (the high end); None, a packing fusion op the twin may not
    run at all (its own FLOPs, the high end)."""
    out: dict[Key, int | None] = {}
    if not is_tpu_module(module):
        return out
    forwards = _packed_forwards(module)
    if not forwards:
        return out
    callers = one_call_site(module)
    for comp, inst in module.instructions():
        if inst.opcode != "convolution" or "transpose(" not in inst.op_name or len(inst.operands) != 2:
            continue
        labels = _labels(inst)
        if labels not in (_PACKED_WGRAD, _NATURAL_WGRAD):
            continue
        kernel = inst.shape.dims
        if kernel[:2] != (3, 3):
            continue
        # By its path alone: a tensor-parallel forward holds a shard of the kernel's features (TPU 121)
        layer = [(flops, pieces) for path, flops, pieces in forwards if same_layer(path, layer_path(inst.op_name))]
        if not layer:
            continue
        packed, pieces = max(layer)
        own = _flops(comp, inst)
        if own is None:
            continue
        if labels == _NATURAL_WGRAD and _is_natural(inst):
            if packed > own:  # and the twin's packing of the activation's pieces (module docstring)
                out[(comp.name, inst.name)] = -(packed - own + PACKING_RATE * pieces * kernel[2])
        elif labels == _PACKED_WGRAD and len(inst.window or ()) == 3:
            natural = _natural_floor(comp, inst)
            if natural is None or own <= natural:
                continue
            out[(comp.name, inst.name)] = own - natural
            for key in _own_packings(module, comp, inst, callers):
                out.setdefault(key, None)
    return out


def _labels(inst: Instruction) -> str:
    return inst.attributes.get("dim_labels", "")


def _is_natural(inst: Instruction) -> bool:
    """Window `HxW` padded by one on both sides of both spatial dims."""
    window = inst.window or ()
    return len(window) == 2 and all(w.pad_low == 1 and w.pad_high == 1 and w.size > 3 for w in window)


def layer_path(op_name: str) -> tuple[str, ...]:
    """The module path of an op_name without jax's transforms and checkpoint frames: the forward, its
    recompute and its gradients name a layer alike."""
    return tuple(part for part in op_name.split("/")
                 if "(" not in part and part != "checkpoint" and "remat" not in part)


def same_layer(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """One path ends the other (a scan's transpose repeats its loop's frame)."""
    n = min(len(a), len(b))
    return n >= 2 and a[-n:] == b[-n:]


def operand_shapes(comp: Computation, inst: Instruction) -> tuple[Shape, Shape] | None:
    lhs, rhs = (comp.by_name.get(name) for name in inst.operands)
    if lhs is None or rhs is None or lhs.shape.is_tuple or rhs.shape.is_tuple:
        return None
    return lhs.shape, rhs.shape


def _flops(comp: Computation, inst: Instruction) -> int | None:
    shapes = operand_shapes(comp, inst)
    if shapes is None or inst.conv_dim_labels is None:
        return None
    return convolution_flops(inst, shapes[0], shapes[1], inst.shape)


def _packed_forwards(module: Module) -> list[tuple[tuple[str, ...], int, int]]:
    """(layer path, FLOPs, H f (w+1) of its output) of each packed 3x3 forward
    convolution or recompute."""
    found = []
    for comp, inst in module.instructions():
        if inst.opcode != "convolution" or _labels(inst) != PACKED_FORWARD or len(inst.operands) != 2:
            continue
        window = inst.window or ()
        if len(window) != 2 or any(w.size != 3 or w.reversal for w in window) \
                or (window[1].pad_low, window[1].pad_high) != (0, 0):
            continue
        if "transpose(" in inst.op_name and "rematted_computation" not in inst.op_name:
            continue  # a data gradient, not the layer's forward
        shapes = operand_shapes(comp, inst)
        flops = _flops(comp, inst)
        if shapes is None or flops is None or shapes[1].dims[:2] != (3, 3):
            continue
        out = inst.shape.dims
        found.append((layer_path(inst.op_name), flops, out[0] * out[1] * out[2]))
    return found


def _natural_floor(comp: Computation, inst: Instruction) -> int | None:
    """The fewest FLOPs the natural form of a packed weight gradient can count (module docstring)."""
    shapes = operand_shapes(comp, inst)
    if shapes is None:
        return None
    lhs = shapes[0].dims
    window = inst.window or ()
    if len(lhs) != 5 or window[0].pad_low != 1 or window[0].pad_high != 1:
        return None
    h, f, w = window[0].size, lhs[1], lhs[2] - 1
    cin, cout = inst.shape.dims[2], inst.shape.dims[3]
    if w < 1:
        return None
    return 2 * cin * cout * (3 * h - 2) * (3 * f * w - 2 * f)


def _own_packings(module: Module, comp: Computation, inst: Instruction,
                  callers: Mapping) -> list[Key]:
    """The ops of the packing fusions (hloflops.remat.packed_conv_inputs) feeding the weight
    gradient's operands in its fusion, or the packing of a packing."""
    keys: list[Key] = []
    pending = list(inst.operands)
    seen: set[str] = set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        producer = comp.by_name.get(name)
        if producer is None or producer.opcode != "fusion" or producer.attributes.get("kind") != "kLoop":
            continue
        bodies = producer.called(CallRole.FUSION)
        if len(bodies) != 1 or callers.get(bodies[0]) is None:
            continue
        body = module.by_name[bodies[0]]
        if not is_packing(body):
            continue
        keys += [(body.name, op.name) for op in body.instructions]
        pending += list(producer.operands)
    return keys
