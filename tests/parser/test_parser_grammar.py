"""The token-level grammar (the second half of hloparse/hlo.lark, run by hloparse/grammar.py)
covers the HLO text format, and reads it as hloparse.parse does.

- Every statement form of the corpus modules XLA accepts is accepted: each statement gets a form
  key (its kind; for an instruction its opcode, the forms of its attribute values, its shape and
  layout forms, whether its operands carry shapes, ...), and the first statement of every form
  plus a deterministic sample of the rest is parsed, each from the start symbol of its kind.
  Whole small modules are parsed from `hlo_module`.
- On those statements and modules, the instruction names, opcodes, operand names (in order), ROOT
  flags and attribute keys read from the grammar's tree equal those of hloparse.parse on the same
  module, and so do computation names, the ENTRY and the module header's attribute keys.
- On `_malformed/`, the grammar rejects every file whose XLA error is a syntax error (by the
  category of XLA's message, never file by file), at the line XLA reports; the rest are
  well-formed text XLA rejects for what it means, which the grammar may accept.
Hand-written statements, explain() and the grammar's own well-formedness: test_parser_grammar_units.py.
"""

from __future__ import annotations

import csv
import re
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from lark import Token, Tree

import hloparse
from hloparse import grammar
from hloparse.errors import HloParseError
from hloparse.ir import Instruction, Module
from hloparse.statements import split_statements

START_OF_KIND = {
    "MODULE_HEADER": "module_header_statement",
    "TABLE_NAME": "table_name_statement",
    "TABLE_ROW": "table_row_statement",
    "COMPUTATION_HEADER": "computation_heading_statement",
    "INSTRUCTION": "instruction_statement",
    "COMPUTATION_END": "computation_end",
}
SAMPLE_ONE_IN = 293  # besides the first of each form, about one statement in this many
SMALL_MODULE_BYTES = 20_000  # whole modules up to this size are parsed from hlo_module


# ---- reading the grammar's tree --------------------------------------------------------------------

@dataclass
class Inst:
    """What the grammar says of one instruction."""

    name: str
    opcode: str
    operands: tuple[str, ...]
    is_root: bool
    attribute_keys: tuple[str, ...]  # sorted
    inline: dict[str, list[Inst]] = field(default_factory=dict)  # attribute key -> inline body


INSTRUCTION_RULES = ("hlo_instruction", "root_instruction")
OPERATIONS = ("call_operation", "parameter_operation", "constant_operation")


def _name(node: Tree | Token) -> str:
    token = node.children[0] if isinstance(node, Tree) else node
    return str(token).lstrip("%")


def read_instruction(tree: Tree) -> Inst:
    is_root = tree.data == "root_instruction"
    children = tree.children[1:] if is_root else tree.children
    name = _name(children[0])
    at = next(k for k, c in enumerate(children) if isinstance(c, Tree) and c.data in OPERATIONS)
    operation, attributes = children[at], children[at + 1:]
    keys = [str(a.children[0]) for a in attributes]
    if operation.data == "parameter_operation":
        opcode, operands = "parameter", ()
        keys.append("parameter_number")
    elif operation.data == "constant_operation":
        opcode, operands = "constant", ()
        keys.append("literal")
    else:
        opcode = _name(operation.children[0])
        names = []
        for i, operand in enumerate(operation.children[1:]):
            if operand.data == "nested_operand":  # XLA (and hloparse) name it after its user
                names.append(f"{name}.operand{i}.anon")
            else:
                ref = operand.children[-1]
                names.append("".join(str(t) for t in ref.children).lstrip("%"))
        operands = tuple(names)
    inline = {str(a.children[0]): read_instructions(a.children[1]) for a in attributes
              if a.data == "callee_attribute" and isinstance(a.children[1], Tree)
              and a.children[1].data == "inline_computation"}
    return Inst(name, opcode, operands, is_root, tuple(sorted(keys)), inline)


