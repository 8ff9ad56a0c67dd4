"""Reject modules that are well-formed text but inconsistent, as XLA's parser and verifier do.

Each check raises HloParseError located at the offending instruction (via the builder, which
knows the source text). Checks cover what XLA's parser itself rejects: missing operands and
computations, operand counts, shapes that contradict the computation signature, constants that
do not fit their type, and attribute values whose syntax XLA checks eagerly.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Mapping

from hloparse import opcodes
from hloparse.attributes import AttributeSyntaxError, parse_dim_labels, parse_slice, parse_window, split_top_level
from hloparse.entry_checks import check_entry_against_header
from hloparse.infer import DERIVED_SHAPE_OPCODES, derived_shape
from hloparse.ir import Instruction, Module, Shape
from hloparse.literals import LiteralError, check_literal
from hloparse.shapes import ShapeSyntaxError, parse_shape
from hloparse.sharding import sharding_error
from hloparse.xla_checks import CHECKED_OPCODES as XLA_CHECKED_OPCODES
from hloparse.xla_checks import (REQUIRED, check_control_predecessors, check_opcode_rules,
                                 compatible, missing_attribute)

if TYPE_CHECKING:
    from hloparse.source import SourceLocator as _Builder  # the parser's builder, seen through its protocol


def validate(module: Module, builder: _Builder) -> None:
    _CONSTRAINT_SHAPES.clear()  # the previous module's
    names = module.by_name
    arity_of = opcodes.ARITY.get
    callees: dict[str, list[tuple[Instruction, str]]] = {}  # the call graph, for the cycle check
    for comp in module.computations:
        # The instructions seen so far, by name: what an operand may refer to. Once the whole
        # computation is checked it is exactly Computation.by_name, so it is kept as that.
        defined: dict[str, Instruction] = {}
        parameter_numbers: set[str] = set()
        for inst in comp.instructions:
            name, operands = inst.name, inst.operands
            for operand in operands:
                if operand not in defined:
                    # XLA resolves an operand among the instructions above it: a later one, or none,
                    # is an error (and a dataflow cycle could not be written otherwise).
                    later = any(i.name == operand for i in comp.instructions)
                    where = "is defined after its use" if later else "does not exist"
                    raise builder.error_at_instruction(
                        inst, f"operand {operand!r} of {inst.name!r} {where} in computation {comp.name!r}",
                        "an instruction defined above, in the same computation", needle=operand)
            if name in defined:
                raise builder.error_at_instruction(inst, f"instruction name {name!r} is used twice",
                                                   "unique instruction names")
            defined[name] = inst
            if inst.calls:
                for site in inst.calls:
                    if site.computation not in names:
                        raise builder.error_at_instruction(
                            inst, f"computation {site.computation!r} called by {name!r} does not exist",
                            "a computation defined in the module", needle=site.computation)
                    callees.setdefault(comp.name, []).append((inst, site.computation))
                    if site.role == "fusion":  # the parser's fresh object: the one assignment of the field
                        names[site.computation].__dict__["is_fusion_body"] = True
            declared = inst.inline_operand_shapes
            if declared is not None:
                for operand, shape in zip(operands, declared):
                    actual = defined[operand].shape
                    # Shapes come from one cache, so the same text is the same object.
                    if shape is not actual and shape is not None and not compatible(shape, actual):
                        raise builder.error_at_instruction(
                            inst, f"The declared operand shape {_plain(shape)} of {operand!r} is not compatible with "
                            f"the shape of the operand instruction, {_plain(actual)}",
                            "the operand's own shape", needle=operand)
            op = inst.opcode
            attrs = inst.attributes
            layout = inst.shape.layout
            arity = _COMMON_ARITY.get(op, _OWN_CHECKS)
            if arity is not _OWN_CHECKS:
                # Most instructions: an opcode without checks of its own (a parameter's number
                # aside), so only the operand count, a layout's details and the values of the
                # attributes checked below (all in the order of the general case further on).
                if op == "parameter":
                    number = attrs["parameter_number"]
                    if number in parameter_numbers:
                        raise builder.error_at_instruction(
                            inst, f"duplicate parameter number {number} in {comp.name}", "each parameter number once")
                    parameter_numbers.add(number)
                if arity is not None and len(operands) != arity or layout is not None and layout.details:
                    _check_instruction(inst, defined, builder)
                elif not attrs or _NOTABLE_ATTRIBUTES.isdisjoint(attrs):
                    continue
                elif not _CHECKED_ATTRIBUTES.isdisjoint(attrs):
                    _check_new_values(inst, defined, builder)
                if "control-predecessors" in attrs:
                    check_control_predecessors(inst, defined, builder)
                continue
            special = op in _SPECIAL_OPCODES  # one test for the opcodes with checks of their own
            arity = arity_of(op)
            if op == "get-tuple-element" and not (layout is not None and layout.details) and _plain_tuple_access(
                    inst, defined):
                pass  # the common case of a common opcode, checked whole by that one test
            elif (arity is not None and len(operands) != arity) or special and op in _CHECKED_OPCODES or (
                layout is not None and layout.details
            ):
                _check_instruction(inst, defined, builder)
            elif attrs and not _CHECKED_ATTRIBUTES.isdisjoint(attrs):
                _check_new_values(inst, defined, builder)
            if special:
                if op in REQUIRED and not REQUIRED[op] <= attrs.keys():
                    raise missing_attribute(inst, builder)
                if op in XLA_CHECKED_OPCODES:
                    check_opcode_rules(inst, defined, builder)
            if attrs and "control-predecessors" in attrs:
                check_control_predecessors(inst, defined, builder)
        if parameter_numbers and parameter_numbers != _NUMBERS_BELOW.get(len(parameter_numbers)) and max(
                map(int, parameter_numbers)) >= len(parameter_numbers):
            # XLA's computation aborts (CHECK param_no < parameter_count) on a gap or a number
            # beyond the count; for us it is input at fault.
            bad = next(i for i in comp.instructions if i.opcode == "parameter"
                       and int(i.attributes["parameter_number"]) >= len(parameter_numbers))
            raise builder.error_at_instruction(
                bad, f"parameter number {bad.attributes['parameter_number']} is not below the parameter count "
                f"{len(parameter_numbers)} of {comp.name}", "parameters numbered 0..N-1", needle="parameter(")
        comp.__dict__["by_name"] = defined  # the cached_property's value, already made
        _check_signature(comp, builder)
    _check_call_cycles(module, callees, builder)
    _check_header(module, builder)
    if "input_output_alias" in module.attributes or "entry_computation_layout" in module.attributes:
        check_entry_against_header(module, builder)


def _check_call_cycles(module: Module, callees: Mapping[str, list[tuple[Instruction, str]]],
                       builder: _Builder) -> None:
    """A computation may not call itself, directly or through others (the call graph is a DAG).
    `callees` lists each computation's call sites as (calling instruction, callee name)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    names = module.by_name
    for root in callees:
        if root in state:
            continue
        stack = [(root, iter(callees[root]))]
        state[root] = 1
        while stack:
            name, pending = stack[-1]
            for inst, callee in pending:
                if state.get(callee) == 1:
                    raise builder.error_at_instruction(
                        inst, f"computation {callee!r} calls itself (through {name!r})", "a call graph without cycles",
                        needle=callee)
                if callee not in state and callee in names:
                    state[callee] = 1
                    stack.append((callee, iter(callees.get(callee, ()))))
                    break
            else:
                state[name] = 2
                stack.pop()


