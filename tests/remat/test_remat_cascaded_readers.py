"""A stored scale read by a cheap loop fusion that hands its value on to several readers: the
program without remat may copy that cheap reader into each of its own readers, and the scale with
it (hloflops.remat.cascaded_readers, counted by hloflops.remat.stored_scales). Held-out TPU 354
(python_loop MLP, offload, tp): the residual gradient's `add_any` of the stored loss scale, narrowed
for two matmuls, is copied into both by the twin, which runs the scale four times against this
program's one (three direct readers) and the add twice: multiply truth -384, add -128, below the
low end -256 before."""

from __future__ import annotations

from tests.remat.test_remat_stored_scales import MATMUL, _scale_hinges

CHEAP = """
%cheap (c0: f32[4,4], c1: f32[4,4]) -> bf16[4,4] {
  %c0 = f32[4,4] parameter(0)
  %c1 = f32[4,4] parameter(1)
  %s = f32[4,4] add(%c0, %c1), metadata={op_name="jit(f)/transpose(jvp(M))/add_any"}
  ROOT %n = bf16[4,4] convert(%s)
}

%dy (y0: bf16[4,4], y1: f32[4,4]) -> f32[4,4] {
  %y0 = bf16[4,4] parameter(0)
  %y1 = f32[4,4] parameter(1)
  %yc = f32[4,4] convert(%y0)
  ROOT %y = f32[4,4] dot(%yc, %y1), lhs_contracting_dims={1}, rhs_contracting_dims={1}, metadata={op_name="BWD"}
}

%dz (z0: bf16[4,4], z1: f32[4,4]) -> f32[4,4] {
  %z0 = bf16[4,4] parameter(0)
  %z1 = f32[4,4] parameter(1)
  %zc = f32[4,4] convert(%z0)
  ROOT %z = f32[4,4] dot(%z1, %zc), lhs_contracting_dims={0}, rhs_contracting_dims={0}, metadata={op_name="BWD"}
}

ENTRY %main""".replace("BWD", "jit(f)/transpose(jvp(M))/dot_general")

# A fourth reader of the scale: the cheap fusion, read by two matmul fusions.
CASCADE = MATMUL.replace("\nENTRY %main", CHEAP, 1).replace(
    "  %z = f32[] constant(0)\n  %gb",
    "  %ga = bf16[4,4] fusion(%grad, %v), kind=kLoop, calls=%cheap\n"
    "  %gy = f32[4,4] fusion(%ga, %w), kind=kOutput, calls=%dy\n"
    "  %gz = f32[4,4] fusion(%ga, %x), kind=kOutput, calls=%dz\n"
    "  %z = f32[] constant(0)\n  %gb").replace(
    "ROOT %out = (f32[], f32[4,4], f32[4,4], f32[4], f32[4,4]) tuple(%loss_sum, %gw, %gx, %gb, %r)",
    "ROOT %out = (f32[], f32[4,4], f32[4,4], f32[4], f32[4,4], f32[4,4], f32[4,4]) "
    "tuple(%loss_sum, %gw, %gx, %gb, %r, %gy, %gz)").replace(
    "-> (f32[], f32[4,4], f32[4,4], f32[4], f32[4,4]) {\n  %x",
    "-> (f32[], f32[4,4], f32[4,4], f32[4], f32[4,4], f32[4,4], f32[4,4]) {\n  %x")
# TPU's compiler wrote it (a tiled entry layout, a backend config): the cascade is TPU's fusion.
CASCADE_CPU = CASCADE
_LAYOUT = "entry_computation_layout={(f32[4,4]{1,0:T(8,128)})->f32[]}"
CASCADE = CASCADE.replace("HloModule m, is_scheduled=true", f"HloModule m, is_scheduled=true, {_LAYOUT}").replace(
    'rhs_contracting_dims={1}, metadata={op_name="jit(f)/transpose(jvp(M))/dot_general"}\n}\n\n%dz',
    'rhs_contracting_dims={1}, metadata={op_name="jit(f)/transpose(jvp(M))/dot_general"}, '
    'backend_config={"scoped_memory_configs":[]}\n}\n\n%dz')


def test_a_cheap_reader_stands_for_its_own_readers():
    acc, hinges = _scale_hinges(CASCADE)
    # the scale: dW, dX, the reduce and the cheap fusion's two readers: 5 readers, 4 copies beyond
    # this program's one; the cheap fusion's add: 2 readers, 1 copy beyond
    assert sorted((h.name, h.opcode, h.twin_copies) for h in hinges) == [("g", "multiply", 4), ("s", "add", 1)]
    low, high = acc.remat_flops_bounds
    assert low <= acc.remat_flops - 4 * 16 - 16 and high >= acc.remat_flops  # the count does not move


def test_a_cheap_reader_with_one_reader_is_one_reader():
    one = CASCADE.replace("%gz = f32[4,4] fusion(%ga, %x)", "%gz = f32[4,4] fusion(%x, %x)").replace(
        "%dz (z0: bf16[4,4]", "%dz (z0: f32[4,4]").replace("%z0 = bf16[4,4]", "%z0 = f32[4,4]").replace(
        "%zc = f32[4,4] convert(%z0)", "%zc = f32[4,4] negate(%z0)")
    assert sorted((h.name, h.twin_copies) for h in _scale_hinges(one)[1]) == [("g", 3)]


def test_only_on_tpu():
    assert sorted((h.name, h.twin_copies) for h in _scale_hinges(CASCADE_CPU)[1]) == [("g", 3)]
