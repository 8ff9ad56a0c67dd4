"""The typed IR of an HLO module: shapes, instructions, computations, modules.

Everything here is an immutable value. Attributes the cost analysis needs are decoded on first
use (and cached) from the raw attribute text the parser keeps; everything else stays raw text so
that parsing a 30 MB dump does not pay for decoding metadata nobody reads.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from functools import cached_property
from typing import Any, Callable, Generator, Iterator, Mapping

from hloparse import attributes
from hloparse.errors import HloParseError
from hloparse.values import ConvDimLabels, DotDimensionNumbers, WindowDim

__all__ = ["ConvDimLabels", "DotDimensionNumbers", "WindowDim"]  # decoded values, re-exported

# Bytes per element, as XLA's ShapeUtil::ByteSizeOfPrimitiveType counts them. Sub-byte types
# (s4, u4, s2, u2, s1, u1, f4e2m1fn, ...) occupy one byte each in an unpacked layout.
ELEMENT_BYTES: Mapping[str, int] = {
    "pred": 1,
    "s1": 1, "s2": 1, "s4": 1, "s8": 1, "s16": 2, "s32": 4, "s64": 8,
    "u1": 1, "u2": 1, "u4": 1, "u8": 1, "u16": 2, "u32": 4, "u64": 8,
    "f4e2m1fn": 1, "f8e3m4": 1, "f8e4m3": 1, "f8e4m3fn": 1, "f8e4m3b11fnuz": 1,
    "f8e4m3fnuz": 1, "f8e5m2": 1, "f8e5m2fnuz": 1, "f8e8m0fnu": 1,
    "bf16": 2, "f16": 2, "f32": 4, "f64": 8,
    "c64": 8, "c128": 16,
}
NON_ARRAY_TYPES = frozenset({"tuple", "token", "opaque", "buffer"})


@dataclass(frozen=True, slots=True)
class Layout:
    """`{minor_to_major[:tiling/memory-space/...]}`; `details` keeps the text after the colon."""

    minor_to_major: tuple[int, ...]
    details: str = ""

    @property
    def memory_space(self) -> int:
        marker = self.details.find("S(")
        if marker < 0:
            return 0
        return int(self.details[marker + 2 : self.details.index(")", marker)])


@dataclass(frozen=True, slots=True)
class Shape:
    """An array (`f32[8,<=16]{1,0}`), a tuple (`(f32[2], s32[])`), `token[]` or `opaque[]`."""

    element_type: str
    dims: tuple[int, ...] = ()
    dynamic: tuple[bool, ...] = ()  # True where the dimension was written `<=N` (N is the bound)
    layout: Layout | None = None
    tuple_shapes: tuple[Shape, ...] = ()

    @property
    def is_tuple(self) -> bool:
        return self.element_type == "tuple"

    @property
    def is_array(self) -> bool:
        return self.element_type not in NON_ARRAY_TYPES

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def is_dynamic(self) -> bool:
        return any(self.dynamic)

    @property
    def num_elements(self) -> int:
        """Elements of an array (1 for a scalar); 0 for tuples, tokens and opaque."""
        if not self.is_array:
            return 0
        n = 1
        for d in self.dims:
            n *= d
        return n

    def leaves(self) -> Iterator[Shape]:
        """The array/token/opaque leaves of a (possibly nested) tuple, depth first."""
        if self.is_tuple:
            for s in self.tuple_shapes:
                yield from s.leaves()
        else:
            yield self

    def leaves_with_index(self, prefix: tuple[int, ...] = ()) -> Iterator[tuple[tuple[int, ...], Shape]]:
        if self.is_tuple:
            for i, s in enumerate(self.tuple_shapes):
                yield from s.leaves_with_index(prefix + (i,))
        else:
            yield prefix, self

    def byte_size(self, pointer_size: int = 8) -> int:
        """XLA's ShapeUtil::ByteSizeOf: a tuple is its pointer table, not its leaves. (The cost
        rules use hloflops.cost.shapes.size, which also knows packed `E(bits)` layouts and how XLA
        stores unbounded dimensions.)"""
        if self.is_tuple:
            return pointer_size * len(self.tuple_shapes)
        if self.element_type == "token":
            return 0
        if self.element_type == "opaque":
            return pointer_size
        if self.element_type == "buffer":
            return self.tuple_shapes[0].byte_size(pointer_size)
        size = self.num_elements * ELEMENT_BYTES[self.element_type]
        if self.is_dynamic:
            size += 4 * self.rank  # the dimension-size metadata XLA appends
        return size

    def leaf_byte_size(self, pointer_size: int = 8) -> int:
        """Sum of the byte sizes of all leaves (what jaxlib 0.10.2 charges for tuple outputs)."""
        return sum(s.byte_size(pointer_size) for s in self.leaves())

    def __str__(self) -> str:
        if self.is_tuple:
            return "(" + ", ".join(str(s) for s in self.tuple_shapes) + ")"
        if self.element_type == "buffer":
            return f"b({self.tuple_shapes[0]})"
        dynamic = self.dynamic or (False,) * self.rank
        dims = ",".join("?" if d < 0 else ("<=" if dyn else "") + str(d) for d, dyn in zip(self.dims, dynamic))
        text = f"{self.element_type}[{dims}]"
        if self.layout is not None:
            text += "{" + ",".join(map(str, self.layout.minor_to_major))
            text += (":" + self.layout.details if self.layout.details else "") + "}"
        return text


# Roles under which an instruction calls a computation. The accounting executes the callee of
# CONTROL roles as its own computation; APPLIED roles (reducers, comparators, scatter combiners)
# are costed by the calling instruction's rule, the way XLA's HloCostAnalysis does.
class CallRole(StrEnum):
    """How an instruction calls a computation. A StrEnum: a role equals its value
    (`CallRole.FUSION == "fusion"`) and prints as it."""

    WHILE_BODY = "while_body"
    WHILE_CONDITION = "while_condition"
    FUSION = "fusion"
    CALL = "call"
    BRANCH = "branch"
    ASYNC = "async"
    TO_APPLY = "to_apply"
    CUSTOM_CALL = "custom_call"  # custom-call's called_computations=


# The two groups (class attributes, not members: iterating CallRole gives the eight roles).
CallRole.CONTROL = frozenset({CallRole.WHILE_BODY, CallRole.WHILE_CONDITION, CallRole.FUSION, CallRole.CALL,
                              CallRole.BRANCH, CallRole.ASYNC})
CallRole.APPLIED = frozenset({CallRole.TO_APPLY, CallRole.CUSTOM_CALL})


@dataclass(frozen=True, slots=True)
class CallSite:
    role: CallRole
    computation: str  # the callee's name
    index: int = 0  # position among the instruction's callees of that role (branch number)


@dataclass(frozen=True, slots=True)
class SourceLocation:
    file: str
    line: int
    function: str = ""
    column: int = 0
    # the stack frame id it came from (0: source_file/source_line metadata); not part of its value
    frame: int = field(default=0, compare=False)


# Decoded metadata per distinct metadata text (fused instructions of one jax op share it): a
# read-only mapping, so that instructions can share it.
_METADATA: dict[str, Mapping[str, str]] = {}
_METADATA_LIMIT = 200_000
_NO_METADATA: Mapping[str, str] = MappingProxyType({})
# The form nearly every metadata text has (optimized jax modules): an op_name without escapes,
# maybe a stack frame id. Its two fields are read straight off the text, without decoding it
# into a mapping: a large module has one distinct text per instruction, and the full decode of
# each was most of the time the accounting spends on names. Any other form is decoded in full.
_PLAIN_METADATA = re.compile(r'\{op_name="([^"\\]*)"(?: stack_frame_id=(\d+))?\}')


@dataclass(frozen=True, eq=False, slots=True)
class Instruction:
    """One HLO instruction. `attributes` maps each attribute name to its raw value text, exactly
    as written (e.g. `"{1}"` for `lhs_contracting_dims={1}`); the properties below decode the
    ones the analysis needs."""

    name: str
    opcode: str
    shape: Shape
    operands: tuple[str, ...]  # operand instruction names, in order, without '%'
    attributes: Mapping[str, str] = field(default_factory=dict)
    calls: tuple[CallSite, ...] = ()
    is_root: bool = False
    line: int = 0  # 1-based line of the instruction in the parsed text
    column: int = 0  # 1-based column where the instruction starts
    computation: str = ""  # the enclosing computation's name
    # Operand shapes as written before the operands (`add(f32[2] %a, f32[2] %b)`), which the parser
    # holds to the operands' own shapes as XLA does; None where the text omitted them. Use
    # Computation.operand_shapes, which resolves operands by name.
    inline_operand_shapes: tuple[Shape | None, ...] | None = None
    # Attribute values decoded so far (slots keep a 200k-instruction module small, so no
    # cached_property: the decoders below memoise here instead).
    _decoded: dict[str, Any] | None = field(default=None, repr=False)

    def _memo(self, key: str, decode: Callable[[], Any]) -> Any:
        cache = self._decoded
        if cache is None:
            cache = {}
            object.__setattr__(self, "_decoded", cache)
        if key not in cache:
            cache[key] = decode()
        return cache[key]

    # ---- decoded attributes (lazy) --------------------------------------------------------
    def attr(self, key: str, default: str | None = None) -> str | None:
        return self.attributes.get(key, default)

    def int_list(self, key: str) -> tuple[int, ...] | None:
        """`{1,2}` or `{}` -> tuple of ints; None when the attribute is absent."""
        raw = self.attributes.get(key)
        return None if raw is None else attributes.parse_int_list(raw)

    @property
    def metadata(self) -> Mapping[str, str]:
        return self._memo("metadata", self._decode_metadata)

    def _decode_metadata(self) -> Mapping[str, str]:
        raw = self.attributes.get("metadata")
        if raw is None:
            return _NO_METADATA
        decoded = _METADATA.get(raw)
        if decoded is not None:
            return decoded
        try:
            decoded = MappingProxyType(attributes.parse_metadata(raw))
        except attributes.AttributeSyntaxError as e:
            # Decoded lazily, after the parse: the file is not known here, the line is.
            raise HloParseError(f"bad metadata of {self.name}: {e}", line=self.line, column=self.column,
                                text=raw[:200], expected=e.expected) from None
        if len(_METADATA) >= _METADATA_LIMIT:
            _METADATA.clear()
        _METADATA[raw] = decoded
        return decoded

    @property
    def op_name(self) -> str:
        raw = self.attributes.get("metadata")
        if raw is None:
            return ""
        plain = _PLAIN_METADATA.fullmatch(raw)
        if plain is not None:
            return plain.group(1)
        return self.metadata.get("op_name", "")

    @property
    def backend_config(self) -> Any:
        """The JSON of `backend_config`, decoded; a plain string if it is not JSON; None if absent."""
        return self._memo("backend_config", self._decode_backend_config)

    def _decode_backend_config(self) -> Any:
        raw = self.attributes.get("backend_config")
        if raw is None:
            return None
        text = attributes.unquote(raw)
        try:
            return json.loads(text)
        except ValueError:
            return text

    @property
    def dot_dimension_numbers(self) -> DotDimensionNumbers | None:
        return self._memo("dot_dimension_numbers", self._decode_dot_dimension_numbers)

    def _decode_dot_dimension_numbers(self) -> DotDimensionNumbers | None:
        dot_like = ("dot", "scaled-dot", "ragged-dot", "sparse-dot")
        if self.opcode not in dot_like and "lhs_contracting_dims" not in self.attributes:
            return None
        return DotDimensionNumbers(
            lhs_batch=self.int_list("lhs_batch_dims") or (),
            rhs_batch=self.int_list("rhs_batch_dims") or (),
            lhs_contracting=self.int_list("lhs_contracting_dims") or (),
            rhs_contracting=self.int_list("rhs_contracting_dims") or (),
        )

    @property
    def window(self) -> tuple[WindowDim, ...] | None:
        raw = self.attributes.get("window")
        return None if raw is None else self._memo("window", lambda: attributes.parse_window(raw))

    @property
    def conv_dim_labels(self) -> ConvDimLabels | None:
        raw = self.attributes.get("dim_labels")
        return None if raw is None else self._memo("conv_dim_labels", lambda: attributes.parse_dim_labels(raw))

    @property
    def slice_spec(self) -> tuple[tuple[int, int, int], ...] | None:
        """`slice={[0:4:1], [2:8]}` -> ((start, limit, stride), ...)."""
        raw = self.attributes.get("slice")
        return None if raw is None else self._memo("slice_spec", lambda: attributes.parse_slice(raw))

    @property
    def dimensions(self) -> tuple[int, ...] | None:
        return self.int_list("dimensions")

    @property
    def feature_group_count(self) -> int:
        return int(self.attributes.get("feature_group_count", "1"))

    @property
    def batch_group_count(self) -> int:
        return int(self.attributes.get("batch_group_count", "1"))

    @property
    def fusion_kind(self) -> str | None:
        return self.attributes.get("kind")

    @property
    def custom_call_target(self) -> str | None:
        raw = self.attributes.get("custom_call_target")
        return None if raw is None else attributes.unquote(raw)

    @property
    def comparison_direction(self) -> str | None:
        return self.attributes.get("direction")

    def called(self, role: CallRole | str) -> tuple[str, ...]:
        """Names of the computations this instruction calls under `role`, in order."""
        return tuple(c.computation for c in self.calls if c.role == role)


@dataclass(frozen=True, eq=False)
class Computation:
    name: str
    instructions: tuple[Instruction, ...]  # in text order
    is_entry: bool = False
    execution_thread: str | None = None
    line: int = 0
    is_fusion_body: bool = False  # set by the module: some fusion instruction calls it

    @cached_property
    def by_name(self) -> Mapping[str, Instruction]:
        return {i.name: i for i in self.instructions}

    @cached_property
    def root(self) -> Instruction:
        for i in self.instructions:
            if i.is_root:
                return i
        return self.instructions[-1]

    @cached_property
    def parameters(self) -> tuple[Instruction, ...]:
        """Parameter instructions ordered by their parameter number."""
        params = [i for i in self.instructions if i.opcode == "parameter"]
        return tuple(sorted(params, key=parameter_number))

    def operand_shapes(self, instruction: Instruction) -> tuple[Shape, ...]:
        return tuple(self.by_name[o].shape for o in instruction.operands)

    def operand(self, instruction: Instruction, index: int) -> Instruction:
        return self.by_name[instruction.operands[index]]

    @cached_property
    def users(self) -> Mapping[str, tuple[Instruction, ...]]:
        """Each instruction's users (deduplicated, in text order)."""
        result: dict[str, list[Instruction]] = {i.name: [] for i in self.instructions}
        for inst in self.instructions:
            for op in dict.fromkeys(inst.operands):
                result[op].append(inst)
        return {k: tuple(v) for k, v in result.items()}


