"""`Report`: what `analyze()` returns. It wraps the accounting's result types (`hloflops.results`)
and gives them the shapes people read: totals next to XLA's estimate, loops with their share,
grouped tables (opcode, computation, scope, source line, Flax module path), a deterministic JSON object, CSV
records, a pandas frame, notebook HTML, folded stacks and MFU.

Everything exact stays a Python int. The only floats are XLA's own numbers (XLA returns floats)
and ratios/shares, which are rounded to a fixed number of digits so that the JSON is the same
bytes on every run.
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict
from typing import Any, Callable, Iterable, Mapping

from hloflops.branch_totals import unresolved_conditionals
from hloflops.cost.attention import ATTENTION, CONVENTION
from hloflops.cost.costs import Cost
from hloflops.report.formulas import formula_json
from hloflops.report.mfu import MFU, utilisation  # noqa: F401  (MFU re-exported)
from hloflops.report.grouping import GROUP_KEYS, Group, group_key, grouped  # noqa: F401
from hloflops.report.format import format_table, ratio  # noqa: F401  (re-exported: the report's helpers)
from hloflops.results import PHASES, Accounting, Loop, RematHinge, RematTwinStore, RematUnpaired, Row, Uncounted
from hloflops.scopes import NO_MODULE, NO_SCOPE, module_path, scope_prefix, split_scope  # noqa: F401
from hloflops.report.sources import FRAMES, NO_SOURCE, SourceViews, function_key, location_key  # noqa: F401
from hloflops.user_code import DEFAULT as DEFAULT_USER_CODE
from hloflops.user_code import UserCode
from hloparse.ir import SourceLocation
from hloparse.allocation import long_lived_objects

SCHEMA = "hloflops.report/1"
# The text, HTML and folded-stack views import Report; Report reaches them through this table,
# which analysis/report/__init__.py fills, so that no two modules import each other.
VIEWS: dict[str, Callable[..., Any]] = {}
def _uncollected(render: Callable[..., Any]) -> Callable[..., Any]:
    """A view of the report, rendered without the garbage collector: it allocates many objects
    and frees few, so a collection meanwhile finds nothing to free, and the first full one scans
    every object of the report (half a second on a 30 MB module, a fifth of its summary)."""
    @functools.wraps(render)
    def uncollected(*args: Any, **kwargs: Any) -> Any:
        with long_lived_objects():
            return render(*args, **kwargs)

    return uncollected


def _xla_triplet(estimate: Mapping[str, float]) -> dict[str, float]:
    """XLA's dict uses 'bytes accessed' (with a space); the report says bytes_accessed."""
    out = {
        "flops": float(estimate.get("flops", 0.0)),
        "transcendentals": float(estimate.get("transcendentals", 0.0)),
        "bytes_accessed": float(estimate.get("bytes accessed", estimate.get("bytes_accessed", 0.0))),
    }
    if "optimal_seconds" in estimate:
        out["optimal_seconds"] = float(estimate["optimal_seconds"])
    return out


def _branch_executions(conditional: Any, k: int) -> int | None:
    """Executions of a conditional's k-th branch; None where the program decides."""
    executions = getattr(conditional, "branch_executions", ())
    return executions[k] if k < len(executions) else None


