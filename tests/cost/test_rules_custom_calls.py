"""Custom-calls: XLA charges -1; the exact view costs the ones whose arithmetic is known and
lists the others as uncounted with their target name."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import pytest

import hloparse
from hloflops.cost.costs import Cost
from hloflops.engine import own_cost
from hloflops.xla.estimate import loop_once_totals, xla_estimate


def _cost(text: str, name: str, view: str):
    module = hloparse.parse(text)
    for comp, inst in module.instructions():
        if inst.name == name:
            return own_cost(module, comp, inst, view=view)
    raise KeyError(name)


def _corpus_gemms(corpus_dir: Path):
    """(file, module, computation, instruction) of every cuBLAS GEMM custom-call in the corpus."""
    found = []
    for path in sorted(glob.glob(os.path.join(corpus_dir, "**", "*.hlo"), recursive=True)):
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        if "__cublas$" not in text:
            continue
        try:
            module = hloparse.parse(text, path=path)
        except hloparse.HloParseError:
            continue
        for comp, inst in module.instructions():
            if inst.opcode == "custom-call" and (inst.custom_call_target or "").startswith("__cublas$"):
                found.append((os.path.relpath(path, corpus_dir), module, comp, inst))
    return found


def _equivalent_dot_text(comp, inst) -> str:
    """The same GEMM written as an HLO dot: the custom-call's operands 0 and 1 and its
    backend_config dot dimension numbers."""
    lhs, rhs = comp.operand_shapes(inst)[:2]
    dnums = inst.backend_config["gemm_backend_config"]["dot_dimension_numbers"]

    def dims(key: str) -> list[int]:
        return [int(d) for d in dnums.get(key, [])]

    lb, rb = dims("lhs_batch_dimensions"), dims("rhs_batch_dimensions")
    lc, rc = dims("lhs_contracting_dimensions"), dims("rhs_contracting_dimensions")
    out = [lhs.dims[d] for d in lb]
    out += [n for d, n in enumerate(lhs.dims) if d not in lb and d not in lc]
    out += [n for d, n in enumerate(rhs.dims) if d not in rb and d not in rc]

    def shape(element_type: str, d: list[int]) -> str:
        return f"{element_type}[{','.join(map(str, d))}]"

    def attr(values: list[int]) -> str:
        return "{" + ",".join(map(str, values)) + "}"

    result_type = (inst.shape.tuple_shapes[0] if inst.shape.is_tuple else inst.shape).element_type
    return (
        "HloModule gemm_as_dot\n\nENTRY e {\n"
        f"  a = {shape(lhs.element_type, list(lhs.dims))} parameter(0)\n"
        f"  b = {shape(rhs.element_type, list(rhs.dims))} parameter(1)\n"
        f"  ROOT d = {shape(result_type, out)} dot(a, b), lhs_batch_dims={attr(lb)}, "
        f"lhs_contracting_dims={attr(lc)}, rhs_batch_dims={attr(rb)}, rhs_contracting_dims={attr(rc)}\n"
        "}\n"
    )


def test_cublas_gemms_in_the_corpus_cost_what_the_same_dot_costs(corpus_dir: Path):
    gemms = _corpus_gemms(corpus_dir)
    costed = [g for g in gemms if own_cost(g[1], g[2], g[3], view="exact").uncounted is None]
    assert len(costed) >= 15, f"expected many cuBLAS GEMMs with dot dimensions, found {len(costed)}"
    for path, module, comp, inst in costed:
        exact = own_cost(module, comp, inst, view="exact").cost.flops
        dot_text = _equivalent_dot_text(comp, inst)
        assert exact == _cost(dot_text, "d", "exact").cost.flops, (path, inst.name, dot_text)
        assert exact > 0
        # ... while XLA charges the custom-call -1 (both of our views say so).
        assert own_cost(module, comp, inst, view="xla").cost.flops == -1


def test_cublas_gemm_flops_equal_xlas_flops_for_the_dot(corpus_dir: Path):
    pytest.importorskip("jax")
    from hloflops.xla.compare import xla_cost_of_text

    checked = 0
    for path, module, comp, inst in _corpus_gemms(corpus_dir):
        cost = own_cost(module, comp, inst, view="exact")
        if cost.uncounted is not None:
            continue
        assert xla_cost_of_text(_equivalent_dot_text(comp, inst))["flops"] == float(cost.cost.flops), path
        checked += 1
    assert checked >= 15


def test_cublas_gemm_without_dimensions_is_uncounted_with_its_target():
    text = """HloModule m