def read_instructions(parent: Tree) -> list[Inst]:
    return [read_instruction(c) for c in parent.children if isinstance(c, Tree) and c.data in INSTRUCTION_RULES]


@dataclass
class Comp:
    name: str
    is_entry: bool
    instructions: list[Inst]


def read_module(tree: Tree) -> tuple[list[str], list[Comp]]:
    """(header attribute keys, computations) of an hlo_module tree."""
    header_keys: list[str] = []
    computations = []
    for child in tree.children:
        if child.data == "module_header_statement":
            header_keys = [str(a.children[0]) for a in child.children[2:]]
        elif child.data in ("hlo_computation", "entry_computation"):
            heading = child.children[0]
            is_entry = heading.data == "entry_heading"
            name = _name(heading.children[1] if is_entry else heading.children[0])
            computations.append(Comp(name, is_entry, read_instructions(child)))
    return header_keys, computations


# ---- what hloparse read -----------------------------------------------------------------------------

_SYNTHESISED_INSTRUCTION = re.compile(r"\.operand\d+\.anon$|#")  # nested operands, `%t#1` accesses
_ASYNC_SUFFIX = {"async-start": "-start", "async-update": "-update", "async-done": "-done"}


def written(module: Module, inst: Instruction) -> tuple[str, tuple[str, ...]]:
    """(opcode, sorted attribute keys) as the text wrote them. hloparse expands the async
    shorthand (`all-gather-start`) into an async-start and its wrapped computation, whose op takes
    the attributes that are not the wrapper's."""
    keys = set(inst.attributes)
    base = inst.attributes.get("async_wrapped_opcode")
    if base is None or inst.opcode not in _ASYNC_SUFFIX:
        return inst.opcode, tuple(sorted(keys))
    keys.discard("async_wrapped_opcode")
    if inst.opcode == "async-start":
        wrapped = module.computation(f"{inst.name}.async_wrapped").by_name[f"{inst.name}.wrapped"]
        keys |= set(wrapped.attributes)
    return base + _ASYNC_SUFFIX[inst.opcode], tuple(sorted(keys))


def compare(module: Module, computation: str, ours: list[Inst], theirs: list[Instruction], where: str) -> list[str]:
    """Differences between the grammar's and hloparse's reading of the same instructions."""
    theirs = [i for i in theirs if not _SYNTHESISED_INSTRUCTION.search(i.name)]
    if [i.name for i in ours] != [i.name for i in theirs]:
        return [f"{where}: names {[i.name for i in ours]} != hloparse {[i.name for i in theirs]}"]
    problems = []
    for a, b in zip(ours, theirs):
        opcode, keys = written(module, b)
        mine = (a.opcode, a.operands, a.is_root, a.attribute_keys)
        if mine != (opcode, b.operands, b.is_root, keys):
            problems.append(f"{where}: {a.name}: grammar {mine} != hloparse {(opcode, b.operands, b.is_root, keys)}")
        for key, body in a.inline.items():
            inner = f"{computation}.{a.name}.{key}.inline"
            problems += compare(module, inner, body, list(module.computation(inner).instructions), f"{where} {inner}")
    return problems


def compare_module(module: Module, tree: Tree, where: str) -> list[str]:
    header_keys, computations = read_module(tree)
    problems = []
    if sorted(header_keys) != sorted(module.attributes):
        problems.append(f"{where}: header keys {sorted(header_keys)} != hloparse {sorted(module.attributes)}")
    named = [c for c in module.computations if not c.name.endswith((".inline", ".async_wrapped"))]
    if [c.name for c in computations] != [c.name for c in named]:
        return problems + [f"{where}: computations {[c.name for c in computations]} != {[c.name for c in named]}"]
    entries = [c.name for c in computations if c.is_entry] or [computations[-1].name]
    if entries != [module.entry_name]:
        problems.append(f"{where}: entry {entries} != hloparse {module.entry_name}")
    for comp, theirs in zip(computations, named):
        problems += compare(module, comp.name, comp.instructions, list(theirs.instructions), f"{where} {comp.name}")
    return problems


