"""Bad input raises one documented exception, HloParseError, placed where the problem is (issue 2).

On every file of the corpus's `_malformed/` (inputs XLA's own parser tests reject on purpose) the
error must point at the line XLA's parser complains about, and by hand-written cases at the usual
ways text goes wrong: empty, truncated, a missing operand, an unknown computation, two ROOTs, a bad
shape, a root that does not match its computation, a constant that overflows, a broken gzip file,
bytes that are not UTF-8.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

import hloparse
from hloparse import HloParseError
from tests.support.corpus import index_rows

ONE_LINE = re.compile(r"^(?P<file>.+):(?P<line>\d+):(?P<column>\d+): (?P<message>[^\n]+?)( \(expected [^\n]+\))?$")


MALFORMED = index_rows("_malformed")


def xla_location(xla_error: str) -> tuple[int, int] | None:
    """The innermost `line:column` XLA reports ("was parsing 11:83: error: ..."), if any. XLA
    crashing (an abort inside its parser) reports none."""
    m = re.search(r"was parsing (\d+):(\d+): error", xla_error)
    return (int(m.group(1)), int(m.group(2))) if m else None


def points_at_same_place(lines: list[str], ours: int, xla: tuple[int, int]) -> bool:
    """Our error line agrees with XLA's when it is the same line, or when XLA's position is the
    first token after the statement we point at: XLA checks some things (infeed's shape, operand
    layout constraints) after it has read the whole instruction, and then reports the position its
    lexer has reached, i.e. the next token (`}` on the next line)."""
    xla_line, xla_column = xla
    if ours == xla_line:
        return True
    if not (ours < xla_line <= len(lines)):
        return False
    between_blank = all(not lines[k - 1].strip() for k in range(ours + 1, xla_line))
    at_first_token = not lines[xla_line - 1][: xla_column - 1].strip()
    return between_blank and at_first_token


def assert_well_formed_error(err: HloParseError, text: str, file: str) -> None:
    """The documented shape of every HloParseError raised on text."""
    lines = text.split("\n")
    assert "internal parser error" not in err.message, f"a parser bug, wrapped: {err}"
    assert err.file == file
    assert 1 <= err.line <= len(lines), f"line {err.line} outside the input's {len(lines)} lines: {err}"
    assert err.column >= 1, err
    assert err.column <= len(lines[err.line - 1]) + 1, f"column {err.column} beyond the end of line {err.line}: {err}"
    assert err.message, err
    assert err.expected, f"no 'expected' in: {err}"
    assert err.text, f"no offending text in: {err}"
    # `text` is (a piece of) the source line the error points at.
    assert err.text.strip() in lines[err.line - 1], (err.text, lines[err.line - 1])
    # str(err) is one line: file:line:col: message (expected ...)
    m = ONE_LINE.match(str(err))
    assert m is not None, repr(str(err))
    assert (m["file"], int(m["line"]), int(m["column"])) == (file, err.line, err.column)
    assert str(err).endswith(f"(expected {err.expected})")


@pytest.mark.parametrize("row", MALFORMED or [None], ids=lambda r: Path(r["file"]).stem[-60:] if r else "none")
def test_malformed_corpus_file(row: dict[str, str] | None, corpus_dir: Path) -> None:
    if row is None:
        pytest.fail(f"no rows in {corpus_dir}/_malformed/index.csv")
    path = corpus_dir / row["file"]
    text = path.read_text(encoding="utf-8")
    with pytest.raises(HloParseError) as info:
        hloparse.load(path)
    err = info.value
    assert_well_formed_error(err, text, str(path))
    where = xla_location(row["xla_error"])
    if where is not None:
        lines = text.split("\n")
        assert points_at_same_place(lines, err.line, where), (
            f"we point at line {err.line} ({lines[err.line - 1].strip()[:80]!r}), XLA at {where[0]}:{where[1]} "
            f"({lines[where[0] - 1].strip()[:80]!r}); XLA says: {row['xla_error'][:200]}; we say: {err}")


def test_malformed_index_is_complete(corpus_dir: Path) -> None:
    """Every file in _malformed/ is in its index (so the parametrised test sees all of them)."""
    files = {p.name for p in (corpus_dir / "_malformed").glob("*.hlo")}
    indexed = {Path(r["file"]).name for r in MALFORMED}
    assert files == indexed and len(files) >= 26


# ---- hand-written bad input ------------------------------------------------------------------

GOOD = """HloModule m

