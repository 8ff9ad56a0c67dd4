"""The token-level grammar (hloparse/hlo.lark's second half, run by hloparse/grammar.py) on
hand-written statements: the format's corners are accepted, bad statements are placed by
explain() and parse_tree(), and the grammar itself is well-formed (no LALR conflicts, every start
symbol defined, the statement-level parser compiling only its own rules). Its proof on the
corpus is in test_parser_grammar.py."""

from __future__ import annotations

import re

import pytest
from lark import Tree

from hloparse import grammar
from hloparse.errors import HloParseError

# ---- the format's corners, one statement each ------------------------------------------------------------

GOOD_STATEMENTS = [
    ("instruction_statement", "ROOT %x = f32[2,3]{1,0:T(8,128)(2,1)S(1)} add(f32[2,3]{1,0} %a, %b)"),
    ("instruction_statement", "add.1 = f32[] add(a, b)"),
    ("instruction_statement", "c = f8e4m3fn[2]{0:E(8)} constant({1, 2})"),
    ("instruction_statement", "p = f32[<=4,?]{1,0:D(D,C+)} parameter(0)"),
    ("instruction_statement", "t = ((f32[2]), f32[4], u32[]) all-gather-start(f32[2] x), dimensions={0}, "
                              "replica_groups=[2,4]<=[4,2]T(1,0)"),
    ("instruction_statement", "t = () tuple()"),
    ("instruction_statement", "k = token[] after-all()"),
    ("instruction_statement", "c = f32[2,2] constant({ { 1, 2 }, { 3, 4 } })"),
    ("instruction_statement", "c = (f32[], s32[2]) constant(( 1, {2, 3} ))"),
    ("instruction_statement", "c = f32[3] constant({-inf, nan(0x7f), inf})"),
    ("instruction_statement", "c = pred[2] constant({true, false})"),
    ("instruction_statement", "c = s32[] constant(0x1F)"),
    ("instruction_statement", "c = f32[100] constant({...})"),
    ("instruction_statement", "p = f32[5] pad(a, b), padding=0_0x1_1_2"),
    ("instruction_statement", "r = f32[] reduce-window(a, b), window={size=3x3 stride=2x2 pad=1_1x1_-1 "
                              "lhs_dilate=1x1 rhs_reversal=0x1}, to_apply=%add"),
    ("instruction_statement", "r = f32[] convolution(a, b), dim_labels=b01f_01io->b01f, window={size=3x3}"),
    ("instruction_statement", "s = f32[2] slice(a), slice={[0:4:1], [2:3]}"),
    ("instruction_statement", "d = f32[] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, "
                              "lhs_batch_dims={}, rhs_batch_dims={}"),
    ("instruction_statement", "r = f32[] all-reduce(a), replica_groups={{0,1},{2,3}}, channel_id=1, "
                              "to_apply={ x = f32[] parameter(0) y = f32[] parameter(1) ROOT z = f32[] add(x, y) }"),
    ("instruction_statement", "c = f32[] collective-permute(a), source_target_pairs={{0,1},{1,0}}"),
    ("instruction_statement", "s = f32[] copy(a), sharding={{replicated}, {maximal device=0}, "
                              "/*index=2*/{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}}"),
    ("instruction_statement", "s = f32[] copy(a), sharding={devices=[2,2]<=[4] last_tile_dims={manual} "
                              "metadata={op_name=\"x\"}}"),
    ("instruction_statement", "s = f32[] copy(a), sharding={mesh['x'=2,'y'=2] [{'x'}, {}], unreduced={'y'}}"),
    ("instruction_statement", "g = f32[] get-tuple-element(%t#1), index=0, control-predecessors={%a, b}"),
    ("instruction_statement", "c = f32[] custom-call(), custom_call_target=\"x\", "
                              "backend_config=\"{\\\"a\\\":\\\"b\\\"}\", "
                              "frontend_attributes={_xla_x=\"y\", z={{0,1}}}, "
                              "metadata={op_name=\"a\" source_file=\"x.py\" source_line=12 stack_frame_id=3}"),
    ("instruction_statement", "c = f32[] custom-call(), backend_config={\"a\": {\"b\": [1, {}]}, \"c\": 2}"),
    ("instruction_statement", "w = (s32[], f32[]) while(t), condition=%c, body=%b"),
    ("instruction_statement", "c = f32[] conditional(p, a, b), branch_computations={%b0, %b1}"),
    ("instruction_statement", "s = f32[4] sort(a), dimensions={0}, is_stable=true, to_apply=cmp"),
    ("instruction_statement", "a = f32[] add(f32[] constant(1), multiply(x, y))"),
    ("instruction_statement", "a = f32[] add(f32[] x, /*index=1*/f32[] y) // a comment"),
    ("instruction_statement", "s = f32[2] async-start(x), calls=%comp, async_execution_thread=\"host\""),
    ("computation_heading_statement", "ENTRY %main (p: f32[2], q: (s32[], f32[])) -> f32[2]{0} {"),
    ("computation_heading_statement", "%fused_computation {"),
    ("computation_end", "}, execution_thread=\"host\""),
    ("module_header_statement", "HloModule m, is_scheduled=true, entry_computation_layout={(f32[2]{0})->f32[2]{0}}, "
                                "input_output_alias={ {0}: (0, {}, may-alias) }, num_partitions=2"),
    ("table_name_statement", "FileLocations"),
    ("table_row_statement", "1 {file_name_id=1 function_name_id=1 line=153 end_line=153 column=2 end_column=31}"),
    ("table_row_statement", '2 "jax_tests/example_a.py"'),
    ("hlo_module", "HloModule m\nENTRY e { ROOT c = f32[] constant(1) }"),
]