def _check_signature(comp, builder: _Builder) -> None:  # noqa: ANN001
    result = builder.result_shape_of(comp.name)
    if result is not None and not compatible(result, comp.root.shape):
        raise builder.error_at_result_shape(
            comp.name,
            f"Shape of computation {comp.name}, {_plain(result)}, is not compatible with that of its root "
            f"instruction {comp.root.name}, {_plain(comp.root.shape)}",
            "a result shape matching the root instruction's")
    # XLA does not hold parameters to the signature's parameter list, so neither do we.


def _plain(shape: Shape) -> str:
    if shape.is_tuple:
        return "(" + ", ".join(_plain(s) for s in shape.tuple_shapes) + ")"
    return f"{shape.element_type}[{','.join(map(str, shape.dims))}]"


_LAYOUT_LEVEL = re.compile(r"D\(([^)]*)\)")
_CHECKED_OPCODES = frozenset({"constant", "infeed", "conditional", "scan", "get-tuple-element"}) | DERIVED_SHAPE_OPCODES
_INT_LIST = re.compile(r"\{\s*(?:-?\d+(?:\s*,\s*-?\d+)*)?\s*\}")
_INT = re.compile(r"-?\d+")
_INT_LIST_ATTRIBUTES = frozenset(
    {"dimensions", "lhs_contracting_dims", "rhs_contracting_dims", "lhs_batch_dims", "rhs_batch_dims",
     "dynamic_slice_sizes", "fft_length", "offset_dims", "collapsed_slice_dims", "start_index_map",
     "update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims",
     "lhs_ragged_dims", "rhs_group_dims"}
)
_INT_ATTRIBUTES = frozenset(
    {"feature_group_count", "batch_group_count", "iota_dimension", "index", "index_vector_dim", "k",
     "num_carries", "mantissa_bits", "exponent_bits"}
)
# `expects true or false` (XLA's parser reads these as booleans, nothing else).
_BOOL_ATTRIBUTES = frozenset(
    {"custom_call_has_side_effect", "is_stable", "indices_are_sorted", "unique_indices", "constrain_layout",
     "use_global_device_ids", "is_host_transfer", "largest", "left_side", "lower", "unit_diagonal", "is_composite",
     "is_reverse", "is_associative"}
)
# Decoded lazily by the analysis, so checked here: a bad value must fail the parse, not the analysis.
_GOOD_LITERALS: set[tuple[str, Shape]] = set()
_VALUE_CHECKED = _INT_LIST_ATTRIBUTES | _INT_ATTRIBUTES | _BOOL_ATTRIBUTES | {"slice"}
_CHECKED_ATTRIBUTES = _VALUE_CHECKED | {"window", "dim_labels", "operand_layout_constraints", "replica_groups",
                                         "sharding"}
