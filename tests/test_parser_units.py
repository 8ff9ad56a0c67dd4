"""Unit tests of the parser's pieces (issue 2): shapes, attribute values, stack frames, the call
graph's roles, `hloparse.load` on gzip, and where each instruction sits in the text."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

import hloparse
from hloparse import CallRole, HloParseError, Layout, Shape, SourceLocation
from hloparse.attributes import (
    AttributeSyntaxError,
    parse_dim_labels,
    parse_int_list,
    parse_metadata,
    parse_slice,
    parse_window,
    unquote,
)
from hloparse.ir import ConvDimLabels, WindowDim
from hloparse.shapes import ShapeSyntaxError, parse_shape


def one_instruction(shape_and_op: str, params: str = "") -> hloparse.Instruction:
    """Parse `ROOT r = <shape_and_op>` in a tiny module and return that instruction."""
    text = f"HloModule u\n\nENTRY e {{\n{params}  ROOT r = {shape_and_op}\n}}\n"
    return hloparse.parse(text).entry.root


# ---- shapes ----------------------------------------------------------------------------------

def test_array_shape_with_layout() -> None:
    s = parse_shape("f32[2,3]{1,0}")
    assert (s.element_type, s.dims, s.dynamic, s.layout) == ("f32", (2, 3), (), Layout((1, 0)))
    assert s.is_array and not s.is_tuple and s.rank == 2 and s.num_elements == 6
    assert s.byte_size() == 24
    assert str(s) == "f32[2,3]{1,0}"


def test_scalar_and_no_layout() -> None:
    s = parse_shape("s32[]")
    assert (s.dims, s.layout, s.num_elements, s.byte_size()) == ((), None, 1, 4)
    assert str(s) == "s32[]"
    assert parse_shape("pred[7]").byte_size() == 7
    assert parse_shape("bf16[3]{0}").byte_size() == 6
    assert parse_shape("c128[2]").byte_size() == 32


def test_tuple_and_nested_tuple() -> None:
    s = parse_shape("((f32[2]{0}, (pred[], u8[3])), token[])")
    assert s.is_tuple and len(s.tuple_shapes) == 2
    inner = s.tuple_shapes[0]
    assert inner.is_tuple and inner.tuple_shapes[0] == parse_shape("f32[2]{0}")
    assert [str(leaf) for leaf in s.leaves()] == ["f32[2]{0}", "pred[]", "u8[3]", "token[]"]
    assert [index for index, _ in s.leaves_with_index()] == [(0, 0), (0, 1, 0), (0, 1, 1), (1,)]
    assert s.byte_size() == 16  # a tuple is its table of two pointers
    assert s.leaf_byte_size() == 8 + 1 + 3 + 0
    assert str(s) == "((f32[2]{0}, (pred[], u8[3])), token[])"


def test_empty_tuple_and_index_comments() -> None:
    assert parse_shape("()") == Shape("tuple")
    s = parse_shape("(f32[2], /*index=1*/s32[], f32[1])")
    assert [str(t) for t in s.tuple_shapes] == ["f32[2]", "s32[]", "f32[1]"]


def test_layout_with_tiling_and_memory_space() -> None:
    s = parse_shape("bf16[8,128]{1,0:T(8,128)(2,1)S(1)}")
    assert s.layout is not None
    assert s.layout.minor_to_major == (1, 0)
    assert s.layout.details == "T(8,128)(2,1)S(1)"
    assert s.layout.memory_space == 1
    assert str(s) == "bf16[8,128]{1,0:T(8,128)(2,1)S(1)}"
    assert parse_shape("f32[1024]{0:T(1024)S(5)}").layout.memory_space == 5
    assert parse_shape("f32[2,3]{1,0:T(8,128)}").layout.memory_space == 0
    assert parse_shape("f32[2,3]{1,0:S(1)}").layout.details == "S(1)"
    # A tiled layout does not change the logical size the cost rules count.
    assert parse_shape("f32[2,3]{1,0:T(8,128)}").byte_size() == 24


def test_layout_on_an_instruction() -> None:
    inst = one_instruction("f32[16,256]{0,1:T(8,128)S(1)} parameter(0)")
    assert inst.shape.layout == Layout((0, 1), "T(8,128)S(1)")
    assert inst.shape.layout.memory_space == 1


def test_layout_without_dimensions_and_raw_details() -> None:
    s = parse_shape("pred[]{:T(256)}")
    assert s.layout == Layout((), "T(256)") and s.rank == 0
    t = parse_shape("(f32[8]{0:T(128)}, s32[]{:S(2)})")
    assert [leaf.layout.details for leaf in t.leaves()] == ["T(128)", "S(2)"]
    assert t.tuple_shapes[1].layout.memory_space == 2


def test_dynamic_dimensions() -> None:
    s = parse_shape("f32[<=16,8]{1,0}")
    assert s.dims == (16, 8) and s.dynamic == (True, False) and s.is_dynamic
    assert s.num_elements == 128
    assert s.byte_size() == 16 * 8 * 4 + 4 * 2  # plus the dimension sizes XLA stores
    assert str(s) == "f32[<=16,8]{1,0}"
    static = parse_shape("f32[16,8]{1,0}")
    assert not static.is_dynamic and static.dynamic == ()
    assert parse_shape("s32[<=4]").dynamic == (True,)


def test_unbounded_dynamic_dimension_prints_as_question_mark() -> None:
    s = parse_shape("f32[?,784]")
    assert s.is_dynamic and s.dynamic == (True, False)
    assert str(s) == "f32[?,784]"


def test_token_opaque_and_buffer() -> None:
    token = parse_shape("token[]")
    assert (token.element_type, token.is_array, token.byte_size(), token.num_elements) == ("token", False, 0, 0)
    assert parse_shape("opaque[]").byte_size() == 8
    buffer = parse_shape("b(f32[4]{0})")
    assert buffer.element_type == "buffer" and not buffer.is_array
    assert buffer.tuple_shapes == (parse_shape("f32[4]{0}"),)
    assert buffer.byte_size() == 16
    assert str(buffer) == "b(f32[4]{0})"
    inst = one_instruction("(b(f32[4]), f32[]) parameter(0)")
    assert inst.shape.tuple_shapes[0].element_type == "buffer"


def test_sub_byte_and_fp8_types() -> None:
    for text in ("s4[10]", "u4[10]", "f8e4m3fn[10]", "f8e5m2[10]", "f4e2m1fn[10]"):
        assert parse_shape(text).byte_size() == 10, text


@pytest.mark.parametrize(
    "text",
    ["f33[2]", "f32[2", "f32[2]{0,1}", "f32[2]{x}", "f32[a]", "(f32[2],)", "(f32[2]", "token[2]", "b(f32[2]", ""],
)
def test_bad_shapes(text: str) -> None:
    with pytest.raises(ShapeSyntaxError):
        parse_shape(text)


def test_shape_round_trip_through_str() -> None:
    for text in ("f32[2,3]{1,0}", "(f32[2], (s32[], pred[4]{0}))", "bf16[8,128]{1,0:T(8,128)S(1)}",
                 "f32[<=16,8]{1,0}", "token[]", "b(f32[4]{0})", "()"):
        assert str(parse_shape(text)) == text
        assert parse_shape(str(parse_shape(text))) == parse_shape(text)


# ---- attribute values ------------------------------------------------------------------------

def test_int_lists() -> None:
    assert parse_int_list("{}") == ()
    assert parse_int_list("{1,0}") == (1, 0)
    assert parse_int_list(" { 2 , 3 } ") == (2, 3)
    assert parse_int_list("{-1}") == (-1,)
    for bad in ("{1,}", "{a}", "{1 2}", "{1;0}"):
        with pytest.raises(AttributeSyntaxError):
            parse_int_list(bad)


def test_int_lists_on_instructions() -> None:
    inst = one_instruction("f32[3,2] transpose(p), dimensions={1,0}", "  p = f32[2,3] parameter(0)\n")
    assert inst.dimensions == (1, 0)
    assert inst.int_list("absent") is None
    dot = one_instruction(
        "f32[5,2,4] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, "
        "rhs_contracting_dims={1}",
        "  a = f32[5,2,3] parameter(0)\n  b = f32[5,3,4] parameter(1)\n")
    dims = dot.dot_dimension_numbers
    assert (dims.lhs_batch, dims.lhs_contracting, dims.rhs_batch, dims.rhs_contracting) == ((0,), (2,), (0,), (1,))


def test_window() -> None:
    dims = parse_window("{size=3x2 stride=2x1 pad=1_1x0_2 lhs_dilate=1x2 rhs_dilate=2x1 rhs_reversal=0x1}")
    assert dims == (
        WindowDim(size=3, stride=2, pad_low=1, pad_high=1, lhs_dilation=1, rhs_dilation=2, reversal=False),
        WindowDim(size=2, stride=1, pad_low=0, pad_high=2, lhs_dilation=2, rhs_dilation=1, reversal=True),
    )
    assert parse_window("{size=5}") == (WindowDim(size=5),)
    assert parse_window("{}") == ()
    assert parse_window("{size=2x2 pad=-1_0x0_0}")[0].pad_low == -1
    for bad in ("{size=3x3 stride=2}", "{size=3 pad=1}", "{size=x}", "{bogus=1}"):
        with pytest.raises(AttributeSyntaxError):
            parse_window(bad)


def test_window_on_reduce_window() -> None:
    text = """HloModule u