# ---- form keys ----------------------------------------------------------------------------------------

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_WORD = re.compile(r"%?[A-Za-z_][\w.\-]*")
_DIGITS = re.compile(r"\d+")
_SPACE = re.compile(r"\s+")
_RUN = re.compile(r"([%\w]+|\{[^{}]*\}|\([^()]*\)|\[[^\[\]]*\])(?:\s*,\s*\1)+")
_LAYOUT_DETAILS = re.compile(r"\{[\d,]*:([^{}]*)\}")


def value_form(text: str, limit: int = 60) -> str:
    """The shape of a piece of text: strings, words and numbers replaced by S, a and N, spaces
    collapsed, and runs of the same item (`N,N,N`, `{N,N},{N,N}`) written once."""
    s = _DIGITS.sub("N", _WORD.sub("a", _STRING.sub("S", text[:400])))
    s = _SPACE.sub(" ", s)
    while True:
        shorter = _RUN.sub(r"\1", s)
        if shorter == s:
            return s[:limit]
        s = shorter


_METADATA_FIELD = re.compile(r"([\w]+)=")
_forms: dict[str, str] = {}


def attribute_form(key: str, value: str) -> str:
    """value_form, cached (most values recur); metadata, different in every instruction, by the
    names of its fields."""
    if key == "metadata":
        return " ".join(_METADATA_FIELD.findall(_STRING.sub("S", value)))
    form = _forms.get(value)
    if form is None:
        form = _forms[value] = value_form(value)
    return form


def instruction_form(text: str, inst: Instruction) -> tuple:
    shape = inst.shape
    shape_kind = "none" if shape is None else "tuple" if shape.is_tuple else shape.element_type[:1]
    layouts = tuple(sorted({_DIGITS.sub("N", d) for d in _LAYOUT_DETAILS.findall(text)}))
    attributes = tuple(sorted((k, attribute_form(k, v)) for k, v in inst.attributes.items()
                              if k not in ("literal", "parameter_number")))
    literal = attribute_form("literal", inst.attributes.get("literal", ""))[:30]
    flags = ("%" in text, "\n" in text.strip(), "/*" in text, "#" in text, text.lstrip().startswith("ROOT"))
    return (inst.opcode, shape_kind, layouts, inst.inline_operand_shapes is not None, attributes, literal, flags)


# ---- the corpus pass ------------------------------------------------------------------------------------

@dataclass
class CorpusReport:
    modules: int = 0
    statements: int = 0  # in all modules
    forms: int = 0
    checked: int = 0  # statements parsed (first of each form, plus the sample)
    whole_modules: int = 0
    whole_module_bytes: int = 0
    compared: int = 0  # instructions whose reading was compared with hloparse's
    rejected: list[str] = field(default_factory=list)  # statements the grammar rejects
    disagreements: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _accepted_files(corpus_index: list[dict[str, str]]) -> list[str]:
    return sorted(r["file"] for r in corpus_index if r["xla_parses"] == "yes")


def _check_statement(report: CorpusReport, module: Module, where: str, kind: str, text: str,
                     computation: str | None, lines: range, by_line: dict[tuple[str, int], list[Instruction]]) -> None:
    try:
        tree = grammar.parse_tree(text, START_OF_KIND[kind])
    except HloParseError as e:
        report.rejected.append(f"{where}: {e.one_line()} | {e.text[:120]}")
        return
    if kind == "INSTRUCTION":
        if computation is None:
            report.disagreements.append(f"{where}: an instruction outside any computation hloparse read")
            return
        ours = read_instructions(tree)
        theirs = [i for line in lines for i in by_line.get((computation, line), ())]
        report.disagreements += compare(module, computation, ours, theirs, where)
        report.compared += len(ours)
    elif kind == "COMPUTATION_HEADER":
        heading = tree.children[0]
        is_entry = heading.data == "entry_heading"
        name = _name(heading.children[1] if is_entry else heading.children[0])
        theirs = [c for c in module.computations if c.line == lines.start]
        if [(name, is_entry)] != [(c.name, c.is_entry) for c in theirs]:
            read = [(c.name, c.is_entry) for c in theirs]
            report.disagreements.append(f"{where}: heading {(name, is_entry)} != hloparse {read}")
    elif kind == "MODULE_HEADER":
        keys = sorted(str(a.children[0]) for a in tree.children[2:])
        if keys != sorted(module.attributes) or _name(tree.children[1]).rstrip(":") != module.name:
            report.disagreements.append(f"{where}: header {keys} != hloparse {sorted(module.attributes)}")


