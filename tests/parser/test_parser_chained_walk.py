"""The builder's walk runs on from one small computation's ROOT through its `}` to the next
one-line heading (hloparse/parser.py: _walk): the module, its lines and its errors must be those
the statement-by-statement path gives."""

from __future__ import annotations

import pytest

import hloparse
from hloparse.errors import HloParseError

_REDUCER = ("%r{i} (a: f32[], b: f32[]) -> f32[] {{\n  %a{i} = f32[] parameter(0)\n  %b{i} = f32[] parameter(1)\n"
            "  ROOT %c{i} = f32[] add(%a{i}, %b{i})\n}}\n\n")
_REDUCERS = "HloModule m\n\n" + "".join(_REDUCER.format(i=i) for i in range(4))
_ENTRY = "ENTRY %e {\n  ROOT p = f32[] parameter(0)\n}\n"


def test_chained_computations_keep_their_lines_and_columns() -> None:
    module = hloparse.parse(_REDUCERS.replace("%r2 (", "   %r2 (") + _ENTRY)
    assert [(c.name, c.line) for c in module.computations] == [("r0", 3), ("r1", 9), ("r2", 15), ("r3", 21),
                                                               ("e", 27)]
    assert [(i.name, i.line, i.column) for i in module.computations[2].instructions] == [
        ("a2", 16, 3), ("b2", 17, 3), ("c2", 18, 3)]
    assert module.computations[2].root.name == "c2"


@pytest.mark.parametrize(("text", "where", "message"), [
    (_REDUCERS + _REDUCER.format(i=2) + _ENTRY, "27:2", "computation 'r2' is defined twice"),
    (_REDUCERS.replace("add(%a2, %b2)", "add(%a2, %b2)\n  ROOT %d2 = f32[] add(%a2, %b2)") + _ENTRY, "19:3",
     "one computation should have only one ROOT"),
    (_REDUCERS.replace("b: f32[]) -> f32[] {\n  %a2", "b: foo[]) -> f32[] {\n  %a2") + _ENTRY, "15:5",
     "unknown element type 'foo'"),
    (_REDUCERS.replace("%r2 (", "ENTRY %r2 (") + _ENTRY, "27:1", "expects only one ENTRY computation"),
    (_REDUCERS + "ENTRY %e {\n", "27:11", "found end of input (expected '}' or an instruction)"),
    (_REDUCERS.replace("b: f32[]) -> f32[] {\n  %a2", "b: f32[] -> f32[] {\n  %a2") + _ENTRY, "15:1",
     "found an instruction (expected a computation heading"),
])
def test_errors_in_chained_computations_are_located_as_before(text: str, where: str, message: str) -> None:
    with pytest.raises(HloParseError) as error:
        hloparse.parse(text)
    assert f"<string>:{where}: {message}" in str(error.value)