add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

ENTRY e {
  p = f32[8,8] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[4,8] reduce-window(p, z), window={size=2x1 stride=2x1}, to_apply=add
}
"""
    root = hloparse.parse(text).entry.root
    assert root.window == (WindowDim(size=2, stride=2), WindowDim(size=1, stride=1))


def test_dim_labels() -> None:
    assert parse_dim_labels("b01f_01io->b01f") == ConvDimLabels(
        input_batch=0, input_feature=3, input_spatial=(1, 2),
        kernel_input_feature=2, kernel_output_feature=3, kernel_spatial=(0, 1),
        output_batch=0, output_feature=3, output_spatial=(1, 2))
    # Spatial dimensions are ordered by their digit, wherever they sit.
    odd = parse_dim_labels("f10b_o10i->1b0f")
    assert (odd.input_batch, odd.input_feature, odd.input_spatial) == (3, 0, (2, 1))
    assert (odd.kernel_input_feature, odd.kernel_output_feature, odd.kernel_spatial) == (3, 0, (2, 1))
    assert (odd.output_batch, odd.output_feature, odd.output_spatial) == (1, 3, (2, 0))
    flat = parse_dim_labels("bf_io->bf")
    assert flat.input_spatial == flat.kernel_spatial == flat.output_spatial == ()
    for bad in ("b01f_01io", "b01f_01io->b0f", "bb1f_01io->b01f", "b02f_02io->b02f", "b01x_01io->b01f"):
        with pytest.raises(AttributeSyntaxError):
            parse_dim_labels(bad)


def test_dim_labels_on_convolution() -> None:
    conv = one_instruction(
        "f32[1,4,4,8] convolution(x, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f",
        "  x = f32[1,4,4,2] parameter(0)\n  k = f32[3,3,2,8] parameter(1)\n")
    assert conv.conv_dim_labels.kernel_output_feature == 3
    assert conv.window[0] == WindowDim(size=3, pad_low=1, pad_high=1)
    assert conv.feature_group_count == 1 and conv.batch_group_count == 1


def test_slice() -> None:
    assert parse_slice("{[0:4:2], [1:3]}") == ((0, 4, 2), (1, 3, 1))
    assert parse_slice("{[0:4]}") == ((0, 4, 1),)
    assert parse_slice("{}") == ()
    for bad in ("{[0:4:2:1]}", "{[a:4]}", "{[0]}"):
        with pytest.raises(AttributeSyntaxError):
            parse_slice(bad)
    inst = one_instruction("f32[2,2] slice(p), slice={[0:4:2], [1:3]}", "  p = f32[4,4] parameter(0)\n")
    assert inst.slice_spec == ((0, 4, 2), (1, 3, 1))


def test_metadata() -> None:
    md = parse_metadata(
        r'{op_type="dot_general" op_name="jit(f)/dot_general[dimension_numbers=(([1], [0]), ([], []))]" '
        r'source_file="/tmp/a b.py" source_line=12 stack_frame_id=3 deduplicated_name="q\"x"}')
    assert md == {
        "op_type": "dot_general",
        "op_name": "jit(f)/dot_general[dimension_numbers=(([1], [0]), ([], []))]",
        "source_file": "/tmp/a b.py",
        "source_line": "12",
        "stack_frame_id": "3",
        "deduplicated_name": 'q"x',
    }
    assert parse_metadata("{}") == {}
    inst = one_instruction('f32[2] negate(p), metadata={op_name="jit(g)/neg" source_line=7}',
                           "  p = f32[2] parameter(0)\n")
    assert inst.op_name == "jit(g)/neg" and inst.metadata["source_line"] == "7"


def test_quoted_values_and_backend_config() -> None:
    assert unquote(r'"foo\"bar"') == 'foo"bar'
    assert unquote('"a\\\\b"') == "a\\b"
    cc = one_instruction(
        r'f32[2] custom-call(p), custom_call_target="my\"target", backend_config={"k": [1, 2], "s": "x}"}',
        "  p = f32[2] parameter(0)\n")
    assert cc.custom_call_target == 'my"target'
    assert cc.backend_config == {"k": [1, 2], "s": "x}"}
    quoted = one_instruction(r'f32[2] custom-call(p), custom_call_target="t", backend_config="{\"n\":3}"',
                             "  p = f32[2] parameter(0)\n")
    assert quoted.backend_config == {"n": 3}
    plain = one_instruction('f32[2] custom-call(p), custom_call_target="t", backend_config="not json"',
                            "  p = f32[2] parameter(0)\n")
    assert plain.backend_config == "not json"


def test_raw_attribute_text_is_kept_verbatim() -> None:
    inst = one_instruction(
        'f32[2] negate(p), sharding={devices=[2,1]0,1}, frontend_attributes={_xla_compute_type="host"}, '
        'backend_config={"operation_queue_id":"0","wait_on_operation_queues":[]}',
        "  p = f32[2] parameter(0)\n")
    assert inst.attributes["sharding"] == "{devices=[2,1]0,1}"
    assert inst.attributes["frontend_attributes"] == '{_xla_compute_type="host"}'
    assert inst.backend_config == {"operation_queue_id": "0", "wait_on_operation_queues": []}


def test_parameter_constant_and_gte_attributes() -> None:
    text = """HloModule u