@pytest.fixture(scope="session")
def corpus_report(corpus_dir: Path, corpus_index: list[dict[str, str]]) -> CorpusReport:
    report = CorpusReport()
    seen: set[tuple] = set()
    began = time.perf_counter()
    for file in _accepted_files(corpus_index):
        text = (corpus_dir / file).read_text()
        whole = len(text) <= SMALL_MODULE_BYTES  # parsed whole below, so the sample skips it
        module = hloparse.parse(text, path=file)
        report.modules += 1
        computation_at = {c.line: c.name for c in module.computations}
        instructions_at: dict[int, Instruction] = {}
        by_line: dict[tuple[str, int], list[Instruction]] = {}
        computation = None
        for comp in module.computations:
            for inst in comp.instructions:
                by_line.setdefault((comp.name, inst.line), []).append(inst)
                if not _SYNTHESISED_INSTRUCTION.search(inst.name):
                    instructions_at.setdefault(inst.line, inst)
        for kind, st in split_statements(text):
            report.statements += 1
            if kind == "COMPUTATION_HEADER":
                computation = computation_at.get(st.line)
            inst = instructions_at.get(st.line) if kind == "INSTRUCTION" else None
            if inst is not None:
                form: tuple = (kind, instruction_form(st.text, inst))
            else:
                form = (kind, value_form(st.text, 80))
            new = form not in seen
            if new:
                seen.add(form)
            elif whole or zlib.crc32(f"{file}:{st.line}".encode()) % SAMPLE_ONE_IN:
                continue
            report.checked += 1
            lines = range(st.line, st.line + st.text.count("\n") + 1)
            _check_statement(report, module, f"{file}:{st.line}", kind, st.text, computation, lines, by_line)
        if whole:
            report.whole_modules += 1
            report.whole_module_bytes += len(text)
            try:
                tree = grammar.parse_tree(text, "hlo_module")
            except HloParseError as e:
                report.rejected.append(f"{file} (whole module): {e.one_line()} | {e.text[:120]}")
                continue
            report.disagreements += compare_module(module, tree, file)
            report.compared += sum(len(c.instructions) for c in read_module(tree)[1])
    report.forms = len(seen)
    report.seconds = time.perf_counter() - began
    return report


def test_grammar_accepts_every_statement_form_of_the_corpus(corpus_report: CorpusReport) -> None:
    r = corpus_report
    assert r.modules >= 4000 and r.forms > 1000, "the corpus pass checked less than the corpus holds"
    print(f"\n{r.modules} modules, {r.statements} statements, {r.forms} forms, {r.checked} statements "
          f"parsed, {r.whole_modules} whole modules ({r.whole_module_bytes / 1e6:.1f} MB), {r.compared} "
          f"instructions compared with hloparse, {r.seconds:.1f} s")
    assert not r.rejected, f"{len(r.rejected)} rejected:\n" + "\n".join(r.rejected[:20])


def test_grammar_reads_what_hloparse_reads(corpus_report: CorpusReport) -> None:
    assert corpus_report.compared > 20_000 and corpus_report.whole_modules > 1000
    problems = corpus_report.disagreements
    assert not problems, f"{len(problems)} disagreements:\n" + "\n".join(problems[:20])


# ---- the comparison itself can fail ---------------------------------------------------------------------