def parameter_number(instruction: Instruction) -> int:
    """The N of `parameter(N)`; the parser stores it as attribute `parameter_number`."""
    return int(instruction.attributes.get("parameter_number", "0"))


MAX_STACK_DEPTH = 1000  # frames of one call stack kept (jax writes at most 100 by default)


@dataclass(frozen=True, eq=False)
class StackFrames:
    """The module's `FileNames` / `FunctionNames` / `FileLocations` / `StackFrames` tables
    (1-based ids, as XLA prints them).

    A frame's parent is its caller. XLA prints `parent_frame_id` one more than the caller's
    row (a root frame says 1, the frame under it says 1 too): `f` calling `g` calling `h` prints
    `1 {.. parent_frame_id=1}` (f), `2 {.. parent_frame_id=2}` (g), `3 {.. parent_frame_id=3}` (h);
    every module we have seen says so (no 0, never a parent beyond its own row), and
    tests/report/test_user_code.py checks it against Python's own call order. So the caller of
    row k is row `parent_frame_id - 1`, none where that is 0 or not below k. A table where some
    frame says 0 (no parent) means the ids as they are, and is read so."""

    file_names: tuple[str, ...] = ()
    function_names: tuple[str, ...] = ()
    # (file_name_id, function_name_id, line, end_line, column, end_column)
    file_locations: tuple[tuple[int, int, int, int, int, int], ...] = ()
    # (file_location_id, parent_frame_id)
    frames: tuple[tuple[int, int], ...] = ()
    _locations: dict[int, SourceLocation | None] = field(default_factory=dict, init=False, repr=False)
    _stacks: dict[int, tuple[SourceLocation, ...]] = field(default_factory=dict, init=False, repr=False)

    def __bool__(self) -> bool:
        return bool(self.frames)

    def location(self, frame_id: int) -> SourceLocation | None:
        """The innermost source location of a stack frame id, or None if out of range (each
        frame's SourceLocation made once)."""
        if frame_id not in self._locations:
            self._locations[frame_id] = self._location(frame_id)
        return self._locations[frame_id]

    @cached_property
    def _parent_shift(self) -> int:
        """1 for tables as XLA prints them (parent one above the caller's row, a root says 1);
        0 for a table that says 0 for a root (the ids as XLA's proto means them): such a table
        never says 0 when shifted, so one 0 tells them apart."""
        return 0 if any(parent == 0 for _loc, parent in self.frames) else 1

    def caller(self, frame_id: int) -> int:
        """The frame that called `frame_id` (0: none; see the class docstring)."""
        if not (1 <= frame_id <= len(self.frames)):
            return 0
        parent = self.frames[frame_id - 1][1] - self._parent_shift
        return parent if 0 < parent < frame_id else 0

    def stack(self, frame_id: int) -> tuple[SourceLocation, ...]:
        """The call stack of a frame, innermost first, outermost (`<module>`) last."""
        found = self._stacks.get(frame_id)
        if found is not None:
            return found
        chain: list[int] = []  # walked without recursion: a hostile module may chain 100,000 frames
        while frame_id and frame_id not in self._stacks and len(chain) < MAX_STACK_DEPTH:
            chain.append(frame_id)
            frame_id = self.caller(frame_id)
        found = self._stacks.get(frame_id, ())
        for fid in reversed(chain):  # outermost first, so each frame's stack extends its caller's
            loc = self.location(fid)
            found = self._stacks[fid] = () if loc is None else (loc, *found)
        return found

    def _location(self, frame_id: int) -> SourceLocation | None:
        if not (1 <= frame_id <= len(self.frames)):
            return None
        loc_id, _parent = self.frames[frame_id - 1]
        if not (1 <= loc_id <= len(self.file_locations)):
            return None
        file_id, func_id, line, _end_line, column, _end_col = self.file_locations[loc_id - 1]
        file = self.file_names[file_id - 1] if 1 <= file_id <= len(self.file_names) else ""
        func = self.function_names[func_id - 1] if 1 <= func_id <= len(self.function_names) else ""
        return SourceLocation(file=file, line=line, function=func, column=column, frame=frame_id)