ENTRY e {
  p = (f32[2], s32[]) parameter(0)
  c = f32[2] constant({1.5, -2})
  g = s32[] get-tuple-element(p), index=1
  ROOT t = (f32[2], s32[]) tuple(c, g)
}
"""
    entry = hloparse.parse(text).entry
    assert entry.by_name["p"].attributes["parameter_number"] == "0"
    assert entry.by_name["c"].attributes["literal"] == "{1.5, -2}"
    assert entry.by_name["g"].attributes["index"] == "1"
    assert entry.parameters == (entry.by_name["p"],)


# ---- stack frames ----------------------------------------------------------------------------

STACK_FRAMES = """HloModule frames

FileNames
1 "/src/model.py"
2 "/src/layers.py"

FunctionNames
1 "main"
2 "dense"

FileLocations
1 {file_name_id=1 function_name_id=1 line=10 end_line=10 column=4 end_column=20}
2 {file_name_id=2 function_name_id=2 line=42 end_line=43 column=8 end_column=2}

StackFrames
1 {file_location_id=1 parent_frame_id=0}
2 {file_location_id=2 parent_frame_id=1}

ENTRY e {
  p = f32[2] parameter(0), metadata={op_name="p" stack_frame_id=1}
  n = f32[2] negate(p), metadata={op_name="n" stack_frame_id=2}
  o = f32[2] exponential(n), metadata={op_name="o" source_file="/old/style.py" source_line=5}
  b = f32[2] sine(o), metadata={op_name="b" stack_frame_id=9 source_file="/fallback.py" source_line=6}
  ROOT r = f32[2] cosine(b)
}
"""


def test_stack_frame_tables() -> None:
    module = hloparse.parse(STACK_FRAMES)
    frames = module.stack_frames
    assert frames.file_names == ("/src/model.py", "/src/layers.py")
    assert frames.function_names == ("main", "dense")
    assert frames.file_locations == ((1, 1, 10, 10, 4, 20), (2, 2, 42, 43, 8, 2))
    assert frames.frames == ((1, 0), (2, 1))


def test_source_location() -> None:
    module = hloparse.parse(STACK_FRAMES)
    entry = module.entry
    at = {name: module.source_location(entry.by_name[name]) for name in ("p", "n", "o", "b", "r")}
    assert at["p"] == SourceLocation(file="/src/model.py", line=10, function="main", column=4)
    assert at["n"] == SourceLocation(file="/src/layers.py", line=42, function="dense", column=8)
    assert at["o"] == SourceLocation(file="/old/style.py", line=5)  # metadata without a frame id
    assert at["b"] == SourceLocation(file="/fallback.py", line=6)  # frame 9 does not exist
    assert at["r"] is None
    assert module.stack_frames.location(0) is None and module.stack_frames.location(3) is None


def test_stack_frames_in_a_corpus_module(corpus_dir: Path) -> None:
    path = corpus_dir / "xla_cc_gpu" / (
        "service__gpu__gpu_hlo_schedule_test__GpuHloScheduleTest_MetadataIgnoredInFingerprint__L1900.hlo")
    module = hloparse.load(path)
    assert module.stack_frames.file_names == ("$0",)
    assert module.stack_frames.location(1) == SourceLocation(file="$0", line=1, function="<module>", column=0)


# ---- call graph --------------------------------------------------------------------------

CALLS = """HloModule calls

