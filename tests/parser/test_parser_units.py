"""Unit tests of the parser's pieces (issue 2): shapes and attribute values. Stack frames, the
call graph, gzip loading and instruction locations are in test_parser_units_module.py."""

from __future__ import annotations


import pytest

import hloparse
from hloparse import Layout, Shape
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


@pytest.mark.parametrize("statement", [
    "%f = f32[2]{0} fusion(%a), kind=kLoop, calls=%fused_computation.1",
    "%c = f32[2]{0} call(%a), to_apply=%helper",
    "%r = f32[] reduce(%a, %z), dimensions={0}, to_apply=%add.1",
    "%s = f32[2]{0} sort(%a), dimensions={0}, to_apply=%less",
    "%w = f32[2]{0} while(%t), condition=%cond, body=%body",
    "%k = f32[2]{0} custom-call(%a), custom_call_target=\"x\", called_computations={%g, %h}",
])
def test_fast_and_full_decoders_agree_on_call_sites(statement: str) -> None:
    # decode_fast has its own path for the usual single callee; it must make what the full
    # decoder makes.
    from hloparse.fast_path import decode_fast
    from hloparse.instructions import decode_statement

    fast = decode_fast(statement, "c")
    full, _ = decode_statement(statement, "c", [], [])
    assert fast is not None and fast.calls == full.calls and fast.calls
