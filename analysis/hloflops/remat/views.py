"""Views: ops that only move elements (bitcast, reshape, transpose, slice; copy keeps its operand's
number already), numbered by which elements of which value they hold.

XLA reaches one array by different chains of views: the recompute of an attention score reads
the saved query as `bitcast(q)`, its forward as `bitcast(copy(bitcast(q)))` through a 4-d shape
with a unit dimension (a layout change and back). Numbered op by op the two chains differ, and
so do the dots that read them, though they compute one value. So a view is numbered by what it
holds: the value it reads elements of (`source`, a value that is not a view) and where: element
`i` of the view is element `base + sum(i[d] * strides[d])` of the source in row-major order.
Two views with equal `View`s hold the same elements in the same places; a view holding all of
its source in the source's own shape is the source itself, and so is one that only adds or drops
unit dimensions (a layer norm's `[b, t, d]` output bitcast to `[1, b, t, d]` for a stack, a
softmax's `[b, q, k]` as `[b, 1, q, k]`): those shapes hold the same elements in the same order, so
values.py numbers every op that reads them elementwise by its shape without unit dimensions.

A bitcast moves no bytes: its elements are its operand's in physical order, so its view follows
both layouts (a bitcast whose layout tiles, on TPU, is not followed). A chain this cannot express
as one strided view (a reshape that merges dimensions a transpose or slice made non-contiguous)
returns None, and the op is numbered as any other op.
"""

from __future__ import annotations

from dataclasses import dataclass

from hloparse.ir import Instruction, Shape

VIEW_OPCODES = frozenset({"bitcast", "reshape", "transpose", "slice"})


@dataclass(frozen=True, slots=True)
class View:
    source: int  # the exact number of the value the view reads (never itself a view)
    source_dims: tuple[int, ...]
    base: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]  # per dimension, in elements of the source's row-major order; 0 where size 1

    @property
    def is_whole_source(self) -> bool:
        """Does the view hold all of its source in the source's shape but for unit dimensions?"""
        if self.base:
            return False
        if self.dims == self.source_dims:
            return self.strides == row_major(self.dims)
        dims = tuple(d for d in self.dims if d != 1)
        return dims == tuple(d for d in self.source_dims if d != 1) and \
            tuple(s for d, s in zip(self.dims, self.strides) if d != 1) == row_major(dims)

    @property
    def key(self) -> tuple:
        """What the view holds, but for its unit dimensions (their stride is 0: they place no
        element): equal for `[1, b, t]` and `[b, t]` views of the same elements."""
        if 1 not in self.dims:
            return self.source, self.base, self.dims, self.strides
        kept = [i for i, d in enumerate(self.dims) if d != 1]
        return self.source, self.base, tuple(self.dims[i] for i in kept), tuple(self.strides[i] for i in kept)

    def fit(self, dims: tuple[int, ...]) -> View | None:
        """The same view in `dims`, a shape equal to its own but for unit dimensions (a value
        numbered one with a view of another shape holds its elements so: values.py numbers a
        bitcast that only adds or drops unit dimensions as its operand); None for another shape."""
        if dims == self.dims:
            return self
        strides = iter([s for d, s in zip(self.dims, self.strides) if d != 1])
        if tuple(d for d in dims if d != 1) != tuple(d for d in self.dims if d != 1):
            return None
        return View(self.source, self.source_dims, self.base, dims, tuple(0 if d == 1 else next(strides) for d in dims))