add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

ge {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=GE
}

fused {
  f = f32[4] parameter(0)
  ROOT m = f32[4] multiply(f, f)
}

cond {
  cp = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(cp), index=0
  n = s32[] constant(10)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  bp = (s32[], f32[4]) parameter(0)
  j = s32[] get-tuple-element(bp), index=0
  one = s32[] constant(1)
  k = s32[] add(j, one)
  v = f32[4] get-tuple-element(bp), index=1
  w = f32[4] fusion(v), kind=kLoop, calls=fused
  ROOT t = (s32[], f32[4]) tuple(k, w)
}

callee {
  q = f32[4] parameter(0)
  ROOT nq = f32[4] negate(q)
}

yes {
  y0 = f32[4] parameter(0)
  ROOT y1 = f32[4] exponential(y0)
}

no {
  n0 = f32[4] parameter(0)
  ROOT n1 = f32[4] log(n0)
}

b0 {
  z0 = f32[4] parameter(0)
  ROOT z1 = f32[4] sine(z0)
}

b1 {
  z2 = f32[4] parameter(0)
  ROOT z3 = f32[4] cosine(z2)
}

b2 {
  z4 = f32[4] parameter(0)
  ROOT z5 = f32[4] tanh(z4)
}

async_body {
  ap = f32[4] parameter(0)
  ROOT an = f32[4] sqrt(ap)
}

