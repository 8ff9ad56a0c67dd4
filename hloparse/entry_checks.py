"""The module header held to the entry computation, as XLA holds it.

A module cut short (a dump truncated mid-way, a paste that lost its end) may still parse: XLA
takes the last computation as the entry when no computation says ENTRY, and so would a reader
that did not look further. The header tells: it describes the real entry's parameters and
results (`entry_computation_layout`) and which outputs alias which parameters
(`input_output_alias`). XLA refuses a module whose header and entry disagree:

- `input_output_alias`: an output index that is no index of the entry root's shape is refused by
  XLA's parser (hlo_input_output_alias_config.cc: "Trying to set up alias at {0} which is an invalid
  index for shape ..."); a parameter number beyond the entry's parameters, or a parameter index
  that is no index of that parameter's shape, by its verifier (HloInputOutputAliasConfig::Verify).
- `entry_computation_layout`: the number of parameters, each parameter's shape and the result
  shape must match the entry's (HloVerifier's VerifyEntryComputationLayout; layouts aside).

What XLA's parser refuses is refused always. What only its verifier refuses (when compiling) is
refused where the entry is a guess (no computation says ENTRY): a module that says ENTRY is read
as XLA's parser reads it (two XLA tests of the corpus carry layouts their entry contradicts, and
XLA's parser takes them). So a truncated module whose header describes another entry is refused,
never analysed as the fragment it is and reported exact.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from hloparse.header import program_shape
from hloparse.ir import Module, Shape
from hloparse.xla_checks import compatible

if TYPE_CHECKING:
    from hloparse.source import SourceLocator

_ALIAS = re.compile(r"\{([\d,\s]*)\}\s*:\s*\(\s*(\d+)\s*,\s*\{([\d,\s]*)\}")


def _index(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.replace(" ", "").split(",") if x)


def _subshape(shape: Shape, index: tuple[int, ...]) -> Shape | None:
    for i in index:
        if shape.element_type != "tuple" or i >= len(shape.tuple_shapes):
            return None
        shape = shape.tuple_shapes[i]
    return shape


def _plain(shape: Shape) -> str:
    if shape.element_type == "tuple":
        return "(" + ", ".join(_plain(s) for s in shape.tuple_shapes) + ")"
    return f"{shape.element_type}[{','.join(map(str, shape.dims))}]"


def check_entry_against_header(module: Module, builder: SourceLocator) -> None:
    entry = module.entry
    params = sorted((i for i in entry.instructions if i.opcode == "parameter"),
                    key=lambda i: int(i.attributes["parameter_number"]))
    root = entry.root.shape
    guessed = not any(c.is_entry for c in module.computations)
    where = f" (no computation is marked ENTRY, so the last one, {entry.name!r}, is taken: is the module cut short?)" \
        if guessed else ""
    alias = module.attributes.get("input_output_alias")
    if alias is not None:
        for m in _ALIAS.finditer(alias):
            output, number, param_index = _index(m.group(1)), int(m.group(2)), _index(m.group(3))
            if _subshape(root, output) is None:
                raise builder.error_at_line(
                    1, f"input_output_alias: output {{{m.group(1).strip()}}} is no index of the entry's result shape "
                    f"{_plain(root)}{where}", "an output index of the entry's result", needle="input_output_alias")
            if not guessed:
                continue  # XLA's parser checks only the output index (its verifier, at compile time, the rest)
            if number >= len(params):
                raise builder.error_at_line(
                    1, f"input_output_alias: parameter {number} does not exist; the entry has {len(params)}{where}",
                    "a parameter of the entry", needle="input_output_alias")
            if _subshape(params[number].shape, param_index) is None:
                raise builder.error_at_line(
                    1, f"input_output_alias: {{{m.group(3).strip()}}} is no index of parameter {number}'s shape "
                    f"{_plain(params[number].shape)}{where}", "an index of the parameter's shape",
                    needle="input_output_alias")
    layout = module.attributes.get("entry_computation_layout")
    if not guessed:
        return  # XLA's parser takes a layout the entry contradicts (its verifier refuses it when compiling)
    shapes = program_shape(layout) if layout is not None else None
    if shapes is None:
        return
    declared_params, declared_result = shapes
    if len(declared_params) != len(params):
        raise builder.error_at_line(
            1, f"entry_computation_layout has {len(declared_params)} parameters, the entry computation "
            f"{entry.name!r} {len(params)}{where}", "the entry's parameters", needle="entry_computation_layout")
    for i, (declared, param) in enumerate(zip(declared_params, params)):
        if not compatible(declared, param.shape):
            raise builder.error_at_line(
                1, f"entry_computation_layout: parameter {i} is {_plain(declared)}, the entry's is "
                f"{_plain(param.shape)}{where}", "the entry's parameter shapes", needle="entry_computation_layout")
    if not compatible(declared_result, root):
        raise builder.error_at_line(
            1, f"entry_computation_layout: the result is {_plain(declared_result)}, the entry's root is "
            f"{_plain(root)}{where}", "the entry's result shape", needle="entry_computation_layout")