add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

ENTRY main (p: f32[8]) -> f32[] {
  p = f32[8] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[] reduce(p, z), dimensions={0}, to_apply=add
}
"""


def parse_error(text: str) -> HloParseError:
    with pytest.raises(HloParseError) as info:
        hloparse.parse(text, path="bad.hlo")
    return info.value


def test_the_good_module_parses() -> None:
    module = hloparse.parse(GOOD)
    assert module.entry.root.name == "r"


def test_empty_input() -> None:
    for text in ("", "\n\n  \n"):
        err = parse_error(text)
        assert (err.file, err.line, err.column) == ("bad.hlo", 1, 1)
        assert "empty" in err.message
        assert "HloModule" in err.expected
        assert ONE_LINE.match(str(err))


def test_only_a_header() -> None:
    err = parse_error("HloModule m\n")
    assert err.line >= 1 and err.column >= 1 and err.expected
    assert ONE_LINE.match(str(err))


@pytest.mark.parametrize("cut", ["ROOT r = f32[] reduc", "ROOT r = f32[] reduce(p, z), dimensions={0}, to_apply=add\n"])
def test_truncated_module(cut: str) -> None:
    text = GOOD[: GOOD.index(cut) + len(cut)]
    err = parse_error(text)
    assert_well_formed_error(err, text, "bad.hlo")
    assert err.line == 12  # the unfinished statement, not some line before it


def test_missing_operand() -> None:
    text = GOOD.replace("reduce(p, z)", "reduce(q, z)")
    err = parse_error(text)
    assert_well_formed_error(err, text, "bad.hlo")
    assert err.line == 12
    assert "'q'" in err.message
    assert text.split("\n")[11][err.column - 1] == "q", "the column points at the missing operand"


def test_operand_from_another_computation() -> None:
    text = GOOD.replace("reduce(p, z)", "reduce(x, z)")  # x lives in `add`
    err = parse_error(text)
    assert_well_formed_error(err, text, "bad.hlo")
    assert err.line == 12 and "'x'" in err.message


def test_unknown_computation() -> None:
    text = GOOD.replace("to_apply=add", "to_apply=mul")
    err = parse_error(text)
    assert_well_formed_error(err, text, "bad.hlo")
    assert err.line == 12 and "'mul'" in err.message
    assert text.split("\n")[11][err.column - 1:].startswith("mul")


def test_duplicate_root() -> None:
    text = GOOD.replace("  z = f32[] constant(0)", "  ROOT z = f32[] constant(0)")
    err = parse_error(text)
    assert_well_formed_error(err, text, "bad.hlo")
    assert err.line == 12, "XLA points at the second ROOT"
    assert "ROOT" in err.message


def test_duplicate_computation_and_duplicate_entry() -> None:
    text = GOOD.replace("ENTRY main", "ENTRY add")
    err = parse_error(text)
    assert_well_formed_error(err, text, "bad.hlo")
    assert err.line == 9
    text = GOOD + "\nENTRY main2 {\n  ROOT c = f32[] constant(1)\n}\n"
    err = parse_error(text)
    assert_well_formed_error(err, text, "bad.hlo")
    assert err.line == 15 and "ENTRY" in err.message


def test_duplicate_instruction_name() -> None:
    text = GOOD.replace("z = f32[] constant(0)", "p = f32[] constant(0)").replace("reduce(p, z)", "reduce(p, p)")
    err = parse_error(text)
    assert_well_formed_error(err, text, "bad.hlo")
    assert err.line == 11 and "'p'" in err.message


@pytest.mark.parametrize(
    "good,bad,fragment",
    [
        ("p = f32[8] parameter(0)", "p = f32[8 parameter(0)", "f32[8 "),
        ("p = f32[8] parameter(0)", "p = f33[8] parameter(0)", "f33"),
        ("p = f32[8] parameter(0)", "p = f32[8]{1,0} parameter(0)", "{1,0}"),
        ("p = f32[8] parameter(0)", "p = f32[-8] parameter(0)", "-8"),
        ("z = f32[] constant(0)", "z = f32[]] constant(0)", "]"),
    ],
    ids=["unclosed-dims", "unknown-element-type", "layout-rank", "negative-dim", "stray-bracket"],
)
def test_bad_shape(good: str, bad: str, fragment: str) -> None:
    text = GOOD.replace(good, bad)
    err = parse_error(text)
    assert_well_formed_error(err, text, "bad.hlo")
    line = GOOD.split("\n").index("  " + good) + 1
    assert err.line == line, err


def test_root_shape_differs_from_computation() -> None:
    text = GOOD.replace("-> f32[] {", "-> f32[2] {")
    err = parse_error(text)
    assert_well_formed_error(err, text, "bad.hlo")
    assert err.line in (9, 12), "the computation's heading or its ROOT"
    assert "f32[2]" in err.message


@pytest.mark.parametrize(
    "literal,type_",
    [("1e39", "f32"), ("300", "s8"), ("-129", "s8"), ("256", "u8"), ("-1", "u32"), ("70000", "f16"), ("8", "s4")],
)
def test_constant_overflows_its_type(literal: str, type_: str) -> None:
    text = GOOD.replace("z = f32[] constant(0)", f"z = {type_}[] constant({literal})").replace(
        "reduce(p, z)", "reduce(p, p)")
    err = parse_error(text)
    assert_well_formed_error(err, text, "bad.hlo")
    assert err.line == 11 and literal in err.message


@pytest.mark.parametrize(
    "heading",
    [
        "ENTRY main main (p: f32[8]) -> f32[] {",
        "ENTRY main (p: f33[8]) -> f32[] {",
        "ENTRY main (p f32[8] q) -> f32[] {",
        "ENTRY main (: ) -> f32[] {",
        "ENTRY main (p: f32[8]) x -> f32[] {",
        "ENTRY main (p: f32[8]) -> f32[] extra {",
        "ENTRY main (p: f32[8]) -> {",
    ],
)
def test_bad_computation_heading(heading: str) -> None:
    """XLA rejects each of these headings; so must we, at the heading's line."""
    text = GOOD.replace("ENTRY main (p: f32[8]) -> f32[] {", heading)
    err = parse_error(text)
    assert_well_formed_error(err, text, "bad.hlo")
    assert err.line == 9, err


