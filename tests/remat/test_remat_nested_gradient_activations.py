"""A recomputed activation nested in a weight gradient's operand, where the forward hands the
activation to a windowed einsum (hloflops.remat.nested_gradient_activations).

Hand-written after utpu draw 196 (scan_unrolled, mlp, relu, FSDP): the forward computes `h` as
windows and `relu(h)` in a fusion of its own named for the next matmul, which the frame runs in
windows (its rows collective-permuted under that name); the recompute computes `h` whole and nests
`relu(h)` and its narrow in the weight gradient's fusion. The program without remat nests such a
copy in its own weight gradient too (relu 1,536 and convert 1,536 over-counted on 196, gelu's chain
on 209): a `twin_copies` hinge of one on each counted op of the copy, the count unchanged."""

from __future__ import annotations

import hloparse
from hloflops.accounting import account

_DOT = "jit(loss)/jvp()/closed_call/dot_general"
_REMAT = "jit(loss)/transpose(jvp())/closed_call/checkpoint/rematted_computation"
_GRADIENT = "jit(loss)/transpose(jvp())/closed_call/checkpoint/dot_general"
_TPU = 'backend_config={"scoped_memory_configs":[]}'

MODULE = """HloModule relu_copy, is_scheduled=true, num_partitions=4, entry_computation_layout=@L

forward_relu {
  p0 = f32[4,64] parameter(0)
  zero = f32[] constant(0)
  zb = f32[4,64] broadcast(zero), dimensions={}
  y = f32[4,64] maximum(p0, zb), metadata={op_name="jit(loss)/jvp()/closed_call/jit(relu)/max"}
  ROOT yb = f32[1,4,64] bitcast(y)
}

relu_copy {
  q0 = f32[4,64] parameter(0)
  zero = f32[] constant(0)
  zb = f32[4,64] broadcast(zero), dimensions={}
  r = f32[4,64] maximum(q0, zb), metadata={op_name="@R/jit(relu)/max"}
  ROOT n = bf16[4,64] convert(r)
}

weight_grad {
  s0 = f32[4,16] parameter(0)
  s1 = f32[4,64] parameter(1)
  a = bf16[4,64] fusion(s1), kind=kLoop, calls=relu_copy, metadata={op_name="@R/jit(relu)/max"}
  g = bf16[4,16] convert(s0)
  ROOT dw = f32[64,16] convolution(a, g), dim_labels=fb_io->bf, metadata={op_name="@G"}
}

ENTRY main {
  xs = f32[2,32] parameter(0), @T
  w = f32[32,64] parameter(1)
  dy = f32[4,16] parameter(2)
  xn = f32[2,32] collective-permute(xs), source_target_pairs={{0,1},{1,0}}, metadata={op_name="@D"}
  xc = f32[4,32] concatenate(xs, xn), dimensions={0}, metadata={op_name="@D"}
  h = f32[4,64] dot(xc, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="@D"}
  y = f32[1,4,64] fusion(h), kind=kLoop, calls=forward_relu, metadata={op_name="@W"}
  wn = f32[2,32] collective-permute(xs), source_target_pairs={{0,1},{1,0}}, metadata={op_name="@P"}
  xg = f32[4,32] all-gather(xs), dimensions={0}, replica_groups={{0,1}}, metadata={op_name="@R/dot_general"}
  hr = f32[4,64] dot(xg, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="@R/dot_general"}
  dw = f32[64,16] fusion(dy, hr), kind=kOutput, calls=weight_grad, metadata={op_name="@G"}
  ROOT out = (f32[1,4,64], f32[64,16], f32[2,32]) tuple(y, dw, wn)
}
"""


def _account(permuted: str = "jit(loss)/jvp()/closed_call/next/dot_general"):
    text = MODULE
    for short, long in (("@D", _DOT), ("@W", "jit(loss)/jvp()/closed_call/next/dot_general"), ("@P", permuted),
                        ("@R", _REMAT), ("@G", _GRADIENT), ("@T", _TPU),
                        ("@L", "{(f32[2,32]{1,0:T(8,128)})->f32[64,16]{0,1:T(8,128)}}")):
        text = text.replace(short, long)
    return account(hloparse.parse(text), xla={"flops": 0.0})


def test_a_relu_copy_in_the_weight_gradient_beside_a_windowed_forward_is_a_hinge_of_one():
    acc = _account()
    hinged = {(h.computation, h.name, h.twin_copies) for h in acc.remat_hinges if h.twin_copies}
    # The narrow `n` pairs with itself by signature with no stored forward narrow or wide reader
    # in sight: a weak pairing (hloflops.remat.stored_forward_narrows), a hinge of its whole count.
    assert hinged == {("relu_copy", "r", 1)}, acc.remat_hinges
    assert ("relu_copy", "n") in {(h.computation, h.name) for h in acc.remat_hinges}, acc.remat_hinges
    low, high = acc.remat_flops_bounds
    assert low == acc.remat_flops - 512 and high >= acc.remat_flops


def test_not_where_the_forward_hands_its_activation_to_no_windowed_einsum():
    # Nothing collective-permuted under the name of the fusion computing the forward's relu.
    acc = _account(permuted="jit(loss)/jvp()/closed_call/other")
    assert not any(h.twin_copies for h in acc.remat_hinges if h.computation == "relu_copy"), acc.remat_hinges