_SPECIAL_OPCODES = frozenset({"parameter"}) | _CHECKED_OPCODES | REQUIRED.keys() | XLA_CHECKED_OPCODES
# Opcode -> operand count (None: any) for the opcodes whose only checks are the common ones
# (parameter's number aside); the others (_OWN_CHECKS) take the general path.
_COMMON_ARITY = {op: arity for op, arity in opcodes.ARITY.items() if op not in _SPECIAL_OPCODES or op == "parameter"}
_OWN_CHECKS = object()
_NOTABLE_ATTRIBUTES = _CHECKED_ATTRIBUTES | {"control-predecessors"}
# Values of _VALUE_CHECKED attributes found good, by attribute: later uses skip the check.
_GOOD_VALUES: dict[str, set[str]] = {key: set() for key in _CHECKED_ATTRIBUTES}


# The parameter numbers of a computation of N parameters, as XLA prints them: {"0", ..., "N-1"}
# (equal: no gap, nothing beyond the count, without an int() each).
_NUMBERS_BELOW = {n: frozenset(map(str, range(n))) for n in range(1, 65)}


def _check_new_values(inst: Instruction, above: Mapping[str, Instruction], builder: _Builder) -> None:
    """_check_instruction for an instruction with some of _CHECKED_ATTRIBUTES, unless their values
    have all been found good before."""
    good_values = _GOOD_VALUES.get
    for key, value in inst.attributes.items():  # a few keys: cheaper than a set intersection
        good = good_values(key)
        if good is not None and value not in good:  # a checked value not seen before: check it
            _check_instruction(inst, above, builder)
            return


def _plain_tuple_access(inst: Instruction, above: Mapping[str, Instruction]) -> bool:
    """Does this get-tuple-element pass all of _check_instruction (one operand, a plain index in
    range, an array shape, no other attribute it checks)? False: let it decide."""
    attrs = inst.attributes
    index = attrs.get("index")
    if (len(inst.operands) != 1 or index is None or not (index.isdigit() and index.isascii()) or inst.shape.is_tuple
            or len(attrs) > 1 and not all(k == "index" or k not in _CHECKED_ATTRIBUTES for k in attrs)):
        return False
    tuple_shape = above[inst.operands[0]].shape
    return tuple_shape.is_tuple and int(index) < len(tuple_shape.tuple_shapes)