SMALL = """HloModule m, is_scheduled=true

add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

ENTRY main (p: f32[4]) -> f32[] {
  %p = f32[4]{0} parameter(0)
  %z = f32[] constant(0)
  ROOT %r = f32[] reduce(f32[4]{0} %p, f32[] %z), dimensions={0}, to_apply=add
}
"""


def test_the_comparison_sees_a_difference() -> None:
    module = hloparse.parse(SMALL)
    assert compare_module(module, grammar.parse_tree(SMALL), "SMALL") == []
    renamed = SMALL.replace("ROOT %r = f32[] reduce(f32[4]{0} %p, f32[] %z)", "ROOT %r = f32[] reduce(%z, %p)")
    assert compare_module(module, grammar.parse_tree(renamed), "SMALL"), "swapped operands went unnoticed"
    extra = SMALL.replace("to_apply=add", "to_apply=add, metadata={op_name=\"r\"}")
    assert compare_module(module, grammar.parse_tree(extra), "SMALL"), "an extra attribute went unnoticed"


def test_value_forms_tell_apart_what_the_grammar_reads_differently() -> None:
    assert value_form("{devices=[2,2]0,1,2,3}") == value_form("{devices=[4,1]3,2,1,0}")
    assert value_form("[2,4]<=[8]") != value_form("{{0,1},{2,3}}")
    assert value_form("{{0,1},{2,3},{4,5}}") == value_form("{{0,1}}")


# ---- malformed inputs ------------------------------------------------------------------------------------

# XLA's messages that mean the text does not follow the format (as opposed to text that follows
# it but means something XLA refuses). Each category must match some file of _malformed/.
SYNTAX_ERRORS: dict[str, re.Pattern[str]] = {
    "an unexpected token": re.compile(r"error: unexpected '.+' token"),
    "a token XLA expected is missing": re.compile(r"error: (expects|Expects) '.+'|error: expects string"),
    "a layout item that does not exist": re.compile(r"error: expected a DimLevelType abbreviation"),
    "window padding that is not low_high": re.compile(r"expects padding_low and padding_high separated by '_'"),
    "a second ENTRY": re.compile(r"error: expects only one ENTRY"),
    "a second ROOT": re.compile(r"error: one computation should have only one ROOT"),
}


def _malformed(corpus_dir: Path) -> list[dict[str, str]]:
    with open(corpus_dir / "_malformed" / "index.csv", newline="") as f:
        return list(csv.DictReader(f))


def _xla_line(xla_error: str) -> int | None:
    m = re.search(r"was parsing (\d+):(\d+): error", xla_error)
    return int(m.group(1)) if m else None


def test_malformed_syntax_is_rejected_where_xla_rejects_it(corpus_dir: Path) -> None:
    rows = _malformed(corpus_dir)
    assert len(rows) >= 20
    matched = {category: 0 for category in SYNTAX_ERRORS}
    accepted_semantic, rejected_semantic = [], []
    for row in rows:
        path = corpus_dir / row["file"]
        text = path.read_text()
        with pytest.raises(HloParseError):
            hloparse.parse(text)  # hloparse rejects them all
        categories = [c for c, pattern in SYNTAX_ERRORS.items() if pattern.search(row["xla_error"])]
        try:
            grammar.parse_tree(text)
            error = None
        except HloParseError as e:
            error = e
        if not categories:
            (accepted_semantic if error is None else rejected_semantic).append(path.name)
            continue
        matched[categories[0]] += 1
        assert error is not None, f"{path.name}: XLA says {categories[0]}, the grammar accepts it"
        assert error.line == _xla_line(row["xla_error"]), f"{path.name}: {error} vs XLA {row['xla_error'][:200]}"
        assert error.text == text.split("\n")[error.line - 1].strip()
    assert all(matched.values()), f"categories matching no file: {[c for c, n in matched.items() if not n]}"
    print(f"\nwell-formed but refused by XLA, accepted by the grammar: {sorted(accepted_semantic)}"
          f"\n... and rejected by it: {sorted(rejected_semantic)}")
