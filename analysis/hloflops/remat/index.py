"""What the remat pass finds in a module (`RematIndex`): the real recomputation, and where the split
rests on something weaker than an equal value (the range's hinges). hloflops.remat.pairing builds
it; hloflops.remat.hinges and the accounting read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from hloflops.remat.sites import Key


@dataclass(frozen=True)
class RematIndex:
    """Which instructions of a module are real recomputation."""

    remat: frozenset[Key]
    remat_named: int  # instructions carrying a remat name (some may be merged by CSE)
    merged: tuple[Key, ...]  # remat-named but left without a twin: counted as model FLOPs
    # Where the split is not established (`Report.remat_flops_bounds`): remat on a weaker pairing
    # than an equal value (a signature in the recompute's own frame whose inputs could not be
    # compared; after optimization a cheap op the fusion rules decided),
    # and unpaired remat-named ops that no rule showed to be model FLOPs (a fusion's copy of a
    # gradient, CSE's merge of a recompute into its forward).
    weak: frozenset[Key] = frozenset()
    unsure: frozenset[Key] = frozenset()
    # Remat ops of which only a share of the FLOPs runs because of remat: key -> (numerator,
    # denominator) of that share (an op left on the broadcast side of a checkpoint's barrier:
    # hloflops.remat.unsunk_broadcasts). Each is in `remat` too.
    partial: Mapping[Key, tuple[int, int]] = field(default_factory=dict)
    # Values the program without remat computes more often than this one, beyond the recomputes
    # they offset: key -> how many more copies (hloflops.remat.stored_twin_copies; lowers the range).
    twin_copies: Mapping[Key, int] = field(default_factory=dict)
    # Copies of an op's FLOPs the program without remat surely runs beyond this one (a bf16 stack's
    # round trips, hloflops.remat.stored_twin_copies): taken off remat FLOPs (a negative share).
    twin_stores: Mapping[Key, int] = field(default_factory=dict)
    # Of `twin_copies`, those that are sure where the row was not counted as remat (stored_twin_copies).
    twin_store_forward: Mapping[Key, int] = field(default_factory=dict)
    # Converts of an op's result the program without remat may run beyond this one: key -> (how
    # many, elements each), where the op's own FLOPs cannot stand for them (a tanh counts none:
    # hloflops.remat.host_stacked_activations; lowers the range's low end only).
    twin_narrows: Mapping[Key, tuple[int, int]] = field(default_factory=dict)
    # Loop body ops a trip XLA peeled off the loop lacks: key -> the loop's trip count here; the
    # program without remat may run one trip more of each (hloflops.remat.peeled_iterations).
    twin_trips: Mapping[Key, int] = field(default_factory=dict)
    # A packed layer's weight gradient whose form the twin may have chosen otherwise: key -> FLOPs per
    # execution (negative: the low end; positive: the high end; None: a packing's own FLOPs, the
    # high end) (hloflops.remat.weight_gradient_forms; a range hinge, never the split).
    twin_forms: Mapping[Key, int | None] = field(default_factory=dict)
    # A forward windowed matmul's convolution whose weight gradient the twin may sum window by window:
    # key -> elements of one partial-sum add per execution (hloflops.remat.windowed_gradient_sums;
    # lowers the range's low end only).
    twin_sums: Mapping[Key, int] = field(default_factory=dict)

    def __contains__(self, key: Key) -> bool:
        return key in self.remat

    @property
    def unpaired(self) -> tuple[Key, ...]:
        return self.merged