ATTRIBUTE_MODULE = """HloModule m

add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

pair {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT t = (f32[], f32[]) tuple(x, x)
}

ENTRY e {
  a = f32[4,8] parameter(0)
  b = f32[8,2] parameter(1)
  c = f32[] constant(0)
  v = f32[4] parameter(2)
  t = (f32[4,8]) tuple(a)
  ROOT r = INSTRUCTION
}
"""

# Attribute values the cost analysis decodes (through Instruction.dimensions, slice_spec,
# dot_dimension_numbers, ...): XLA's parser rejects each malformed one. Decoding them lazily is fine,
# but then a bad value must still be caught while parsing, or the analysis meets an
# AttributeSyntaxError / ValueError with no file and line.
MALFORMED_ATTRIBUTES = {
    "reduce-dimensions": "f32[4] reduce(a, c), dimensions={1}x, to_apply=add",
    "reduce-dimensions-letters": "f32[4] reduce(a, c), dimensions={1,a}, to_apply=add",
    "transpose-dimensions": "f32[8,4] transpose(a), dimensions={1;0}",
    "scan-dimensions": "(f32[4], f32[]) scan(v, c), dimensions={0}x, num_carries=1, to_apply=pair",
    "slice-stride": "f32[2,8] slice(a), slice={[0:2:x], [0:8]}",
    "dot-contracting": "f32[4,2] dot(a, b), lhs_contracting_dims={1,}, rhs_contracting_dims={0}",
    "dot-contracting-name": "f32[4,2] dot(a, b), lhs_contracting_dims={x}, rhs_contracting_dims={0}",
    "feature-group-count": "f32[4,8] custom-call(a), custom_call_target=\"f\", feature_group_count=x",
    "iota-dimension": "f32[4,8] iota(), iota_dimension=x",
    "gte-index": "f32[4,8] get-tuple-element(t), index=x",
}


@pytest.mark.parametrize("instruction", MALFORMED_ATTRIBUTES.values(), ids=list(MALFORMED_ATTRIBUTES))
def test_malformed_attribute_values_are_rejected(instruction: str) -> None:
    text = ATTRIBUTE_MODULE.replace("INSTRUCTION", instruction)
    err = parse_error(text)
    assert_well_formed_error(err, text, "bad.hlo")
    assert err.line == 21, err