def _check_instruction(inst: Instruction, above: Mapping[str, Instruction], builder: _Builder) -> None:
    """The checks few instructions need; `above` has the instructions before inst, by name."""
    op = inst.opcode
    arity = opcodes.ARITY.get(op)
    if arity is not None and len(inst.operands) != arity and op not in ("parameter", "constant"):
        raise builder.error_at_instruction(
            inst, f"expects {arity} operands, but has {len(inst.operands)} operands", f"{arity} operands")
    attrs = inst.attributes
    derived = derived_shape(inst, above)
    if derived is not None and not compatible(derived, inst.shape):
        object.__setattr__(inst, "shape", derived)  # what XLA's parser makes of it, so the IR agrees
    if op not in _CHECKED_OPCODES and _CHECKED_ATTRIBUTES.isdisjoint(attrs) and (
        inst.shape.is_tuple or inst.shape.layout is None or not inst.shape.layout.details
    ):
        return
    if op == "constant":
        literal = attrs.get("literal", "")
        key = (literal, inst.shape)
        if key not in _GOOD_LITERALS:
            try:
                check_literal(literal, inst.shape)
            except LiteralError as e:
                raise builder.error_at_instruction(inst, str(e), e.expected, needle="constant(") from None
            if len(literal) < 64 and len(_GOOD_LITERALS) < 10_000:
                _GOOD_LITERALS.add(key)  # constant(0), constant(-inf), ... recur thousands of times
    elif op == "infeed" and not (inst.shape.is_tuple and inst.shape.tuple_shapes):
        raise builder.error_at_instruction(inst, "infeed must have a non-empty tuple shape", "a tuple shape")
    elif op == "recv" and not inst.shape.is_tuple:
        raise builder.error_at_instruction(inst, f"{op} must have a tuple shape", "(shape, u32[], token[])")
    elif op == "get-tuple-element" and inst.operands:
        tuple_shape = above[inst.operands[0]].shape
        index = int(attrs.get("index", "0")) if _INT.fullmatch(attrs.get("index", "0")) else -1
        if not tuple_shape.is_tuple or not 0 <= index < len(tuple_shape.tuple_shapes):
            raise builder.error_at_instruction(
                inst, f"get-tuple-element index {attrs.get('index')} is out of range for {_plain(tuple_shape)}",
                "an index into the operand's tuple", needle="index=")
    elif op == "conditional" and "branch_computations" in attrs and inst.operands:
        index_shape = above[inst.operands[0]].shape
        if index_shape.dims:
            raise builder.error_at_instruction(inst, "The first operand must be a scalar", "a scalar branch index")
    for key in _VALUE_CHECKED.intersection(attrs):
        value = attrs[key]
        if value in _GOOD_VALUES[key]:
            continue
        ok = (_INT_LIST.fullmatch(value) if key in _INT_LIST_ATTRIBUTES else
              _INT.fullmatch(value) if key in _INT_ATTRIBUTES else
              value in ("true", "false") if key in _BOOL_ATTRIBUTES else True)
        if key == "slice":
            try:
                parse_slice(value)
            except AttributeSyntaxError:
                ok = None
        if ok and len(_GOOD_VALUES[key]) < 1_000:
            _GOOD_VALUES[key].add(value)  # the same few values recur thousands of times
        if not ok:
            expected = ("a list of integers such as {0,1}" if key in _INT_LIST_ATTRIBUTES else
                        "an integer" if key in _INT_ATTRIBUTES else "true or false" if key in _BOOL_ATTRIBUTES else
                        "[start:limit:stride] for each dimension")
            raise builder.error_at_instruction(inst, f"bad value for {key}: {value[:40]!r}", expected,
                                               needle=f"{key}=")
    if "window" in attrs:
        try:
            parse_window(attrs["window"])
        except AttributeSyntaxError as e:
            raise builder.error_at_instruction(inst, f"window: {e}", e.expected, needle="window=") from None
    if "dim_labels" in attrs:
        try:
            parse_dim_labels(attrs["dim_labels"])
        except AttributeSyntaxError as e:
            raise builder.error_at_instruction(inst, f"dim_labels: {e}", e.expected, needle="dim_labels=") from None
    if "sharding" in attrs and attrs["sharding"] not in _GOOD_VALUES["sharding"]:
        problem = sharding_error(attrs["sharding"])
        if problem is not None:
            raise builder.error_at_instruction(inst, problem, "a sharding such as {devices=[2,1]<=[2]}",
                                               needle="sharding=")
        if len(_GOOD_VALUES["sharding"]) < 1_000:
            _GOOD_VALUES["sharding"].add(attrs["sharding"])  # the same few recur on thousands of instructions
    if "operand_layout_constraints" in attrs:
        _check_layout_constraints(inst, above, builder)
    if "replica_groups" in attrs and attrs["replica_groups"].startswith("mesh"):
        _check_mesh_groups(inst, builder)
    if op == "scan" and "dimensions" in attrs:
        dims = inst.dimensions or ()
        rank = above[inst.operands[0]].shape.rank if inst.operands else 0
        if any(d < 0 or d >= rank for d in dims):
            raise builder.error_at_instruction(inst, f"scan dimension {dims} out of range", "0 <= dimension < rank")
    if "D(" not in str(inst.shape) if inst.shape.is_tuple else (
        inst.shape.layout is None or "D(" not in inst.shape.layout.details
    ):
        return
    for shape in (inst.shape,):
        for leaf in shape.leaves():
            if leaf.layout is not None and "D(" in leaf.layout.details:
                for m in _LAYOUT_LEVEL.finditer(leaf.layout.details):
                    for level in m.group(1).split(","):
                        if level.strip().rstrip("+~") not in ("D", "C", "S"):
                            raise builder.error_at_instruction(
                                inst, f"expected a DimLevelType abbreviation, got {level.strip()!r}", "D, C or S")