ENTRY main {
  p = f32[4] parameter(0)
  pr = pred[] parameter(1)
  ix = s32[] parameter(2)
  zero = s32[] constant(0)
  init = (s32[], f32[4]) tuple(zero, p)
  loop = (s32[], f32[4]) while(init), condition=cond, body=body
  lv = f32[4] get-tuple-element(loop), index=1
  cz = f32[] constant(0)
  red = f32[] reduce(lv, cz), dimensions={0}, to_apply=add
  c1 = f32[4] call(lv), to_apply=callee
  tf = f32[4] conditional(pr, c1, c1), true_computation=yes, false_computation=no
  br = f32[4] conditional(ix, tf, tf, tf), branch_computations={b0, b1, b2}
  sas = f32[4] select-and-scatter(br, br, cz), window={size=1}, select=ge, scatter=add
  as = ((f32[4]), f32[4], s32[]) async-start(sas), calls=async_body
  ad = f32[4] async-done(as), calls=async_body
  srt = f32[4] sort(ad), dimensions={0}, to_apply=ge
  ar = f32[4] all-reduce(srt), replica_groups={}, to_apply=add
  a2a-start = ((f32[4]), f32[4]) all-to-all-start(ar), replica_groups={{0}}
  a2a-done = f32[4] all-to-all-done(a2a-start)
  ROOT out = (f32[], f32[4]) tuple(red, a2a-done)
}
"""


MORE_APPLIED = """HloModule applied

add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