@pytest.mark.parametrize("start,text", GOOD_STATEMENTS)
def test_good_statements_are_accepted(start: str, text: str) -> None:
    assert grammar.explain(text, start) is None, grammar.explain(text, start)
    assert isinstance(grammar.parse_tree(text, start), Tree)


BAD_STATEMENTS = [
    "x = f32[2 add(a)",                         # unclosed dimensions
    "x = f33[2] add(a)",                        # no such element type
    "x = f32[2] add(a",                         # truncated
    "x = f32[2] add(a), dimensions={1,",        # truncated attribute
    "x = f32[2]{1,0:Q(1)} add(a)",              # no such layout item
    "x = f32[] convolution(a, b), dim_labels=00_01->10",
    "x = f32[] reduce-window(a), window={pad=1_1_0 size=1}",
    "x = f32[] all-reduce(a), replica_groups=[2,4]<=",
    "x = f32[] copy(a), sharding={devices=[2]0,1 bogus}",
    "x = f32[] constant(}{1, 2}})",
    "x = f32[] add(a, b) garbage",
    "ROOT ROOT x = f32[] add(a)",
    "= f32[] add(a)",
    "",
    "   ",
    "\x00\x01\x02",
    "x = f32[] add(a), metadata={op_name=\"unterminated}",
    "x = f32[] add(a), , y=1",
]


@pytest.mark.parametrize("text", BAD_STATEMENTS)
def test_explain_points_into_the_text(text: str) -> None:
    result = grammar.explain(text, "instruction_statement")
    assert result is not None, f"accepted {text!r}"
    offset, expected = result
    assert 0 <= offset <= len(text)
    assert expected.strip()
    with pytest.raises(HloParseError) as info:
        grammar.parse_tree(text, "instruction_statement")
    assert info.value.line == text.count("\n", 0, offset) + 1
    assert info.value.expected == expected


def test_explain_names_the_place_and_what_was_expected() -> None:
    text = "x = f32[2] add(a), dimensions={1,x}"
    offset, expected = grammar.explain(text, "instruction_statement")
    assert text[offset:] == "x}"
    assert "integer" in expected
    offset, expected = grammar.explain("x = f32[2] add(a", "instruction_statement")
    assert offset == len("x = f32[2] add(a")
    assert "')'" in expected


def test_explain_survives_truncation_and_noise_anywhere() -> None:
    """Every prefix, and every one-character corruption, of real statements: explain never raises,
    and always answers inside the text."""
    statements = [text for start, text in GOOD_STATEMENTS if start == "instruction_statement"][:12]
    for text in statements:
        for cut in range(len(text) + 1):
            result = grammar.explain(text[:cut], "instruction_statement")
            assert result is None or 0 <= result[0] <= cut
        for k in range(0, len(text), 3):
            noisy = text[:k] + "\u00e9}" + text[k + 1:]
            result = grammar.explain(noisy, "instruction_statement")
            assert result is None or (0 <= result[0] <= len(noisy) and result[1])


def test_parse_tree_error_carries_line_column_and_text() -> None:
    text = "HloModule m\n\nENTRY e {\n  ROOT c = f32[2] constant({1, 2)\n}\n"
    with pytest.raises(HloParseError) as info:
        grammar.parse_tree(text)
    err = info.value
    assert (err.line, err.text) == (4, "ROOT c = f32[2] constant({1, 2)")
    assert err.column == text.split("\n")[3].index(")") + 1
    assert err.expected and "expected" in str(err)


def test_wrong_start_is_a_programming_error() -> None:
    with pytest.raises(ValueError):
        grammar.explain("x = f32[] add(a)", "instruction")
    with pytest.raises(TypeError):
        grammar.explain(b"x = f32[] add(a)", "instruction_statement")  # type: ignore[arg-type]


def test_statement_level_parser_compiles_only_the_statement_rules() -> None:
    """parser.py builds the statement level from the part of hlo.lark above the token level: every
    process pays for compiling it, so it must not pull the token level in."""
    from hloparse.parser import TOKEN_LEVEL_MARKER, _structure_parser

    assert grammar.grammar_text().count(TOKEN_LEVEL_MARKER) == 1
    rules = {rule.origin.name for rule in _structure_parser().rules}
    assert rules <= {"start", "module_header", "_top_level", "stack_table", "computation", "instruction"} | {
        r for r in rules if r.startswith("__")}, rules
    token_level = grammar.grammar_text().partition(TOKEN_LEVEL_MARKER)[2]
    assert "instruction_statement:" in token_level and "hlo_module:" in token_level


def test_grammar_has_no_lalr_conflicts() -> None:
    """Lark resolves a shift/reduce conflict silently (as a shift): the grammar must have none, so
    that every text has one reading."""
    import logging

    from lark import Lark, logger

    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    level, handlers = logger.level, logger.handlers
    logger.handlers = [handler]  # Lark's own handler would print every unused rule
    logger.setLevel(logging.DEBUG)
    try:
        Lark(grammar.grammar_text(), parser="lalr", lexer="contextual", start=list(grammar.STARTS))
    finally:
        logger.handlers = handlers
        logger.setLevel(level)
    assert not [r for r in records if "conflict" in r.lower()], records


def test_every_start_symbol_is_in_the_grammar() -> None:
    for start in grammar.STARTS:
        assert re.search(rf"^{start}:", grammar.GRAMMAR_PATH.read_text(), re.M), start