def test_well_formed_attribute_module_parses() -> None:
    """The module the malformed-attribute cases start from is fine with each attribute well formed."""
    good = {
        "reduce": "f32[4] reduce(a, c), dimensions={1}, to_apply=add",
        "transpose": "f32[8,4] transpose(a), dimensions={1,0}",
        "slice": "f32[2,8] slice(a), slice={[0:2:1], [0:8]}",
        "dot": "f32[4,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
        "iota": "f32[4,8] iota(), iota_dimension=1",
        "gte": "f32[4,8] get-tuple-element(t), index=0",
        "scan": "(f32[4], f32[]) scan(v, c), dimensions={0}, num_carries=1, to_apply=pair",
        "feature-group-count": "f32[4,8] custom-call(a), custom_call_target=\"f\", feature_group_count=1",
    }
    for instruction in good.values():
        module = hloparse.parse(ATTRIBUTE_MODULE.replace("INSTRUCTION", instruction))
        root = module.entry.root
        assert root.dimensions is None or root.dimensions in ((0,), (1,), (1, 0))
    assert hloparse.parse(ATTRIBUTE_MODULE.replace("INSTRUCTION", good["slice"])).entry.root.slice_spec == (
        (0, 2, 1), (0, 8, 1))


def test_declared_operand_shape_must_match() -> None:
    """An operand written with its shape must have that shape (XLA: "The declared operand shape ...
    is not compatible with the shape of the operand instruction")."""
    text = GOOD.replace("reduce(p, z)", "reduce(f32[3] p, z)")
    err = parse_error(text)
    assert_well_formed_error(err, text, "bad.hlo")
    assert err.line == 12
    text = GOOD.replace("reduce(p, z)", "reduce(8[f32] p, z)")
    err = parse_error(text)
    assert_well_formed_error(err, text, "bad.hlo")
    assert err.line == 12
    assert hloparse.parse(GOOD.replace("reduce(p, z)", "reduce(f32[8] p, f32[] z)")).entry.root.operands == ("p", "z")


def test_duplicate_parameter_number() -> None:
    text = GOOD.replace("  y = f32[] parameter(1)", "  y = f32[] parameter(0)")
    err = parse_error(text)
    assert_well_formed_error(err, text, "bad.hlo")
    assert err.line == 5, "XLA points at the second parameter(0)"


@pytest.mark.parametrize(
    "good,bad,line",
    [
        ("z = f32[] constant(0)", "z = f32[] add(z, z)", 11),  # uses itself
        ("z = f32[] constant(0)", "z = f32[] negate(w)\n  w = f32[] negate(z)", 11),  # a cycle of two
        ("  z = f32[] constant(0)\n  ROOT r = f32[] reduce(p, z), dimensions={0}, to_apply=add",
         "  ROOT r = f32[] reduce(p, z), dimensions={0}, to_apply=add\n  z = f32[] constant(0)", 11),  # used first
    ],
    ids=["self-use", "cycle", "use-before-definition"],
)
def test_operands_must_be_defined_before_use(good: str, bad: str, line: int) -> None:
    """XLA's parser resolves an operand only among the instructions above it ("cannot parse as an
    instruction name or as a nested instruction" at the use); a dataflow cycle must never reach the
    analysis."""
    text = GOOD.replace(good, bad)
    assert text != GOOD
    err = parse_error(text)
    assert_well_formed_error(err, text, "bad.hlo")
    assert err.line == line, err


def test_computation_calling_itself() -> None:
    """XLA: "computation does not exist: add" (a callee must be defined above its caller); a
    recursive call graph has no execution count."""
    text = GOOD.replace("ROOT s = f32[] add(x, y)", "ROOT s = f32[] call(x, y), to_apply=add")
    err = parse_error(text)
    assert_well_formed_error(err, text, "bad.hlo")
    assert err.line == 6, err


def test_get_tuple_element_index_out_of_range() -> None:
    """A tuple of one element has no element 3 (XLA 0.10.2 hangs on this text; it must not parse)."""
    gte = "t = (f32[]) tuple(z0)\n  z = f32[] get-tuple-element(t), index=3"
    text = GOOD.replace("z = f32[] constant(0)", gte).replace(
        "  p = f32[8] parameter(0)", "  p = f32[8] parameter(0)\n  z0 = f32[] constant(0)")
    err = parse_error(text)
    assert_well_formed_error(err, text, "bad.hlo")
    assert err.line == 13, err