ENTRY e {
  p = f32[8] parameter(0)
  z = f32[] constant(0)
  i = s32[2,1] parameter(1)
  u = f32[2] parameter(2)
  m = f32[8] map(p, p), dimensions={0}, to_apply=add
  rw = f32[4] reduce-window(m, z), window={size=2 stride=2}, to_apply=add
  sc = f32[8] scatter(p, i, u), update_window_dims={}, inserted_window_dims={0},
    scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
  rs = f32[4] reduce-scatter(sc), replica_groups={{0,1}}, dimensions={0}, to_apply=add
  ars = f32[8] all-reduce-start(p), replica_groups={}, to_apply=add
  ard = f32[8] all-reduce-done(ars)
  ROOT t = (f32[4], f32[4], f32[8]) tuple(rw, rs, ard)
}
"""


def test_applied_computations_of_reducing_ops() -> None:
    module = hloparse.parse(MORE_APPLIED)
    graph = module.call_graph()
    edges = sorted((d["instruction"].name, v, d["role"]) for u, v, d in graph.edges(data=True))
    assert edges == [(name, "add", CallRole.TO_APPLY) for name in ("ars", "m", "rs", "rw", "sc")]
    assert module.entry.by_name["ard"].calls == ()


def test_call_graph_roles() -> None:
    module = hloparse.parse(CALLS)
    graph = module.call_graph()
    edges = {(u, v, d["role"], d["index"], d["instruction"].name) for u, v, d in graph.edges(data=True)}
    wrapped = [c.name for c in module.computations if c.name.endswith("async_wrapped")]
    assert len(wrapped) == 1, [c.name for c in module.computations]
    assert edges == {
        ("main", "cond", CallRole.WHILE_CONDITION, 0, "loop"),
        ("main", "body", CallRole.WHILE_BODY, 0, "loop"),
        ("body", "fused", CallRole.FUSION, 0, "w"),
        ("main", "add", CallRole.TO_APPLY, 0, "red"),
        ("main", "callee", CallRole.CALL, 0, "c1"),
        ("main", "yes", CallRole.BRANCH, 0, "tf"),
        ("main", "no", CallRole.BRANCH, 1, "tf"),
        ("main", "b0", CallRole.BRANCH, 0, "br"),
        ("main", "b1", CallRole.BRANCH, 1, "br"),
        ("main", "b2", CallRole.BRANCH, 2, "br"),
        ("main", "ge", CallRole.TO_APPLY, 0, "sas"),
        ("main", "add", CallRole.TO_APPLY, 1, "sas"),
        ("main", "async_body", CallRole.ASYNC, 0, "as"),  # async-done: no second edge
        ("main", "ge", CallRole.TO_APPLY, 0, "srt"),
        ("main", "add", CallRole.TO_APPLY, 0, "ar"),
        ("main", wrapped[0], CallRole.ASYNC, 0, "a2a-start"),
    }
    assert graph.graph["entry"] == "main"


def test_call_sites_in_order_and_roles_split() -> None:
    module = hloparse.parse(CALLS)
    entry = module.entry
    assert entry.by_name["br"].called(CallRole.BRANCH) == ("b0", "b1", "b2")
    assert entry.by_name["tf"].called(CallRole.BRANCH) == ("yes", "no")
    assert entry.by_name["sas"].called(CallRole.TO_APPLY) == ("ge", "add")
    assert entry.by_name["loop"].called(CallRole.WHILE_BODY) == ("body",)
    assert CallRole.CONTROL == {CallRole.WHILE_BODY, CallRole.WHILE_CONDITION, CallRole.FUSION, CallRole.CALL,
                                CallRole.BRANCH, CallRole.ASYNC}
    assert CallRole.TO_APPLY in CallRole.APPLIED and CallRole.CUSTOM_CALL in CallRole.APPLIED


def test_fusion_bodies_and_async_shorthand() -> None:
    module = hloparse.parse(CALLS)
    assert [c.name for c in module.computations if c.is_fusion_body] == ["fused"]
    start = module.entry.by_name["a2a-start"]
    assert start.opcode == "async-start"
    (wrapped,) = start.called(CallRole.ASYNC)
    body = module.computation(wrapped)
    assert body.root.opcode == "all-to-all"
    assert [i.opcode for i in body.instructions if i.opcode == "parameter"] == ["parameter"]
    assert module.entry.by_name["a2a-done"].opcode == "async-done"


def test_custom_call_called_computations() -> None:
    text = """HloModule cc

f {
  x = f32[] parameter(0)
  ROOT y = f32[] negate(x)
}

g {
  x = f32[] parameter(0)
  ROOT y = f32[] abs(x)
}