# operand_layout_constraints text -> its shapes: a custom-call's constraints recur on every call
# of it (mixtral: one text, 96 times, a bracket-by-bracket split each). Emptied per module.
_CONSTRAINT_SHAPES: dict[str, list[Shape]] = {}


def _check_layout_constraints(inst: Instruction, above: Mapping[str, Instruction], builder: _Builder) -> None:
    text = inst.attributes["operand_layout_constraints"]
    shapes = _CONSTRAINT_SHAPES.get(text)
    if shapes is None:
        raw = text.strip()
        body = raw[1:-1] if raw.startswith("{") and raw.endswith("}") else raw
        try:
            shapes = [parse_shape(body[s:e]) for s, e in split_top_level(body) if body[s:e].strip()]
        except (AttributeSyntaxError, ShapeSyntaxError) as e:
            raise builder.error_at_instruction(inst, f"operand_layout_constraints: {e}",
                                               "shapes with layouts") from None
        if len(_CONSTRAINT_SHAPES) < 1_000:
            _CONSTRAINT_SHAPES[text] = shapes
    if len(shapes) != len(inst.operands):
        raise builder.error_at_instruction(
            inst, f"Expected {len(inst.operands)} operand layout constraints, {len(shapes)} given",
            f"{len(inst.operands)} constraints", needle="operand_layout_constraints")
    for i, (shape, operand) in enumerate(zip(shapes, inst.operands)):
        if not compatible(shape, above[operand].shape):
            raise builder.error_at_instruction(
                inst, f"operand {i} is not compatible with operand shape {_plain(above[operand].shape)}",
                "a compatible shape", needle="operand_layout_constraints")