class Report(SourceViews):
    """The exact, loop- and remat-aware costs of one HLO module.

    Build one with `hloflops.analyze(...)`. Totals: `flops`, `transcendentals`, `bytes_accessed`
    (ints, every loop multiplied by its trip count), `model_flops` and `remat_flops`,
    `phase_flops` (forward / backward / other), `xla_estimate` (what XLA's `cost_analysis()`
    says: each loop body once). Detail: `loops`, `uncounted`, `rows` (one per instruction).
    """

    def __init__(
        self,
        accounting: Accounting,
        *,
        path: str | None = None,
        num_devices: int = 1,
        xla_reported: Mapping[str, float] | None = None,
        module: Any = None,
        user_code: UserCode = DEFAULT_USER_CODE,
    ) -> None:
        self.accounting = accounting
        self.user_code = user_code  # which frame of a call stack is the user's (hloflops.user_code)
        self._picked: dict[tuple[int, str], tuple[SourceLocation, ...]] = {}
        self.module = module  # the parsed hloparse.Module, where the roofline needs dtypes
        self.path = path
        self.num_devices = num_devices  # replica_count * num_partitions of the module header
        # XLA's numbers as jax itself returned them (only after hloflops.compare / --compare-xla)
        self.xla_reported = dict(xla_reported) if xla_reported is not None else None
        # the chip the module was compiled for, where something says so (a jax Compiled's device
        # kind: hloflops.api); `roofline()` and the compiler's estimate use it when given none
        self.chip: str | None = None

    # ---- totals --------------------------------------------------------------------------
    @property
    def module_name(self) -> str:
        return self.accounting.module_name

    @property
    def total(self) -> Cost:
        return self.accounting.total

    @property
    def flops(self) -> int:
        return self.accounting.total.flops

    @property
    def transcendentals(self) -> int:
        return self.accounting.total.transcendentals

    @property
    def bytes_accessed(self) -> int:
        return self.accounting.total.bytes_accessed

    @property
    def remat_flops(self) -> int:
        return self.accounting.remat_flops

    @property
    def model_flops(self) -> int:
        return self.accounting.model_flops

    @property
    def remat_overhead(self) -> float | None:
        """Recomputed FLOPs as a fraction of the model FLOPs (0.25: remat adds 25 %)."""
        return ratio(self.remat_flops, self.model_flops)

    @property
    def phase_flops(self) -> dict[str, int]:
        return {p: int(self.accounting.phase_flops.get(p, 0)) for p in PHASES}

    @property
    def xla_estimate(self) -> dict[str, float]:
        return _xla_triplet(self.accounting.xla_estimate)

    @property
    def ratio_to_xla(self) -> float | None:
        """Exact FLOPs / XLA's estimate (how many times XLA undercounts)."""
        return ratio(self.flops, self.xla_estimate["flops"])

    @property
    def loops(self) -> tuple[Loop, ...]:
        return self.accounting.loops

    @property
    def remat_flops_bounds(self) -> tuple[int, int]:
        """[low, high] of `remat_flops`: equal to it where every remat-marked op's answer is
        established (an equal value, or a rule that shows it to be model FLOPs); else wider by
        the flops of the ops it hinges on (`remat_hinges`)."""
        bounds = getattr(self.accounting, "remat_flops_bounds", None)
        return tuple(bounds) if bounds is not None else (self.remat_flops, self.remat_flops)

    @property
    def remat_hinges(self) -> tuple[RematHinge, ...]:
        """The ops `remat_flops_bounds` hinges on: counted as remat on a pairing weaker than an
        equal value (`counted`), or remat-named and left as model FLOPs without proof."""
        return tuple(getattr(self.accounting, "remat_hinges", ()))

    @property
    def remat_unpaired(self) -> tuple[RematUnpaired, ...]:
        """Ops carrying a remat marker that pair with no op computing the same value (counted
        as model FLOPs: CSE merged them with their forward, or the twin was not found)."""
        return tuple(getattr(self.accounting, "remat_unpaired", ()))

    @property
    def remat_twin_stores(self) -> tuple[RematTwinStore, ...]:
        """The program without remat's sure extra work, taken off remat FLOPs (a bf16 stack's round
        trips: hloflops.remat.stored_twin_copies)."""
        return tuple(getattr(self.accounting, "remat_twin_stores", ()))

    @property
    def uncounted(self) -> tuple[Uncounted, ...]:
        return self.accounting.uncounted

    @property
    def rows(self) -> tuple[Row, ...]:
        return self.accounting.rows

    @property
    def conditionals(self) -> tuple[Any, ...]:
        """Each conditional's branches and which one the total counts (the most FLOPs, as XLA
        does); empty when the accounting does not report them."""
        return tuple(getattr(self.accounting, "conditionals", ()))

    @property
    def formula(self) -> Any:
        """The totals as a polynomial in the unknown trip counts (`hloflops.loops.formula.Formula`),
        None when every trip count is known."""
        return getattr(self.accounting, "formula", None)

    def evaluate(self, trip_counts: Mapping[str, int]) -> Any:
        """The totals (`hloflops.loops.formula.Totals`) with each unknown trip count at its value in
        `trip_counts` (while instruction -> count): what analyze(..., trip_counts=...) gives."""
        from hloflops.loops.formula import Formula

        formula = self.formula
        if formula is None:  # every count known: the totals themselves, and no name to take
            formula = Formula((), (((), self.total),))
        return formula.evaluate(trip_counts)

    @property
    def residual_causes(self) -> dict[str, int]:
        """The reconciliation residual split by cause (hloflops.xla.residual); empty when it is 0."""
        if not hasattr(self, "_residual_causes"):
            from hloflops.xla.residual import residual_causes

            causes = residual_causes(self.module, self.accounting) if self.module is not None else {}
            self._residual_causes = causes
        return dict(self._residual_causes)

    @property
    def unresolved_conditionals(self) -> tuple[Any, ...]:
        """The conditionals whose branch the program decides at run time (they make the totals a
        range: `flops_bounds`)."""
        return tuple(unresolved_conditionals(self.conditionals))

    def _bounds(self, metric: str) -> tuple[int, int | None]:
        found = getattr(self.accounting, "bounds", {}).get(metric)
        if found is None:
            value = getattr(self.total, metric)
            return value, value if self.is_exact else None
        return found

    @property
    def flops_bounds(self) -> tuple[int, int | None]:
        """(low, high) of the FLOPs: unresolved conditionals at their cheapest / dearest branch;
        high is None where a trip count is unknown or an op uncounted. `flops` is the high end."""
        return self._bounds("flops")

    @property
    def transcendentals_bounds(self) -> tuple[int, int | None]:
        return self._bounds("transcendentals")

    @property
    def bytes_accessed_bounds(self) -> tuple[int, int | None]:
        return self._bounds("bytes_accessed")

    @property
    def unknown_loops(self) -> tuple[Loop, ...]:
        return tuple(lp for lp in self.loops if lp.trip_count is None)

    @property
    def is_exact(self) -> bool:
        """True when every trip count is known, every op's cost is known and every conditional is
        resolved (a constant selector, or one evaluated per trip): the totals are then exact, not
        lower bounds nor the high end of a range (`flops_bounds`)."""
        return (not self.unknown_loops and not self.uncounted and not self.unresolved_conditionals
                and bool(getattr(self.accounting, "executions_known", True)))

    # ---- sharded programs (hloflops.report.communication, hloflops.report.roofline) ----------
    @property
    def devices(self) -> int:
        """replica_count x num_partitions: how many devices run this one-device program."""
        return self.num_devices

    @property
    def global_flops(self) -> int:
        """FLOPs of the whole step on every device (the module is one device's program)."""
        return self.flops * self.num_devices

    @property
    def communication_bytes(self) -> int:
        """Bytes one device sends over the interconnect in one step, every loop multiplied."""
        return sum(r.communication_total for r in self.rows if r.communication)

    def chip_spec(self, chip: Any = None) -> Any:
        """`chip` (a name, a spec.json path or a Chip) as a Chip, else the chip the module was
        compiled for where known (`self.chip`), else None."""
        from hloflops.report.chips import load_chip

        chip = chip if chip is not None else self.chip
        return load_chip(chip) if isinstance(chip, str) else chip

    def compiler_estimate(self, chip: Any = None) -> Any:
        """XLA's own time estimate of the step (TPU `estimated_cycles`, GPU `reification_cost`)
        multiplied by the loops, or None where the module carries none
        (hloflops.report.compiler_estimate)."""
        from hloflops.report.compiler_estimate import compiler_estimate

        return compiler_estimate(self, self.chip_spec(chip))

    def roofline(self, chip: Any = None, *, depth: int | None = 3, top: int = 10) -> Any:
        """The static roofline on `chip` (a name such as "h100", a spec.json path, or a Chip;
        by default the chip the module was compiled for, where known)."""
        from hloflops.report.chips import load_chip

        if chip is None and self.chip is None:
            raise ValueError("roofline() needs a chip: the module does not say which it was compiled for")
        chip = chip if chip is not None else self.chip

        if self.module is None:
            raise ValueError("the roofline needs the module's dtypes: build the report with analyze()")
        chip = load_chip(chip) if isinstance(chip, str) else chip
        return VIEWS["roofline"](self, chip, self.module, depth=depth, top=top)

    def loop_share(self, loop: Loop) -> float | None:
        return ratio(loop.total.flops, self.flops)

    # ---- grouping ------------------------------------------------------------------------
    @_uncollected
    def group_by(self, by: str = "scope", *, depth: int | None = None, frames: str = "user") -> list[Group]:
        """Sum the rows by opcode, computation, scope (the first `depth` frames of the op_name
        name stack), source line or function (the user's frame of each op's call stack, see
        `hloflops.user_code`; `frames="library"` the innermost frame, `"all"` both) or module
        (the Flax module path, first `depth` parts).
        Sorted by FLOPs, largest first, then by key."""
        cache = self.__dict__.setdefault("_groups", {})  # the summary and JSON ask for by_opcode more than once
        found = cache.get((by, depth, frames))
        if found is None:
            # source and function read the user's frame of each op's call stack (report/sources.py)
            keys = [self.source_key(row, by, frames) for row in self.rows] if by in ("source", "function") else None
            found = cache[(by, depth, frames)] = grouped(self.rows, by, depth, keys)
        return list(found)

    def by_opcode(self) -> list[Group]:
        return self.group_by("opcode")

    def by_computation(self) -> list[Group]:
        return self.group_by("computation")

    def by_scope(self, depth: int | None = None) -> list[Group]:
        return self.group_by("scope", depth=depth)

    def by_source(self, frames: str = "user") -> list[Group]:
        return self.group_by("source", frames=frames)

    def by_function(self, frames: str = "user") -> list[Group]:
        return self.group_by("function", frames=frames)

    def by_module(self, depth: int | None = None) -> list[Group]:
        return self.group_by("module", depth=depth)

    # ---- serialisation -------------------------------------------------------------------
    def loop_dict(self, loop: Loop) -> dict[str, Any]:
        return {
            "name": loop.name,
            "computation": loop.computation,
            "body": loop.body,
            "condition": loop.condition,
            "trip_count": loop.trip_count,
            "source": loop.source,
            "bounds": [loop.bounds[0], loop.bounds[1]],
            "executions": loop.executions,
            "body_cost": loop.body_cost.as_dict(),
            "total": loop.total.as_dict(),
            "share": self.loop_share(loop),
            "extra_over_xla": loop.extra_over_xla.as_dict(),
            "parent": loop.parent,
            "note": loop.note,
            "scope": loop.scope,
            "source_line": self.loop_location(loop) or None,
            "function": self.loop_function(loop) or None,
            "phase": loop.phase,
        }

    @_uncollected
    def to_records(self) -> list[dict[str, Any]]:
        """One flat dict per instruction (the CSV and pandas layout)."""
        records = []
        for r in self.rows:
            source = self.user_source(r.source)
            records.append(
                {
                    "computation": r.computation,
                    "name": r.name,
                    "opcode": r.opcode,
                    "executions": r.executions,
                    "executions_known": r.executions_known,
                    "flops": r.total.flops,
                    "transcendentals": r.total.transcendentals,
                    "bytes_accessed": r.total.bytes_accessed,
                    "flops_per_execution": r.cost.flops,
                    "transcendentals_per_execution": r.cost.transcendentals,
                    "bytes_accessed_per_execution": r.cost.bytes_accessed,
                    "fusion": r.fusion,
                    "loop": r.loop,
                    "remat": r.remat,
                    # A row can be remat for a share of its FLOPs (Row.remat_part): "remat" alone
                    # would make a reader count all of them.
                    "remat_flops": r.remat_flops,
                    "phase": r.phase,
                    "scope": r.scope,
                    "source_file": source.file if source else None,
                    "source_line": source.line if source else None,
                    "source_function": source.function if source else None,
                    "uncounted": r.uncounted,
                    "target": r.target,
                    "note": r.note,
                    "communication_bytes": r.communication_total,
                    "communication_bytes_per_execution": r.communication,
                }
            )
        return records

    @_uncollected
    def to_dict(self, *, by: Iterable[str] = (), depth: int | None = None, rows: bool = False,
                chip: Any = None, frames: str = "user") -> dict[str, Any]:
        """The JSON object `hloflops FILE --json` prints (same options: `by` adds `by_<key>`
        tables next to the always-present `by_opcode`; `rows` adds one entry per instruction;
        `chip` adds the `roofline`). Plain JSON types only; exact values are ints; key order is
        fixed by `to_json`."""
        out: dict[str, Any] = {
            "schema": SCHEMA,
            "module": self.module_name,
            "path": self.path,
            "flops": self.flops,
            "transcendentals": self.transcendentals,
            "bytes_accessed": self.bytes_accessed,
            "model_flops": self.model_flops,
            "remat_flops": self.remat_flops,
            "remat_overhead": self.remat_overhead,
            "phases": self.phase_flops,
            "exact": self.is_exact,
            "flops_bounds": list(self.flops_bounds),
            "transcendentals_bounds": list(self.transcendentals_bounds),
            "bytes_accessed_bounds": list(self.bytes_accessed_bounds),
            "num_devices": self.num_devices,
            "xla_estimate": self.xla_estimate,
            "ratio_to_xla": self.ratio_to_xla,
            "reconciliation": {k: int(v) for k, v in self.accounting.reconciliation.items()},
            **({"residual_causes": self.residual_causes} if self.residual_causes else {}),
            "loops": [self.loop_dict(lp) for lp in self.loops],
            "uncounted": [
                {
                    "name": u.name,
                    "opcode": u.opcode,
                    "computation": u.computation,
                    "reason": u.reason,
                    "target": u.target,
                    "executions": u.executions,
                }
                for u in self.uncounted
            ],
            "remat_flops_bounds": list(self.remat_flops_bounds),
            "remat_hinges": [
                {"name": h.name, "computation": h.computation, "opcode": h.opcode, "flops": h.flops,
                 "counted": h.counted, **({"twin_copies": h.twin_copies} if h.twin_copies else {}),
                 **({"twin_form": h.twin_form} if h.twin_form else {})}
                for h in self.remat_hinges
            ],
            "remat_unpaired": [
                {"name": u.name, "computation": u.computation, "opcode": u.opcode, "flops": u.flops}
                for u in self.remat_unpaired
            ],
            # The program without remat's sure extra work, taken off remat FLOPs (a bf16 stack's
            # round trips: hloflops.remat.stored_twin_copies); only where there is some.
            **({"remat_twin_stores": [asdict(t) for t in self.remat_twin_stores]} if self.remat_twin_stores else {}),
            "by_opcode": {g.key: g.as_dict() for g in self.by_opcode()},
            "conditionals": [
                {
                    "name": c.name,
                    "computation": c.computation,
                    "executions": c.executions,
                    "chosen": c.chosen,
                    "smallest": c.smallest,
                    "resolution": getattr(c, "resolution", "data"),
                    "note": getattr(c, "note", ""),
                    # the loop of unknown trip count whose counter it reads (hloflops.loops.branches)
                    **({"waits_on": c.waits_on} if getattr(c, "waits_on", None) else {}),
                    "branches": [{"index": b.index, "computation": b.computation, "cost": b.cost.as_dict(),
                                  "executions": _branch_executions(c, k)}
                                 for k, b in enumerate(c.branches)],
                }
                for c in self.conditionals
            ],
            "devices": self.devices,
            "global_flops": self.global_flops,
            "communication": VIEWS["communication"](self, depth),
        }
        if self.formula is not None:  # some trip count unknown (hloflops.report.formulas)
            out.update(formula_json(self.formula))
        if any(g.key == ATTENTION for g in self.by_opcode()):  # by_opcode's keys are op_group's
            out["conventions"] = {ATTENTION: CONVENTION}
        if chip is not None:
            out["roofline"] = self.roofline(chip).as_dict()
        estimate = self.compiler_estimate(chip)
        if estimate is not None:  # only modules whose kernels carry the compiler's estimate
            out["compiler_estimate"] = estimate.as_dict()
        for key in by:
            if key == "opcode":
                continue
            table = self.group_by(key, depth=depth, frames=frames)
            out[f"by_{key}"] = {g.key: g.as_dict() for g in table}
            if key in ("scope", "module"):
                out[f"{key}_depth"] = depth
            if key in ("source", "function"):
                out["frames"] = frames
                out["stack_frames"] = self.has_stack_frames
        if self.xla_reported is not None:
            out["xla_reported"] = _xla_triplet(self.xla_reported)
        if rows:
            out["rows"] = self.to_records()
        return out

    def to_json(self, **options: Any) -> str:
        """`to_dict(**options)` as deterministic JSON text (sorted keys, fixed indentation)."""
        return json.dumps(self.to_dict(**options), sort_keys=True, indent=2, ensure_ascii=True) + "\n"

    def to_pandas(self):
        """One row per instruction as a pandas DataFrame (pandas is optional)."""
        try:
            import pandas as pd
        except ImportError as error:  # pragma: no cover - depends on the environment
            raise ImportError("Report.to_pandas() needs pandas: python3 -m pip install pandas") from error
        columns = list(self.to_records()[0]) if self.rows else None
        return pd.DataFrame.from_records(self.to_records(), columns=columns)

    def to_folded(self, metric: str = "flops") -> str:
        """Folded stacks of `metric` by scope (flamegraph.pl, speedscope, inferno read them)."""
        return VIEWS["folded"](self, metric=metric)

    def write_folded(self, path: str, metric: str = "flops") -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_folded(metric))

    @_uncollected
    def to_html(self, *, depth: int | None = None, chip: Any = None) -> str:
        """A self-contained HTML page: summary, loops and an icicle chart of FLOPs by scope
        (and the communication, with the roofline on `chip` when one is given)."""
        return VIEWS["html"](self, depth=depth, chip=chip)

    def write_html(self, path: str, *, depth: int | None = None, chip: Any = None) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_html(depth=depth, chip=chip))

    # ---- MFU -----------------------------------------------------------------------------
    def mfu(self, step_time_s: float, peak_flops_per_s: float, num_devices: int | None = None) -> MFU:
        """MFU and HFU of a step that took `step_time_s` seconds on `num_devices` devices of
        `peak_flops_per_s` each (default: the module's replica_count * num_partitions)."""
        n = self.num_devices if num_devices is None else num_devices
        return utilisation(self.model_flops, self.flops, step_time_s, peak_flops_per_s, n)

    # ---- display -------------------------------------------------------------------------
    @_uncollected
    def summary(self, *, by: str = "scope", depth: int | None = 3, top: int = 15, chip: Any = None,
                width: int | None = None, frames: str = "user") -> str:
        """The readable text `hloflops FILE` prints (with the roofline on `chip` if given; fitted
        to `width` columns if given: name columns elided in the middle, notes wrapped)."""
        return VIEWS["summary"](self, by=by, depth=depth, top=top, chip=chip, width=width, frames=frames)

    def __repr__(self) -> str:
        return (
            f"<Report {self.module_name}: flops={self.flops:,} (XLA {self.xla_estimate['flops']:,.0f}), "
            f"loops={len(self.loops)}, uncounted={len(self.uncounted)}>"
        )

    def _repr_html_(self) -> str:
        """Notebook display: the summary as the CLI prints it (loops, remat, phases, uncounted ops),
        the top scopes and the interactive chart."""
        return VIEWS["notebook"](self)