ENTRY e {
  p = f32[] parameter(0)
  ROOT c = f32[] custom-call(p), custom_call_target="t", called_computations={f, g}
}
"""
    graph = hloparse.parse(text).call_graph()
    edges = sorted((v, d["role"], d["index"]) for _, v, d in graph.out_edges("e", data=True))
    assert edges == [("f", CallRole.CUSTOM_CALL, 0), ("g", CallRole.CUSTOM_CALL, 1)]


def test_reachable_and_topological_order() -> None:
    from hloparse.callgraph import reachable_from_entry, topological_from_entry

    graph = hloparse.parse(CALLS.replace("ENTRY main {", "unused {\n  u = f32[] parameter(0)\n  ROOT v = f32[] "
                                         "negate(u)\n}\n\nENTRY main {")).call_graph()
    assert "unused" not in reachable_from_entry(graph)
    order = topological_from_entry(graph)
    assert order[0] == "main"
    assert order.index("body") < order.index("fused")


# ---- load, lines and columns -------------------------------------------------------------

def test_load_plain_and_gzip(tmp_path: Path) -> None:
    plain = tmp_path / "m.hlo"
    plain.write_text(CALLS)
    packed = tmp_path / "m.hlo.gz"
    packed.write_bytes(gzip.compress(CALLS.encode()))
    oddly_named = tmp_path / "m.txt"  # gzip is recognised by its magic bytes, not by the name
    oddly_named.write_bytes(gzip.compress(CALLS.encode()))
    modules = [hloparse.load(p) for p in (plain, packed, oddly_named, str(packed))]
    shapes = {tuple((c.name, tuple((i.name, i.opcode, str(i.shape), i.operands, i.line, i.column)
                                   for i in c.instructions)) for c in m.computations) for m in modules}
    assert len(shapes) == 1
    assert [m.path for m in modules] == [str(plain), str(packed), str(oddly_named), str(packed)]
    assert hloparse.parse(CALLS).path is None


def test_error_from_a_gzip_file_names_it(tmp_path: Path) -> None:
    packed = tmp_path / "bad.hlo.gz"
    packed.write_bytes(gzip.compress(CALLS.replace("to_apply=callee", "to_apply=nowhere").encode()))
    with pytest.raises(HloParseError) as info:
        hloparse.load(packed)
    assert info.value.file == str(packed)
    assert info.value.line == CALLS.split("\n").index("  c1 = f32[4] call(lv), to_apply=callee") + 1


def test_instruction_lines_and_columns() -> None:
    text = (
        "HloModule pos\n"                                   # 1
        "\n"                                                # 2
        "// a comment line\n"                               # 3
        "ENTRY %e (p: f32[2]) -> f32[2] {\n"                # 4
        "  %p = f32[2]{0} parameter(0)\n"                   # 5
        "      %n = f32[2]{0} negate(%p),\n"                # 6
        "        metadata={op_name=\"n\"}\n"                # 7
        "\t%a = f32[2]{0} abs(%n)  // trailing comment\n"   # 8
        "  /* label */ %s = f32[2]{0} sine(%a)\n"           # 9
        "  ROOT %r = f32[2]{0} cosine(%s)\n"                # 10
        "}\n"
    )
    module = hloparse.parse(text)
    entry = module.entry
    at = {i.name: (i.line, i.column) for i in entry.instructions}
    assert at["p"] == (5, 3)
    assert at["n"] == (6, 7)
    assert entry.by_name["n"].op_name == "n"  # the continuation line belongs to it
    assert at["a"] == (8, 2)
    assert at["s"][0] == 9 and text.split("\n")[8][at["s"][1] - 1:].startswith("%s =")
    assert at["r"] == (10, 3)
    assert entry.line == 4
    assert all(i.computation == "e" for i in entry.instructions)
    assert entry.root.is_root and entry.root.name == "r"


def test_lines_with_crlf_line_ends() -> None:
    text = "HloModule crlf\r\n\r\nENTRY e {\r\n  p = f32[2] parameter(0)\r\n  ROOT n = f32[2] negate(p)\r\n}\r\n"
    entry = hloparse.parse(text).entry
    assert [(i.name, i.line, i.column) for i in entry.instructions] == [("p", 4, 3), ("n", 5, 3)]
    assert entry.root.shape == parse_shape("f32[2]")


def test_nested_operand_instructions() -> None:
    text = """HloModule nested