def _check_mesh_groups(inst: Instruction, builder: _Builder) -> None:
    raw = inst.attributes["replica_groups"]
    # mesh['x'=2,'y'=2] {'x'}, or with the device order XLA prints after the mesh:
    # mesh['x'=2,'y'=2], device_ids=(0,2,1,3) {'x'} or device_ids=([2,2]T(1,0)) (a transposed iota).
    m = re.fullmatch(r"mesh\[(.*?)\]\s*(?:,\s*device_ids\s*=\s*\(((?:[^()]|\([^()]*\))*)\)\s*)?\{(.*)\}",
                     raw.strip(), re.S)
    if m is None:
        raise builder.error_at_instruction(inst, f"bad mesh replica groups {raw[:40]!r}", "mesh[axes] {axes}")
    axes_part, listed, chosen = m.groups()
    axes: dict[str, int] = {}
    device_ids = None if listed is None else _listed_device_ids(listed)
    if device_ids == []:
        raise builder.error_at_instruction(inst, f"bad mesh device_ids {listed[:40]!r}",
                                           "device_ids=(0,1,...) or device_ids=([dims]T(perm))")
    for piece in re.split(r",\s*(?![^()]*\))", axes_part):
        piece = piece.strip()
        if piece.startswith("device_ids"):
            device_ids = re.findall(r"-?\d+", piece)
            continue
        am = re.fullmatch(r"'([^']*)'\s*=\s*(\d+)", piece)
        if am is None:
            raise builder.error_at_instruction(inst, f"bad mesh axis {piece!r}", "'name'=size")
        axes[am.group(1)] = int(am.group(2))
    size = math.prod(axes.values())
    if device_ids is not None and len(device_ids) != size:
        raise builder.error_at_instruction(
            inst, f"mesh has {size} devices but device_ids lists {len(device_ids)}", "one device id per device")
    for name in re.findall(r"'([^']*)'|(\d+)", chosen):
        axis = name[0] or name[1]
        if name[0] and axis not in axes:
            raise builder.error_at_instruction(inst, f"axis {axis!r} is not a valid axis name or index in the mesh",
                                               f"one of {sorted(axes)}")
        if name[1] and int(axis) >= len(axes):
            raise builder.error_at_instruction(inst, f"axis index {axis} is out of range", f"< {len(axes)}")


def _listed_device_ids(text: str) -> list[str]:
    """The device ids of `0,2,1,3` or of the iota `[2,2]T(1,0)` (only their count is checked); []
    where neither form."""
    iota = re.fullmatch(r"\s*\[([\d,\s]+)\]\s*(?:T\(([\d,\s]+)\))?\s*", text)
    if iota is not None:
        return [""] * math.prod(int(d) for d in iota.group(1).split(",") if d.strip())
    return re.findall(r"-?\d+", text) if re.fullmatch(r"[\d,\s-]+", text) else []


_ALIAS_ENTRY = re.compile(r"\{([\d,\s]*)\}\s*:\s*\(\s*(\d+)\s*,\s*\{([\d,\s]*)\}\s*(?:,\s*([\w-]+)\s*)?\)")
# A whole list of well-formed entries (blank pieces allowed, as below), checked by one match
# instead of a bracket-by-bracket split (mixtral's lists 1,000 entries).
_ALIAS_LIST = re.compile(rf"[\s,]*(?:{_ALIAS_ENTRY.pattern}(?:\s*,[\s,]*{_ALIAS_ENTRY.pattern})*)?[\s,]*")


def _check_header(module: Module, builder: _Builder) -> None:
    raw = module.attributes.get("input_output_alias")
    if raw is None:
        return
    body = raw.strip()
    if not (body.startswith("{") and body.endswith("}")):
        raise builder.error_at_line(1, "input_output_alias must be {...}", "{ {out}: (param, {index}) }",
                                    needle="input_output_alias")
    inner = body[1:-1]
    if _ALIAS_LIST.fullmatch(inner):
        return
    try:
        spans = split_top_level(inner)
    except AttributeSyntaxError as e:
        raise builder.error_at_line(1, f"input_output_alias: {e}", "balanced brackets",
                                    needle="input_output_alias") from None
    for s, e in spans:
        piece = inner[s:e].strip()
        if not piece:
            continue
        if not re.match(r"\{[\d,\s]*\}", piece):
            raise builder.error_at_line(1, "Expects '}' at the end of ShapeIndex", "{i,j}", needle="input_output_alias")
        if _ALIAS_ENTRY.fullmatch(piece) is None:
            raise builder.error_at_line(1, "Expects '}' at the end of aliasing description",
                                        "{out}: (param, {index}[, kind])", needle="input_output_alias")