def row_major(dims: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(dims):
        strides.append(step if size != 1 else 0)
        step *= size
    return tuple(reversed(strides))


def whole(source: int, dims: tuple[int, ...]) -> View:
    """The view of all of a value, in its own shape."""
    return View(source, dims, 0, dims, row_major(dims))


def _minor_to_major(shape: Shape) -> tuple[int, ...] | None:
    layout = shape.layout
    if layout is None or not layout.minor_to_major and shape.dims:
        return tuple(reversed(range(len(shape.dims))))
    if layout.details:  # tiled (TPU) or in another memory space: bytes are not in plain order
        return None
    return layout.minor_to_major


def _refactor(view: View, order_in: tuple[int, ...], dims_out: tuple[int, ...],
              order_out: tuple[int, ...]) -> tuple[int, ...] | None:
    """Strides of `dims_out` read in `order_out` (minor to major) over the elements of `view` read
    in `order_in`: the dimensions of the view, merged where contiguous, split into the output's."""
    pieces: list[list[int]] = []  # (size, stride), minor to major
    for d in order_in:
        size, stride = view.dims[d], view.strides[d]
        if size == 1:
            continue
        if pieces and stride == pieces[-1][0] * pieces[-1][1]:
            pieces[-1][0] *= size
        else:
            pieces.append([size, stride])
    strides = [0] * len(dims_out)
    k = 0
    for d in order_out:
        size = dims_out[d]
        if size == 1:
            continue
        if k >= len(pieces) or pieces[k][0] % size:
            return None
        strides[d] = pieces[k][1]
        pieces[k][0] //= size
        pieces[k][1] *= size
        if pieces[k][0] == 1:
            k += 1
    return tuple(strides) if k == len(pieces) else None


def _slices(text: str) -> list[tuple[int, int, int]] | None:
    """`{[0:1], [2:8:2]}` -> [(0, 1, 1), (2, 8, 2)]."""
    out = []
    for part in text.strip().strip("{}").split(","):
        part = part.strip().strip("[]")
        if not part:
            continue
        try:
            numbers = [int(x) for x in part.split(":")]
        except ValueError:
            return None
        out.append((numbers[0], numbers[1], numbers[2] if len(numbers) > 2 else 1))
    return out


def apply(inst: Instruction, operand: View, operand_shape: Shape) -> View | None:
    """The view `inst` (a VIEW_OPCODES op) takes of an operand whose view is `operand`."""
    shape, opcode = inst.shape, inst.opcode
    if shape.is_tuple or shape.element_type != operand_shape.element_type or shape.is_dynamic:
        return None
    dims = shape.dims
    if opcode == "transpose":
        perm = [int(x) for x in inst.attributes.get("dimensions", "").strip("{}").split(",") if x.strip()]
        if sorted(perm) != list(range(len(operand.dims))):
            return None
        strides = tuple(operand.strides[p] for p in perm)
        base = operand.base
    elif opcode == "slice":
        specs = _slices(inst.attributes.get("slice", ""))
        if specs is None or len(specs) != len(operand.dims):
            return None
        base, strides_list = operand.base, []
        for (start, _limit, step), stride, size in zip(specs, operand.strides, dims):
            base += start * stride
            strides_list.append(stride * step if size != 1 else 0)
        strides = tuple(strides_list)
    elif opcode == "reshape":
        rank_in, rank_out = len(operand.dims), len(dims)
        strides = _refactor(operand, tuple(reversed(range(rank_in))), dims, tuple(reversed(range(rank_out))))
        base = operand.base
    elif opcode == "bitcast":
        order_in, order_out = _minor_to_major(operand_shape), _minor_to_major(shape)
        if order_in is None or order_out is None:
            return None
        strides = _refactor(operand, order_in, dims, order_out)
        base = operand.base
    else:
        return None
    if strides is None:
        return None
    return View(operand.source, operand.source_dims, base, dims, strides)


@dataclass(frozen=True, slots=True)
class Concat:
    """A concatenate, kept so that a view of it that reads within one operand is that operand's
    (a scan's saved stack, built by concatenating each iteration's residual, read back one slice
    per iteration: seed 106's unrolled scan)."""

    dims: tuple[int, ...]
    axis: int
    parts: tuple[tuple[int, int, View], ...]  # (first index along `axis`, size along it, the operand's view)


def _coordinates(offset: int, dims: tuple[int, ...]) -> list[int]:
    out = [0] * len(dims)
    for j in reversed(range(len(dims))):
        out[j] = offset % dims[j]
        offset //= dims[j]
    return out


def within_part(view: View, concat: Concat) -> View | None:
    """`view` (of the concatenate's value) as a view of the operand it reads, where every element
    it reads lies in that one operand and each of its dimensions steps along one dimension of the
    concatenate; else None."""
    dims = concat.dims
    unit = row_major(dims)
    at = _coordinates(view.base, dims)
    reach = [0] * len(dims)  # how far each dimension of the concatenate is stepped from `at`
    steps: list[tuple[int, int] | None] = []  # per view dimension: (dimension of the concatenate, step)
    for size, stride in zip(view.dims, view.strides):
        if size == 1:
            steps.append(None)
            continue
        j = next((j for j in range(len(dims)) if dims[j] > 1 and unit[j] <= stride
                  and stride % unit[j] == 0), None)
        if j is None:
            return None
        step = stride // unit[j]
        reach[j] += step * (size - 1)
        steps.append((j, step))
    if any(at[j] + reach[j] >= dims[j] for j in range(len(dims))):
        return None
    axis = concat.axis
    for first, size, part in concat.parts:
        if first <= at[axis] and at[axis] + reach[axis] < first + size:
            break
    else:
        return None
    at[axis] -= first
    base = part.base + sum(c * s for c, s in zip(at, part.strides))
    strides = tuple(0 if step is None else step[1] * part.strides[step[0]] for step in steps)
    if any(size != 1 and stride == 0 for size, stride in zip(view.dims, strides)):
        return None  # a unit dimension of the operand stepped along: not a view of it
    return View(part.source, part.source_dims, base, view.dims, strides)