@dataclass(frozen=True, eq=False)
class Module:
    name: str
    computations: tuple[Computation, ...]  # in text order
    entry_name: str
    attributes: Mapping[str, str] = field(default_factory=dict)  # header attributes, raw text
    stack_frames: StackFrames = field(default_factory=StackFrames)
    path: str | None = None  # the file it was loaded from, if any
    _sources: dict[str, SourceLocation | None] = field(default_factory=dict, init=False, repr=False)

    @cached_property
    def by_name(self) -> Mapping[str, Computation]:
        return {c.name: c for c in self.computations}

    @property
    def entry(self) -> Computation:
        return self.by_name[self.entry_name]

    def computation(self, name: str) -> Computation:
        return self.by_name[name]

    @property
    def is_scheduled(self) -> bool:
        return self.attributes.get("is_scheduled") == "true"

    def instructions(self) -> Iterator[tuple[Computation, Instruction]]:
        for comp in self.computations:
            for inst in comp.instructions:
                yield comp, inst

    def source_location(self, instruction: Instruction) -> SourceLocation | None:
        """Where the instruction came from: its `stack_frame_id` through the module's stack
        frame tables, else the older `source_file` / `source_line` metadata (worked out once per
        distinct metadata text)."""
        raw = instruction.attributes.get("metadata")
        if raw is None:
            return None
        if raw not in self._sources:
            self._sources[raw] = self._source_location(instruction)
        return self._sources[raw]

    def source_stack(self, instruction: Instruction) -> tuple[SourceLocation, ...]:
        """The instruction's call stack, innermost frame first (StackFrames.stack); the one
        location of older metadata (`source_file`/`source_line`); () where there is none."""
        loc = self.source_location(instruction)
        if loc is None:
            return ()
        return self.stack_frames.stack(loc.frame) if loc.frame else (loc,)

    def _source_location(self, instruction: Instruction) -> SourceLocation | None:
        plain = _PLAIN_METADATA.fullmatch(instruction.attributes["metadata"])
        if plain is not None:  # no source_file: the stack frame, if any, is all there is
            frame_id = plain.group(2)
            return None if frame_id is None else self.stack_frames.location(int(frame_id))
        md = instruction.metadata
        frame = md.get("stack_frame_id")
        if frame is not None:
            loc = self.stack_frames.location(int(frame))
            if loc is not None:
                return loc
        if "source_file" in md:
            return SourceLocation(
                file=md["source_file"],
                line=int(md.get("source_line", "0") or 0),
                function=md.get("source_function", ""),
                column=int(md.get("source_column", "0") or 0),
            )
        return None

    def call_graph(self) -> Any:
        """The call graph of the computations, a networkx MultiDiGraph: one node per computation
        (attributes `computation`, `is_entry`), one edge per call site, caller -> callee, keyed
        `instruction/role/index`, with `role`, `instruction` and `index` (branch number) as data.
        The walks over it are in analysis/graph.py. networkx is imported here, on first use (it
        costs 0.14 s)."""
        import networkx as nx

        graph = nx.MultiDiGraph(module=self.name, entry=self.entry_name)
        graph.add_nodes_from((c.name, {"computation": c, "is_entry": c.is_entry}) for c in self.computations)
        graph.add_edges_from(
            (comp.name, site.computation, f"{inst.name}/{site.role}/{site.index}",
             {"role": site.role, "instruction": inst, "index": site.index})
            for comp in self.computations for inst in comp.instructions for site in inst.calls
        )
        return graph


def trampoline(walk: Generator[Any, Any, Any]) -> Any:
    """Run a recursive walk without Python recursion: where the walk would call itself on a
    callee, it yields the callee's generator (`sub = yield walk(callee)`) and receives its
    result, or its exception. The walk keeps its exact visiting order and results, and any
    nesting depth XLA accepts (chains of thousands of calls) costs heap, not stack."""
    stack = [walk]
    value: Any = None
    error: BaseException | None = None
    while True:
        top = stack[-1]
        try:
            request = top.throw(error) if error is not None else top.send(value)
        except StopIteration as stop:
            stack.pop()
            value, error = stop.value, None
            if not stack:
                return value
            continue
        except BaseException as exc:
            stack.pop()
            if not stack:
                raise
            value, error = None, exc
            continue
        stack.append(request)
        value, error = None, None
