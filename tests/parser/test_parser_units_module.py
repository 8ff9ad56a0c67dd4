"""Unit tests of the parser's module-level results (issue 2): stack frames and source locations,
the call graph's roles, `hloparse.load` on gzip, where each instruction sits in the text, and the
layouts and comments XLA's whitespace-insensitive lexer accepts. Shapes and attribute values are in
test_parser_units.py."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

import hloparse
from hloparse import CallRole, HloParseError, SourceLocation
from hloparse.shapes import parse_shape


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
    from hloflops.graph import control_order, with_descendants

    graph = hloparse.parse(CALLS.replace("ENTRY main {", "unused {\n  u = f32[] parameter(0)\n  ROOT v = f32[] "
                                         "negate(u)\n}\n\nENTRY main {")).call_graph()
    assert "unused" not in with_descendants(graph, ["main"])
    order = control_order(graph)
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


def test_fast_computation_constructor_sets_every_field() -> None:
    # new_computation bypasses the dataclass __init__ for speed; a field added to Computation
    # must not be left unset by it.
    import dataclasses

    from hloparse.ir import Computation
    from hloparse.parser import new_computation

    made = new_computation("c", (), True, "main", 7)
    assert set(made.__dict__) == {f.name for f in dataclasses.fields(Computation)}
    assert made == made and made.is_entry and made.execution_thread == "main" and made.line == 7
    module = hloparse.parse("HloModule m\nENTRY e {\n  ROOT p = f32[] parameter(0)\n}\n")
    assert module.computations[0].by_name == {"p": module.computations[0].instructions[0]}