ENTRY e {
  a = f32[8,8] parameter(0)
  b = f32[8,8] parameter(1)
  ROOT g = f32[8,8] custom-call(a, b), custom_call_target="__cublas$gemm"
}
"""
    cost = _cost(text, "g", "exact")
    assert cost.uncounted is not None and "__cublas$gemm" in cost.uncounted
    assert cost.cost.flops == 0


def test_a_gpu_module_with_a_gemm_gets_real_flops_in_the_exact_view():
    text = """HloModule m
ENTRY e {
  a = f32[64,32]{1,0} parameter(0)
  b = f32[32,16]{1,0} parameter(1)
  g = (f32[64,16]{1,0}, s8[1024]{0}) custom-call(a, b), custom_call_target="__cublas$lt$matmul",
    backend_config={"gemm_backend_config":{"alpha_real":1,"beta":0,"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["0"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]}}}
  r = f32[64,16]{1,0} get-tuple-element(g), index=0
  ROOT n = f32[64,16]{1,0} negate(r)
}
"""
    module = hloparse.parse(text)
    exact, uncounted = loop_once_totals(module, view="exact")
    assert not uncounted
    assert exact.flops == 2 * 64 * 32 * 16 + 64 * 16
    xla, _ = loop_once_totals(module, view="xla")
    assert xla.flops == -1 + 64 * 16  # what jax reports on GPU (jax-ml/jax#22249)
    assert xla_estimate(module)["optimal_seconds"] == -1.0


def test_cudnn_convolution_costs_like_the_hlo_convolution():
    conv = """HloModule m
ENTRY e {
  x = f32[2,16,16,8]{3,2,1,0} parameter(0)
  w = f32[3,3,8,4]{3,2,1,0} parameter(1)
  ROOT c = OUT CALL(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f EXTRA
}
"""
    hlo = conv.replace("OUT", "f32[2,16,16,4]{3,2,1,0}").replace("CALL", "convolution").replace(" EXTRA", "")
    cudnn = conv.replace("OUT", "(f32[2,16,16,4]{3,2,1,0}, u8[0]{0})").replace("CALL", "custom-call").replace(
        "EXTRA", ', custom_call_target="__cudnn$convForward"')
    want = _cost(hlo, "c", "exact").cost.flops
    assert want == 2 * 8 * 4 * 2 * 46 * 46  # 46 valid taps per spatial dim (16 + 2 * 15)
    assert _cost(cudnn, "c", "exact").cost.flops == want
    assert _cost(cudnn, "c", "xla").cost.flops == -1


def test_lapack_cholesky_and_triangular_solve_from_jax():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    from jax.scipy.linalg import solve_triangular

    S = jax.ShapeDtypeStruct
    text = jax.jit(jnp.linalg.cholesky).lower(S((3, 8, 8), jnp.float32)).compile().as_text()
    module = hloparse.parse(text)
    calls = [(c, i) for c, i in module.instructions() if i.opcode == "custom-call"]
    assert [i.custom_call_target for _, i in calls] == ["lapack_spotrf_ffi"]
    comp, inst = calls[0]
    assert own_cost(module, comp, inst, view="exact").cost.flops == 8 * (3 * 8 * 8) // 3  # XLA's cholesky rule
    assert own_cost(module, comp, inst, view="xla").cost.flops == -1

    fn = jax.jit(lambda a, b: solve_triangular(a, b, lower=True))
    module = hloparse.parse(fn.lower(S((8, 8), jnp.float32), S((8, 4), jnp.float32)).compile().as_text())
    calls = [(c, i) for c, i in module.instructions() if i.opcode == "custom-call"]
    assert [i.custom_call_target for _, i in calls] == ["lapack_strsm_ffi"]
    assert own_cost(module, *calls[0], view="exact").cost.flops == 2 * 8 * (8 * 4)  # XLA's triangular-solve rule


def test_lapack_lu_counts_the_unblocked_algorithm():
    text = """HloModule m
ENTRY e {
  a = f32[4,3]{0,1} parameter(0)
  ROOT lu = (f32[4,3]{0,1}, s32[3]{0}, s32[]) custom-call(a), custom_call_target="lapack_sgetrf_ffi"
}
"""
    # column j: (m-j-1) divisions and (m-j-1)(n-j-1) multiply-adds (2 flops each)
    want = (3 + 2 * 3 * 2) + (2 + 2 * 2 * 1) + (1 + 0)
    assert _cost(text, "lu", "exact").cost.flops == want


def test_pallas_call_with_a_cost_estimate_uses_it():
    estimate = ', "cost_estimate": {"flops": 1000, "transcendentals": 7, "bytes_accessed": 1024}'
    text = (
        "HloModule m\nENTRY e {\n  a = f32[128] parameter(0)\n"
        '  ROOT k = f32[128] custom-call(a), custom_call_target="tpu_custom_call",\n'
        '    backend_config={"custom_call_config": {"body": "abc"' + estimate + "}}\n}\n"
    )
    cost = _cost(text, "k", "exact")
    assert cost.uncounted is None
    assert (cost.cost.flops, cost.cost.transcendentals, cost.cost.bytes_accessed) == (1000, 7, 1024)
    no_estimate = text.replace(estimate, "")
    assert "tpu_custom_call" in _cost(no_estimate, "k", "exact").uncounted


def test_unknown_custom_call_is_listed_never_folded_in():
    text = """HloModule m
ENTRY e {
  a = f32[16] parameter(0)
  t = f32[16] custom-call(a), custom_call_target="my_magic_kernel"
  ROOT n = f32[16] negate(t)
}
"""
    module = hloparse.parse(text)
    exact, uncounted = loop_once_totals(module, view="exact")
    assert len(uncounted) == 1 and "my_magic_kernel" in uncounted[0]
    assert exact.flops == 16  # the negate only: the unknown call adds nothing, and says so
    xla, _ = loop_once_totals(module, view="xla")
    assert xla.flops == 15 and xla.bytes_accessed == -1 + 2 * 64  # -1 for the call; negate reads and writes 64


def test_annotations_cost_nothing_moves_cost_bytes_composites_cost_their_definition():
    text = """HloModule m
cosh_def {
  x = f32[16] parameter(0)
  e = f32[16] exponential(x)
  n = f32[16] negate(x)
  f = f32[16] exponential(n)
  s = f32[16] add(e, f)
  h = f32[16] constant({0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5})
  ROOT r = f32[16] multiply(s, h)
}
ENTRY e {
  a = f32[16] parameter(0)
  sh = f32[16] custom-call(a), custom_call_target="Sharding", sharding={replicated}
  mv = f32[16] custom-call(sh), custom_call_target="MoveToHost"
  ROOT c = f32[16] custom-call(mv), custom_call_target="xla_builder.math.Cosh", called_computations={cosh_def}
}
"""
    assert _cost(text, "sh", "exact").cost == Cost(0, 0, 0)
    assert _cost(text, "mv", "exact").cost == Cost(0, 0, 2 * 64)
    assert _cost(text, "c", "exact").cost == Cost(3 * 16, 2 * 16, 2 * 64)
    module = hloparse.parse(text)
    assert loop_once_totals(module, view="exact") == (Cost(48, 32, 256), ())
    assert loop_once_totals(module, view="xla")[0] == Cost(-3, 0, -3)