ENTRY e {
  ROOT r = f32[2] add(f32[2] parameter(0), f32[2] negate(f32[2] parameter(1)))
}
"""
    entry = hloparse.parse(text).entry
    root = entry.root
    assert root.opcode == "add" and len(root.operands) == 2
    first, second = (entry.by_name[o] for o in root.operands)
    assert first.opcode == "parameter" and first.attributes["parameter_number"] == "0"
    assert second.opcode == "negate"
    assert entry.by_name[second.operands[0]].attributes["parameter_number"] == "1"
    assert all(i.line == 4 for i in entry.instructions)
    # Operands are defined before their users in the instruction list.
    position = {i.name: k for k, i in enumerate(entry.instructions)}
    assert all(position[o] < position[i.name] for i in entry.instructions for o in i.operands)


@pytest.mark.parametrize(
    "text",
    [
        "HloModule m\nENTRY e { ROOT c = f32[] constant(1) }\n",
        "HloModule m\nENTRY e {\n  ROOT c = f32[] constant(1) }\n",
        "HloModule m\nENTRY e { c = f32[] constant(1)\n  ROOT n = f32[] negate(c)\n}\n",
        "HloModule m ENTRY e {\n  ROOT c = f32[] constant(1)\n}\n",
        "HloModule m\nENTRY e {\n  c = f32[] constant(1) ROOT n = f32[] negate(c)\n}\n",
    ],
    ids=["one-line", "brace-after-root", "instruction-on-heading", "entry-on-header-line", "two-on-a-line"],
)
def test_whitespace_free_layouts_xla_accepts(text: str) -> None:
    """XLA's lexer ignores line breaks, so each of these parses with jaxlib 0.10.2; so must it here."""
    entry = hloparse.parse(text).entry
    assert entry.name == "e" and entry.root.name in ("c", "n")
    assert entry.root.is_root
    lines = text.split("\n")
    for inst in entry.instructions:  # line and column point at the instruction in the text as written
        at = lines[inst.line - 1][inst.column - 1:]
        assert at.startswith((inst.name + " =", "ROOT " + inst.name)), (inst.name, inst.line, inst.column, at)


@pytest.mark.parametrize(
    "instruction",
    [
        "ROOT n = f32[4] /* between shape and opcode */ negate(p)",
        "ROOT n = f32[4] add(p, /* between operands */ p)",
        "ROOT n = f32[4] negate(p) // trailing } ) ]",
        'ROOT n = f32[4] negate(p), metadata={op_name="a//b /* not a comment */"}',
    ],
    ids=["before-opcode", "between-operands", "line-comment", "inside-string"],
)
def test_comments_where_xla_allows_them(instruction: str) -> None:
    text = f"HloModule c\n\nENTRY e {{\n  p = f32[4] parameter(0)\n  {instruction}\n}}\n"
    root = hloparse.parse(text).entry.root
    assert root.name == "n" and root.opcode == ("add" if "add(" in instruction else "negate")
    assert root.operands[0] == "p"
    if "metadata" in instruction:
        assert root.op_name == "a//b /* not a comment */"


def test_operand_shape_glued_to_its_name() -> None:
    """XLA's lexer needs no space between an operand's shape and its name."""
    text = """HloModule glued

ENTRY e {
  p = (f32[2], (f32[2], f32[2])) parameter(0)
  ROOT g = (f32[2], f32[2]) get-tuple-element((f32[2],(f32[2],f32[2]))p), index=1
}
"""
    root = hloparse.parse(text).entry.root
    assert root.operands == ("p",) and root.attributes["index"] == "1"


def test_module_header_and_entry_without_keyword() -> None:
    text = """HloModule hdr, is_scheduled=true, entry_computation_layout={(f32[2]{0})->f32[2]{0}}

first {
  p = f32[2] parameter(0)
  ROOT n = f32[2] negate(p)
}

last {
  p = f32[2] parameter(0)
  ROOT n = f32[2] abs(p)
}
"""
    module = hloparse.parse(text)
    assert module.name == "hdr"
    assert module.is_scheduled
    assert module.attributes["entry_computation_layout"] == "{(f32[2]{0})->f32[2]{0}}"
    assert module.entry_name == "last"  # no ENTRY keyword: XLA takes the last computation
