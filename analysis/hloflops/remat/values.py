"""Value numbering: which instructions compute the same value.

Every instruction gets two value numbers (ints; equal numbers mean equal values):

* `exact`: the opcode, the attributes that change the result, the result shape and the value
  numbers of the operands, with ENTRY's parameters keyed by their number and a loop body's
  state keyed by its loop and tuple index. Two instructions with the same exact number compute
  the same value from the same inputs. The number looks through what does not change a value:
  `copy` (a layout change), `optimization-barrier`, `tuple` / `get-tuple-element` pairs, and
  the boundaries of fusions, `call`s and conditional branches (a callee's parameters are the
  caller's operands), so a recompute fused differently from its forward still matches it; and
  TPU's moves on the device (a prefetch's `copy-start` / `copy-done`, an async collective's
  start and done: hloflops.remat.moved_values), so a recompute reading a weight moved again
  for the backward matches the forward that read its first move. A loop's result is a value of
  its own, but for a state element its body hands back unchanged: that is the loop's initial
  value after any number of trips (TPU carries an async all-gather's shard through a windowed
  einsum's loop to the fusion that finishes the gather, which a recompute then reads).
* `abstract`: the same, except that every input of the computation (ENTRY's parameters, a loop
  body's state, and slices, reshapes and copies of those) is keyed by its shape only. A forward
  op in the forward loop body and its recompute in the backward loop body read their inputs
  from different loop states (the forward carry against a slice of the saved residuals); their
  abstract numbers are equal because they apply the same computation to inputs of the same
  shapes.

`frame` names the non-inlined computation an instruction's value is taken in (ENTRY or a loop
body / condition). `tainted` marks values computed from the output of an
`optimization-barrier` in their frame: jax puts one on the inputs of every recompute it emits
with `prevent_cse=True`, which is the only remat marker a module without op_name metadata has.
"""

from __future__ import annotations

import math
from typing import Any, Generator, Iterable

from hloflops.remat.moved_values import MOVES, WRAPPED, MovedValues
from hloflops.remat.numbered import Chain, Number, Numbered, Val, ValueNumbers  # noqa: F401 (read from here too)
from hloflops.remat.op_kinds import (
    IDENTITY, IGNORED_ATTRIBUTES, INPUT_VIEWS, NOT_PLAIN, PER_OP_ATTRIBUTES, UNIQUE, is_identity_rounding,
    is_memory_placement,
    kept_attributes, result_attributes, result_form, shape_key, unit_free_reduce, unit_free_shape,
)
from hloflops.remat.views import VIEW_OPCODES, Concat, View, row_major, apply as apply_view, whole, within_part
from hloparse.ir import CallRole, Computation, Instruction, Module, Shape, parameter_number, trampoline



def _taint(ops: list[tuple[Val, Val, bool]], opcode: str) -> bool:
    """Is a value computed from an optimization barrier's output (or is it one)?"""
    for op in ops:
        if op[2]:
            return True
    return opcode == "opt-barrier"


INLINED = (CallRole.FUSION, CallRole.CALL, CallRole.BRANCH)
_NOT_FAST = NOT_PLAIN | MOVES  # numbered by `_plain` (moves: hloflops.remat.moved_values)


def _saved_residual(inst: Instruction) -> bool:
    """A checkpoint policy's saved residual (an identity rounding, hloflops.remat.rounding): the
    recompute reads it back from the saved values, as an input, so for the abstract number the
    forward's ops that read it read an input of its shape too."""
    return is_identity_rounding(inst)