def test_unbalanced_brackets_and_stray_text() -> None:
    for text in (GOOD.replace("dimensions={0}", "dimensions={0"),
                 GOOD.replace("reduce(p, z)", "reduce(p, z"),
                 GOOD + "garbage here\n",
                 GOOD.replace("ENTRY main", "ENTRY main main")):
        err = parse_error(text)
        assert_well_formed_error(err, text, "bad.hlo")


@pytest.mark.parametrize("bad, column, expected", [
    ("  ROOT .s = f32[] add(x, y)", 8, "a name"),  # a name cannot start with '.'
    ("  %=s = f32[] add(x, y)", 3, "a %name"),
])
def test_an_unreadable_instruction_head_is_placed_by_the_grammar(bad: str, column: int, expected: str) -> None:
    # The decoder cannot read `[ROOT] name =` here at all; the reference grammar (hlo.lark's token
    # level) says at which character the text stops being HLO and what it wanted there.
    text = GOOD.replace("  ROOT s = f32[] add(x, y)", bad)
    err = parse_error(text)
    assert_well_formed_error(err, text, "bad.hlo")
    assert (err.line, err.column) == (6, column), err
    assert expected in err.expected, err


# ---- hloparse.load on files --------------------------------------------------------------

def test_load_plain_and_gzip_give_the_same_module(tmp_path: Path) -> None:
    plain = tmp_path / "m.hlo"
    plain.write_text(GOOD)
    packed = tmp_path / "m.hlo.gz"
    packed.write_bytes(gzip.compress(GOOD.encode()))
    a, b = hloparse.load(plain), hloparse.load(packed)
    assert [c.name for c in a.computations] == [c.name for c in b.computations]
    assert b.path == str(packed)


CORRUPT_GZIP = {
    "truncated": lambda good: good[: len(good) // 2],
    "magic-only": lambda good: good[:2],
    "crc": lambda good: good[:-8] + b"\0\0\0\0" + good[-4:],
    "bad-deflate-block": lambda good: b"\x1f\x8b\x08\x00" + b"\x00" * 6 + b"\xff" * 5,
    "flipped-byte": lambda good: good[:12] + bytes([good[12] ^ 0xFF]) + good[13:],
}


@pytest.mark.parametrize("damage", sorted(CORRUPT_GZIP))
def test_load_corrupt_gzip(damage: str, tmp_path: Path) -> None:
    path = tmp_path / "m.hlo.gz"
    path.write_bytes(CORRUPT_GZIP[damage](gzip.compress(GOOD.encode())))
    with pytest.raises(HloParseError) as info:
        hloparse.load(path)
    err = info.value
    assert err.file == str(path)
    assert "gzip" in err.message
    assert err.line >= 1 and err.column >= 1, f"HloParseError lines and columns are 1-based: {err}"
    assert ONE_LINE.match(str(err)), str(err)


def test_load_non_utf8(tmp_path: Path) -> None:
    raw = GOOD.replace("z = f32[] constant(0)", "z = f32[] constant(0) \udcff").encode("utf-8", "surrogateescape")
    for name, data in (("m.hlo", raw), ("m.hlo.gz", gzip.compress(raw))):
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(HloParseError) as info:
            hloparse.load(path)
        err = info.value
        assert (err.file, err.line, err.column) == (str(path), 11, 25), err
        assert "UTF-8" in err.message
        assert err.text and "constant(0)" in err.text, f"the offending line should be in `text`: {err.text!r}"
        assert err.expected, f"no 'expected' in: {err}"
        assert ONE_LINE.match(str(err)), str(err)


def test_load_unreadable(tmp_path: Path) -> None:
    """A file that is not there (or not a file) is Python's OSError, naming the file, not a parse error."""
    for path, error in ((tmp_path / "missing.hlo", FileNotFoundError), (tmp_path, IsADirectoryError)):
        with pytest.raises(error) as info:
            hloparse.load(path)
        assert not isinstance(info.value, HloParseError)
        assert info.value.filename == str(path)


def test_error_is_a_value_error_with_the_documented_fields() -> None:
    err = parse_error(GOOD.replace("reduce(p, z)", "reduce(q, z)"))
    assert isinstance(err, ValueError)
    assert {"file", "line", "column", "text", "expected", "message"} <= set(vars(err))
    moved = err.with_file("other.hlo")
    assert (moved.file, moved.line, moved.column, moved.text, moved.expected) == (
        "other.hlo", err.line, err.column, err.text, err.expected)