class _Numbering:
    def __init__(self, module: Module, with_abstract: bool = True):
        self.module = module
        # False: an op's abstract number is left equal to its exact one where that saves time
        # (interning an abstract key for each op is a quarter of the numbering).
        self.with_abstract = with_abstract
        self.ids: dict[tuple, int] = {}
        self.leaves: set[int] = set()  # abstract numbers that stand for a computation input
        self.applier_keys: dict[str, tuple] = {}
        self.out = Numbered()
        # Per distinct Shape object (the parser shares one per distinct shape text); each entry
        # holds the shape, so its id is not reused while the numbering lives.
        self.shape_keys: dict[int, tuple[Shape, tuple]] = {}
        self.leaf_numbers: dict[int, tuple[Shape, Val]] = {}
        # (opcode, id(shape), result attributes) -> the number of that head: an instruction's key
        # is then its head's number and its operands' (short keys hash fast).
        self.heads: dict[tuple, int] = {}
        # (opcode, id(shape), *attribute names, *attribute texts) -> the head's number: a key built without
        # looking at which attributes matter (`result_attributes`, half the cost of a head).
        self.head_by_text: dict[tuple, int] = {}
        self.first_applied: dict[int, tuple[tuple[str, ...], int]] = {}  # see `applied`
        # An op's attribute names -> those of them that change its result (`head_by_text`'s keys).
        self.kept_names: dict[tuple[str, ...], tuple[str, ...]] = {}
        self.reduce_heads: dict[tuple[int, int], int] = {}  # see `reduce_head`
        self.views: dict[int, View] = {}  # a view's exact number -> which elements of which value it holds
        self.concats: dict[int, Concat] = {}  # a concatenate's exact number -> its operands' views
        self.moved = MovedValues(self)

    def concat(self, inst: Instruction, number: int, operands: tuple, shapes: list[Shape]) -> None:
        """Keep a concatenate's operands, for the views that read within one of them (`view`)."""
        try:
            axis = int(inst.attributes.get("dimensions", "").strip("{}"))
        except ValueError:
            return
        parts, first = [], 0
        for operand, shape in zip(operands, shapes):
            if isinstance(operand, tuple) or shape.is_tuple or len(shape.dims) != len(inst.shape.dims):
                return
            part = self._view_of(operand, shape)
            if part is None:
                return
            parts.append((first, shape.dims[axis], part))
            first += shape.dims[axis]
        self.concats.setdefault(number, Concat(inst.shape.dims, axis, tuple(parts)))

    def view(self, inst: Instruction, operand: Val, operand_shape: Shape) -> int | None:
        """The exact number of a view op (hloflops.remat.views): equal for views that hold the
        same elements of one value, however XLA chained its bitcasts, copies and transposes;
        the value itself where the view holds all of it in its own shape. None where the chain
        is not one strided view."""
        if isinstance(operand, tuple) or operand_shape.is_tuple:
            return None
        held = self._view_of(operand, operand_shape)
        found = apply_view(inst, held, operand_shape) if held is not None else None
        if found is None:
            return None
        concat = self.concats.get(found.source)
        if concat is not None:
            found = within_part(found, concat) or found
        if found.is_whole_source:
            return found.source
        number = self.intern(("view",) + found.key)
        self.views.setdefault(number, found)
        return number

    def _view_of(self, operand: int, shape: Shape) -> View | None:
        """Which elements of which value `operand` holds, in `shape` (its number may be shared
        with a view of another shape but for unit dimensions: `View.fit`)."""
        view = self.views.get(operand)
        return whole(operand, shape.dims) if view is None else view.fit(shape.dims)

    def converted(self, inst: Instruction, operand: Val, operand_shape: Shape) -> int:
        """The exact number of a convert: its element type and which elements of which value it
        casts, in row-major order, whatever their shape or layout. `convert(bitcast(w))` and
        `bitcast(convert(w))` cast one block of one value: after optimization XLA casts a bf16
        weight to f32 once for the forward's dot (`convert_bitcast_fusion`) and once more, in the
        other order and another shape, for the recompute's (`bitcast_convert_fusion`, seed 20)."""
        if isinstance(operand, tuple) or inst.shape.is_tuple:
            return self.intern(("convert", inst.shape.element_type, operand))
        view = self.views.get(operand)
        if view is None:  # all of a value
            return self.intern(("convert", inst.shape.element_type, operand, 0, math.prod(operand_shape.dims)))
        if view.strides == row_major(view.dims):  # one contiguous block of the source
            return self.intern(("convert", inst.shape.element_type, view.source, view.base, math.prod(view.dims)))
        return self.intern(("convert", inst.shape.element_type, operand))

    def shape_key(self, shape: Shape) -> tuple:
        hit = self.shape_keys.get(id(shape))
        if hit is None:
            hit = self.shape_keys[id(shape)] = (shape, shape_key(shape))
        return hit[1]

    def intern(self, key: tuple) -> int:
        ids = self.ids
        return ids.setdefault(key, len(ids))  # one hash of the key (a tuple's is not kept)

    def leaf(self, shape: Shape) -> Val:
        hit = self.leaf_numbers.get(id(shape))
        if hit is not None:
            return hit[1]
        if shape.is_tuple:
            value: Val = tuple(self.leaf(s) for s in shape.tuple_shapes)
        else:
            value = self.intern(("leaf",) + unit_free_shape(shape))  # a unit dimension more or less: one input
            self.leaves.add(value)
        self.leaf_numbers[id(shape)] = (shape, value)
        return value

    def opaque(self, tag: tuple, shape: Shape) -> Val:
        """A value known only by `tag` (an input of a frame, a loop's result)."""
        if shape.is_tuple:
            return tuple(self.opaque(tag + (i,), s) for i, s in enumerate(shape.tuple_shapes))
        return self.intern(("opaque",) + tag + shape_key(shape))

    def applier_key(self, name: str) -> tuple:
        """A reducer / comparator / combiner compared by its contents, not its name."""
        key = self.applier_keys.get(name)
        if key is None:
            comp = self.module.by_name.get(name)
            if comp is None:
                key = ("missing", name)
            else:
                position = {i.name: n for n, i in enumerate(comp.instructions)}
                key = tuple([(i.opcode, self.shape_key(i.shape), tuple([position.get(o, o) for o in i.operands]),
                              kept_attributes(i.attributes)) for i in comp.instructions])
            self.applier_keys[name] = key
        return key

    def head(self, inst: Instruction) -> int:
        """The number of what an instruction does to its operands, but for the computations it
        applies (`applied`): opcode, result shape and the attributes that change the result."""
        attributes = inst.attributes
        if inst.opcode != "custom-call" and (not attributes or attributes.keys() <= IGNORED_ATTRIBUTES):
            head: tuple = (inst.opcode, id(inst.shape))  # most ops: nothing but opcode and shape
        else:
            head = (inst.opcode, id(inst.shape), result_attributes(inst))
        found = self.heads.get(head)
        if found is None:
            found = self.heads[head] = self.intern(("head", inst.opcode, *result_form(inst, self.shape_key)))
        return found

    def reduce_head(self, inst: Instruction, head: int, operand: Shape) -> int:
        """The head of a one-operand reduce, by its unit-free form (`unit_free_reduce`; `head`
        where its dimensions do not parse)."""
        if operand.is_tuple or inst.shape.is_tuple:
            return head
        key = (head, id(operand))
        found = self.reduce_heads.get(key)
        if found is None:
            form = unit_free_reduce(inst.shape, operand, inst.attributes.get("dimensions", ""))
            rest = tuple(a for a in result_attributes(inst) if a[0] != "dimensions")
            found = self.reduce_heads[key] = head if form is None else self.intern(("head", "reduce", form, rest))
        return found

    def applied(self, number: int, appliers: tuple[str, ...]) -> int:
        """The number of an instruction that applies the computations `appliers` and otherwise
        has `number`: equal when their contents (`applier_key`) are equal. Contents are compared
        only when two appliers meet at one number (most reducers never do: working out a key for
        each is a tenth of the numbering)."""
        first = self.first_applied.get(number)
        if first is None:
            found = self.first_applied[number] = (appliers, self.intern(("applied", number, appliers)))
            return found[1]
        if appliers == first[0]:
            return first[1]
        contents = tuple([self.applier_key(name) for name in appliers])
        if contents == tuple([self.applier_key(name) for name in first[0]]):
            return first[1]
        return self.intern(("applied", number, contents))

    # ---- frames ---------------------------------------------------------------------------
    def frame(self, comp: Computation, params: list[Number]) -> Number:
        """Number a frame or an inlined callee; `params` are (exact, abstract, tainted) of each
        parameter. Returns the root's."""
        return trampoline(self._frame(comp, params))

    def _frame(self, comp: Computation, params: list[Number]) -> Generator[Any, Any, Number]:
        # A generator run by `trampoline`: an inlined callee's frame comes back from `yield`, so
        # a chain of thousands of nested calls needs no Python stack (issue 12). Only an
        # instruction that calls or loops goes through a generator of its own; the others (most
        # of a module) are numbered by a plain call.
        comp_name = comp.name
        out = self.out
        # An op's numbers, kept apart (no Number tuple per op to build and take apart); without
        # abstract numbers an op's abstract number is its exact one.
        exact_of: dict[str, Val] = {}
        abstract_of: dict[str, Val] = {} if self.with_abstract else exact_of
        tainted: set[str] = set()
        out.chains.setdefault(comp_name, []).append(self._chain)
        if comp_name not in out.exact:
            out.frame[comp_name] = self._frame_name
            out.exact[comp_name], out.abstract[comp_name], out.tainted[comp_name] = exact_of, abstract_of, tainted
        else:  # numbered again from another call site: the first site's numbers stay, this one's are kept apart
            out.shared.add(comp_name)
            out.sites.setdefault(comp_name, []).append((self._frame_name, exact_of, abstract_of, tainted))
        plain, head_by_text, ids, kept_names = self._plain, self.head_by_text, self.ids, self.kept_names
        with_abstract = self.with_abstract
        for inst in comp.instructions:
            opcode, name, operands = inst.opcode, inst.name, inst.operands
            if opcode == "parameter":
                n = parameter_number(inst)
                value = params[n] if n < len(params) else (self.opaque(("param", comp_name, n), inst.shape),
                                                            self.leaf(inst.shape), False)
            else:
                calls = inst.calls
                # The computations an op applies (reducers, comparators); `inlines`: it calls a
                # fusion, a function or a branch.
                if not calls:
                    appliers, inlines = (), False
                elif len(calls) == 1:  # most calling ops: one reducer, or one fusion
                    inlines = calls[0].role in INLINED
                    appliers = () if inlines else (calls[0].computation,)
                else:
                    appliers = tuple([s.computation for s in calls if s.role not in INLINED])
                    inlines = len(appliers) < len(calls)
                if not inlines and opcode not in _NOT_FAST:
                    # Fast path (most of a module): an op computing its value from its operands'.
                    # The head's number, by opcode, Shape object and attribute texts: a cheap key,
                    # finer than the head itself (`head`), so most ops build no head. Texts that
                    # differ from op to op but do not change the value (a reducer's or a channel's
                    # name, metadata) are left out, or each such op would build its head.
                    attributes = inst.attributes
                    if attributes:
                        if calls or not PER_OP_ATTRIBUTES.isdisjoint(attributes):
                            # The names kept, worked out once per list of names.
                            names = tuple(attributes)
                            kept = kept_names.get(names)
                            if kept is None:
                                kept = kept_names[names] = tuple([k for k in names if k not in IGNORED_ATTRIBUTES])
                            head_key = (opcode, id(inst.shape), kept, *map(attributes.__getitem__, kept))
                        else:
                            head_key = (opcode, id(inst.shape), *attributes, *attributes.values())
                    else:
                        head_key = (opcode, id(inst.shape))
                    head = head_by_text.get(head_key)
                    if head is None:
                        head = head_by_text[head_key] = self.head(inst)
                    arity = len(operands)
                    if opcode == "reduce" and arity == 2 and operands[0] in comp.by_name:
                        head = self.reduce_head(inst, head, comp.by_name[operands[0]].shape)
                    # One or two operands (most ops): the key and the taint without a map, a list
                    # or a method call.
                    try:
                        if arity == 2:
                            first, second = operands
                            exact_key = (head, exact_of[first], exact_of[second])
                            taint = first in tainted or second in tainted
                        elif arity == 1:
                            exact_key = (head, exact_of[operands[0]])
                            taint = operands[0] in tainted
                        else:
                            exact_key = (head, *map(exact_of.__getitem__, operands))
                            taint = not tainted.isdisjoint(operands)
                    except KeyError:  # an operand we cannot see: a value of its own (below)
                        exact_key = None
                    if exact_key is not None:
                        exact = ids.setdefault(exact_key, len(ids))  # most ops are a new value: one hash
                        if appliers:
                            exact = self.applied(exact, appliers)
                        elif opcode in VIEW_OPCODES and arity == 1:
                            seen = self.view(inst, exact_key[1], comp.by_name[operands[0]].shape)
                            if seen is not None:
                                exact = seen
                        elif opcode == "convert" and arity == 1:
                            exact = self.converted(inst, exact_key[1], comp.by_name[operands[0]].shape)
                        elif opcode == "concatenate":
                            self.concat(inst, exact, exact_key[1:], [comp.by_name[o].shape for o in operands])
                        exact_of[name] = exact
                        if with_abstract:
                            if opcode in VIEW_OPCODES and arity == 1 and exact == exact_key[1]:
                                abstract_of[name] = abstract_of[operands[0]]  # all of its operand
                            else:
                                abstract_of[name] = self._abstract(inst, exact_key, exact, appliers, abstract_of)
                        if opcode in WRAPPED and arity == 1:
                            self.moved.note_collective(exact, (exact_key[1], abstract_of[operands[0]]))
                        if taint:
                            tainted.add(name)
                        continue
                if (opcode == "copy" or opcode == "get-tuple-element") and len(operands) == 1 \
                        and operands[0] in exact_of:  # without building the operand lists below
                    operand = operands[0]  # a copy (a layout change) has its operand's value
                    value = (exact_of[operand], abstract_of[operand], operand in tainted)
                    if opcode == "get-tuple-element":
                        value = self._element(inst, value)
                else:
                    try:
                        exacts = [exact_of[o] for o in operands]
                    except KeyError:  # an operand we cannot see: a value of its own
                        exacts = None
                    if exacts is None:
                        tag = ("unseen", comp_name, inst.name)
                        value = self.opaque(tag, inst.shape), self.opaque(tag, inst.shape), False
                    else:
                        seen = list(zip(exacts, [abstract_of[o] for o in operands], [o in tainted for o in operands]))
                        if opcode == "while" or opcode == "conditional" or inlines:
                            value = yield from self._calling(comp, inst, seen)
                        else:
                            value = plain(comp, inst, seen)
            exact_of[name] = value[0]
            if with_abstract:
                abstract_of[name] = value[1]
            if value[2]:
                tainted.add(name)
        if not comp.instructions:
            return (), (), False
        root = comp.root.name
        return exact_of[root], abstract_of[root], root in tainted

    def _abstract(self, inst: Instruction, exact_key: tuple, exact: Val, appliers: tuple[str, ...],
                  abstract_of: dict[str, Val]) -> Val:
        """The abstract number of an op on `_frame`'s fast path: `exact_key` is its head's number
        and its operands' exact numbers, `exact` its exact number."""
        abstracts = tuple(map(abstract_of.__getitem__, inst.operands))
        if abstracts and inst.opcode in INPUT_VIEWS and not isinstance(abstracts[0], tuple) \
                and abstracts[0] in self.leaves or _saved_residual(inst):
            return self.leaf(inst.shape)
        if abstracts == exact_key[1:]:
            return exact
        abstract = self.intern((exact_key[0], *abstracts))
        return self.applied(abstract, appliers) if appliers else abstract

    def _calling(self, comp: Computation, inst: Instruction, ops: list[Number]) -> Generator[Any, Any, Number]:
        taint = _taint(ops, inst.opcode)
        inlined = [s for s in inst.calls if s.role in INLINED]
        caller = self._chain
        if inlined and inst.opcode != "conditional":
            callee = self.module.by_name.get(inlined[0].computation)
            if callee is not None:
                # The callee's generator runs right after this yield and reads the chain first.
                self._chain = (caller, comp.name, inst.name)
                exact, abstract, inner_taint = yield self._frame(callee, ops)
                self._chain = caller
                return exact, abstract, taint or inner_taint
        if inst.opcode == "conditional":
            for site in inlined:
                callee = self.module.by_name.get(site.computation)
                if callee is not None and site.index + 1 < len(ops):
                    self._chain = (caller, comp.name, inst.name)
                    yield self._frame(callee, [ops[site.index + 1]])
                    self._chain = caller
            tag = ("conditional", comp.name, inst.name)
            return self.opaque(tag, inst.shape), self.leaf(inst.shape), taint
        if inst.opcode == "while":
            self._chain = (caller, comp.name, inst.name)
            kept = yield from self._while(inst, ops)
            self._chain = caller
            tag = ("while", comp.name, inst.name, ops[0][0] if ops else None)  # per initial state, as its body
            exact, abstract = self.opaque(tag, inst.shape), self.leaf(inst.shape)
            if kept and isinstance(exact, tuple) and isinstance(ops[0][0], tuple) \
                    and isinstance(ops[0][1], tuple) and len(ops[0][0]) == len(exact) == len(ops[0][1]):
                # A state element the body hands back unchanged is the loop's initial value after any
                # number of trips (an async collective's shard that TPU carries through a windowed
                # einsum's loop to the fusion that finishes the gather).
                exact = tuple(ops[0][0][i] if i in kept else e for i, e in enumerate(exact))
                abstract = tuple(ops[0][1][i] if i in kept else a for i, a in enumerate(abstract))
            return exact, abstract, taint
        return self._plain(comp, inst, ops)

    def _plain(self, comp: Computation, inst: Instruction, ops: list[Number]) -> Number:
        opcode = inst.opcode
        if ops:
            exacts, abstracts, taints = zip(*ops)  # one pass in C over the operands
            taint = opcode == "opt-barrier" or True in taints
        else:
            exacts = abstracts = ()
            taint = opcode == "opt-barrier"
        if opcode == "tuple":
            return exacts, abstracts, taint
        if opcode == "get-tuple-element":
            return self._element(inst, (exacts[0], abstracts[0], taint))
        if (opcode in IDENTITY or opcode == "custom-call" and is_memory_placement(inst)) and len(ops) == 1:
            return exacts[0], abstracts[0], taint
        if opcode in MOVES:
            moved = self.moved.number(comp, inst, exacts, abstracts)
            if moved is not None:  # a move between memories or devices: the value it delivers
                return moved[0], moved[1] if self.with_abstract else moved[0], taint
        if opcode in UNIQUE or (opcode == "custom-call" and inst.attr("custom_call_has_side_effect") == "true"):
            tag = ("unique", comp.name, inst.name)
            return self.opaque(tag, inst.shape), self.leaf(inst.shape), taint
        ids = self.ids
        calls = inst.calls
        appliers = tuple([s.computation for s in calls if s.role not in INLINED]) if calls else ()
        exact_key = (self.head(inst), *exacts)
        exact = ids.setdefault(exact_key, len(ids))
        if appliers:
            exact = self.applied(exact, appliers)
        if not self.with_abstract:
            abstract = exact
        elif ops and opcode in INPUT_VIEWS and not isinstance(abstracts[0], tuple) and abstracts[0] in self.leaves \
                or _saved_residual(inst):
            abstract = self.leaf(inst.shape)
        elif abstracts == exacts:
            abstract = exact
        else:
            abstract = ids.setdefault((exact_key[0], *abstracts), len(ids))
            if appliers:
                abstract = self.applied(abstract, appliers)
        return exact, abstract, taint

    def _element(self, inst: Instruction, of: Number) -> Number:
        """A get-tuple-element's numbers, from its operand's `of`: that element of a tuple."""
        index = int(inst.attr("index", "0"))
        exact, abstract, taint = of
        exact = exact[index] if isinstance(exact, tuple) else self.intern(("gte", exact, index))
        abstract = abstract[index] if isinstance(abstract, tuple) else self.leaf(inst.shape)
        return exact, abstract, taint

    def _while(self, inst: Instruction, ops: list[Number]) -> Generator[Any, Any, set[int]]:
        """Number the loop's condition and body; returns the indices of the state elements the
        body hands back unchanged (its root's element is its parameter's)."""
        saved = self._frame_name
        kept: set[int] = set()
        for role in (CallRole.WHILE_CONDITION, CallRole.WHILE_BODY):
            for name in inst.called(role):
                comp = self.module.by_name.get(name)
                if comp is None:
                    continue
                self._frame_name = name
                shape = comp.parameters[0].shape if comp.parameters else inst.shape
                # keyed by the loop's initial value too: the same loop in a callee run from
                # several sites (a scan of microbatches, unrolled) runs on another state at each
                init = ops[0][0] if ops else None
                state = (self.opaque(("loop", name, init), shape), self.leaf(shape), False)
                root = yield self._frame(comp, [state])
                if role == CallRole.WHILE_BODY and isinstance(state[0], tuple) and isinstance(root[0], tuple) \
                        and len(root[0]) == len(state[0]):
                    kept = {i for i, (out, into) in enumerate(zip(root[0], state[0])) if out == into}
        self._frame_name = saved
        return kept

    _frame_name: str = ""
    _chain: Chain = None  # the calls that reach the computation being numbered


def numbered(module: Module, with_abstract: bool = True) -> Numbered:
    """Number every instruction reachable from ENTRY (see the module docstring). Without
    `with_abstract`, abstract numbers are not to be read."""
    numbering = _Numbering(module, with_abstract)
    entry = module.by_name[module.entry_name]
    numbering._frame_name = entry.name
    params = [(numbering.opaque(("entry", parameter_number(p)), p.shape), numbering.leaf(p.shape), False)
              for p in sorted(entry.parameters, key=parameter_number)]
    numbering.frame(entry, params)
    return numbering.out


def value_numbers(module: Module, order: Iterable[str] | None = None) -> ValueNumbers:
    """Every reachable instruction's numbers, keyed by (computation, instruction)."""
    return numbered(module).value_numbers(module)
