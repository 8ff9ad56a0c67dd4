"""The Python API: `analyze(source)` -> `Report`, `compare(source)` -> `Comparison`.

`source` may be HLO text (or StableHLO text, converted through jax), a path to a file in any
form `hloparse.load` reads (HLO text, gzip, `.hlo.pb` protos, StableHLO `.mlir`), the bytes of
one, an `hloparse` `Module`, or a jax `Lowered` / `Compiled` (recognised by duck typing, so jax
is never imported here unless one is passed in, and only `compare` asks XLA for its own numbers).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Mapping

from hloflops.report.report import Report, ratio
from hloflops.user_code import DEFAULT as DEFAULT_USER_CODE
from hloflops.user_code import UserCode
from hloparse.allocation import long_lived_objects
from hloparse.ir import Module

COST_KEYS = ("flops", "transcendentals", "bytes accessed")


JAX_MISSING = "asking XLA for its own numbers needs jax: python3 -m pip install 'hloflops[jax]'"


class JaxMissingError(ImportError):
    """compare() / --compare-xla without jax installed."""


class XlaRejectedError(ValueError):
    """XLA's own parser or cost analysis refused a module (ours may accept more)."""


def _is_jax_stage(source: Any, kind: str) -> bool:
    """True for jax.stages.Lowered / Compiled (or a subclass) without importing jax."""
    for cls in type(source).__mro__:
        if cls.__name__ == kind and cls.__module__.startswith("jax"):
            return True
    return False


# Where the wrappers of jax's stages keep the jax object: nnx.jit's and eqx.filter_jit's Lowered
# and Compiled hold it as `.lowered` / `.compiled` (their own `as_text()` may give StableHLO, or
# be missing, as on Equinox's Compiled).
_INNER = ("compiled", "lowered", "_compiled", "_lowered")
ACCEPTED = ("HLO text (str or bytes), a path, an hloparse Module, or a compiled or lowered jax function: "
            "fn.lower(*args).compile() or fn.lower(*args) of jax.jit, nnx.jit, eqx.filter_jit, pjit or any "
            "object with jax's lower/compile/as_text protocol")


def jax_stage(source: Any) -> tuple[Any, str] | None:
    """(the object, "Compiled" or "Lowered") for anything that follows jax's stage protocol: jax's
    own stages, the wrappers that keep one inside (flax nnx, Equinox), or an object with
    `as_text` (with `compile` it is a Lowered; without, a Compiled). None for anything else.
    jax is never imported here."""
    for _ in range(8):  # a wrapper of a wrapper; never a cycle
        for kind in ("Compiled", "Lowered"):
            if _is_jax_stage(source, kind):
                return source, kind
        inner = next((getattr(source, a) for a in _INNER if _has(source, a)), None)
        if inner is None or inner is source:
            break
        source = inner
    if isinstance(source, (str, bytes, os.PathLike, Module)) or not callable(getattr(source, "as_text", None)):
        return None
    return source, ("Lowered" if callable(getattr(source, "compile", None)) else "Compiled")


def _has(source: Any, attribute: str) -> bool:
    try:
        return getattr(source, attribute, None) is not None
    except Exception:  # a property that raises (flax's Stage.args_info does): not this one
        return False


def _looks_like_hlo_text(text: str) -> bool:
    head = text.lstrip()[:200]
    return "\n" in text or head.startswith("HloModule") or head.startswith("ENTRY") or "{" in head


def _jax_text(stage: Any, kind: str) -> str:
    """The HLO text of a jax stage: a Compiled's optimized module (what XLA costs), a Lowered's
    module before optimizations."""
    if kind == "Compiled":
        text = stage.as_text()
    else:
        try:
            text = stage.as_text(dialect="hlo", debug_info=True)
        except TypeError:  # older jax without debug_info, or a wrapper's as_text() without options
            try:
                text = stage.as_text(dialect="hlo")
            except TypeError:
                text = stage.as_text()
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    if not isinstance(text, str) or not text.strip():
        raise TypeError(f"analyze(): {type(stage).__name__}.as_text() gave no HLO text ({type(text).__name__}); "
                        f"the backend may not print its executable")
    return text


def _what(source: Any) -> str:
    cls = type(source)
    return f"{cls.__module__}.{cls.__qualname__}" if cls.__module__ not in ("builtins", None) else cls.__qualname__


def load_module(source: Any) -> Module:
    """Turn any accepted `source` into a parsed `Module`."""
    import hloparse

    if isinstance(source, Module):
        return source
    stage = jax_stage(source)
    if stage is not None:
        return hloparse.parse(_jax_text(*stage))
    if isinstance(source, bytes):  # HLO text, or any form hloparse.inputs reads (a serialized HLO proto, ...)
        return _one_program(source, "<bytes>")
    if isinstance(source, os.PathLike):
        return hloparse.load(os.fspath(source))
    if isinstance(source, str):
        if _looks_like_hlo_text(source):
            from hloparse.formats import STABLEHLO, sniff

            if sniff(source[:4096].encode("utf-8", "replace")).kind == STABLEHLO:  # lowered.as_text()
                return _one_program(source.encode("utf-8"), "<string>")
            return hloparse.parse(source)
        return hloparse.load(source)
    if callable(getattr(source, "lower", None)):
        raise TypeError(f"analyze() got the jitted function {_what(source)} itself, which has no HLO until it is "
                        "given arguments: pass fn.lower(*args).compile(), or use hloflops.count(fn)(*args)")
    raise TypeError(f"analyze() got {_what(source)}; it takes {ACCEPTED}")


def _program_text(data: bytes, label: str) -> str:
    """The HLO text of the one program in a file's bytes, whatever its form (hloparse.inputs)."""
    from hloparse.inputs import programs_of

    programs = programs_of(data, label)
    if len(programs) != 1:
        raise ValueError(f"{label}: holds {len(programs)} programs; analyse one (hloparse.inputs.load_programs)")
    return programs[0].text


def _one_program(data: bytes, label: str) -> Module:
    import hloparse

    return hloparse.parse(_program_text(data, label), path=None if label.startswith("<") else label)


def num_devices(module: Module) -> int:
    """replica_count * num_partitions from the module header (1 when absent)."""
    n = 1
    for key in ("replica_count", "num_partitions"):
        try:
            n *= max(1, int(module.attributes.get(key, "1")))
        except ValueError:
            pass
    return n


def analyze(source: Any, *, trip_counts: Mapping[str, int] | None = None, user_code: UserCode | None = None) -> Report:
    """Exact, loop- and remat-aware costs of an HLO module.

    `trip_counts` maps while-instruction names (without '%') to trip counts; they override what
    the analysis derives and fill in unknown ones (reported with source "override").
    `user_code` is the rule that says which frame of an op's call stack is the user's
    (`hloflops.user_code.UserCode`; default: not jax, flax, optax, ..., installed packages or
    the standard library).
    """
    report = _report(load_module(source), trip_counts, user_code=user_code)
    stage = jax_stage(source)
    if stage is not None and stage[1] == "Compiled":
        report.chip = compiled_chip(stage[0])
    return report


# jax's device_kind of each TPU generation -> the built-in chip (hloflops.report.chips)
_DEVICE_KINDS = {"tpu v4": "tpu-v4", "tpu v5 lite": "tpu-v5e", "tpu v5e": "tpu-v5e", "tpu v5": "tpu-v5p",
                 "tpu v5p": "tpu-v5p", "tpu v6 lite": "tpu-v6e", "tpu v6e": "tpu-v6e"}


def compiled_chip(compiled: Any) -> str | None:
    """The built-in chip a jax Compiled was compiled for (its devices' kind), or None."""
    try:
        shardings = compiled.input_shardings[0] or compiled.output_shardings
        device = next(iter(jax_leaves(shardings)[0].device_set))
        return _DEVICE_KINDS.get(str(device.device_kind).strip().lower())
    except Exception:  # any jax without these attributes, a program without arguments: unknown
        return None


def jax_leaves(tree: Any) -> list:
    import jax

    return jax.tree.leaves(tree)


def _report(module: Module, trip_counts: Mapping[str, int] | None, xla: Mapping[str, float] | None = None,
            user_code: UserCode | None = None) -> Report:
    from hloflops.accounting import account

    with long_lived_objects():
        accounting = account(module, trip_counts=dict(trip_counts) if trip_counts else None)
    return Report(accounting, path=module.path, num_devices=num_devices(module), xla_reported=xla, module=module,
                  user_code=user_code or DEFAULT_USER_CODE)


# ---- XLA's own numbers ---------------------------------------------------------------------
def xla_cost_analysis(source: Any) -> dict[str, float]:
    """What XLA itself says, asked through jax: `Compiled.cost_analysis()` or
    `Lowered.cost_analysis()` for a jax stage, XLA's HloCostAnalysis of the text otherwise."""
    from hloflops.xla import compare as xla_compare

    stage = jax_stage(source)
    if stage is not None:
        raw = xla_compare.xla_cost_of_compiled(stage[0])  # Lowered.cost_analysis() has the same shape
        return {k: float(v) for k, v in raw.items()}
    try:
        import jax  # noqa: F401  (imported here only to say clearly what is missing)
    except ImportError as error:
        raise JaxMissingError(JAX_MISSING) from error
    if isinstance(source, Module):
        text = _module_text(source)
    elif isinstance(source, bytes):
        text = _program_text(source, "<bytes>")
    elif isinstance(source, str) and _looks_like_hlo_text(source):
        text = _program_text(source.encode("utf-8"), "<string>")
    else:
        with open(os.fspath(source), "rb") as f:
            text = _program_text(f.read(), os.fspath(source))
    try:
        raw = xla_compare.xla_cost_of_text(text)
    except Exception as error:  # XLA's parser rejects what ours accepted: say what it said, on one line
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        raise XlaRejectedError("XLA could not analyse the module: " + " ".join(lines[:2])) from error
    return {k: float(v) for k, v in raw.items()}


def _module_text(module: Module) -> str:
    if module.path is None:
        raise ValueError("compare() needs the HLO text: pass the text or the path, not a Module parsed from a string")
    with open(module.path, encoding="utf-8") as f:
        return f.read()


@dataclass(frozen=True)
class Comparison:
    """Our exact numbers reconciled with XLA's.

    `xla` is what XLA returned; `estimate` is our reproduction of it (loops once, XLA's rules);
    `estimate_matches` says, per cost, whether the reproduction equals XLA's number; `missed`
    is exact - XLA; `by_loop` splits the missed FLOPs by while loop ('residual': what no loop
    explains)."""

    report: Report
    xla: Mapping[str, float]

    @property
    def estimate(self) -> dict[str, float]:
        return self.report.xla_estimate

    @property
    def exact(self) -> dict[str, int]:
        return self.report.total.as_dict()

    @property
    def estimate_matches(self) -> dict[str, bool]:
        xla = self._xla_triplet()
        return {k: self.estimate[k] == xla[k] for k in xla}

    @property
    def missed(self) -> dict[str, float]:
        xla = self._xla_triplet()
        return {k: self.exact[k] - xla[k] for k in xla}

    @property
    def by_loop(self) -> dict[str, int]:
        return dict(self.report.accounting.reconciliation)

    @property
    def ratio(self) -> float | None:
        return ratio(self.report.flops, self._xla_triplet()["flops"])

    def _xla_triplet(self) -> dict[str, float]:
        return {
            "flops": float(self.xla.get("flops", 0.0)),
            "transcendentals": float(self.xla.get("transcendentals", 0.0)),
            "bytes_accessed": float(self.xla.get("bytes accessed", 0.0)),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "module": self.report.module_name,
            "exact": self.exact,
            "xla": self._xla_triplet(),
            "estimate": self.estimate,
            "estimate_matches": self.estimate_matches,
            "missed": self.missed,
            "ratio": self.ratio,
            "by_loop": {k: int(v) for k, v in self.by_loop.items()},
            "loops": [self.report.loop_dict(lp) for lp in self.report.loops],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, indent=2) + "\n"

    def __repr__(self) -> str:
        x = self._xla_triplet()
        return (
            f"<Comparison {self.report.module_name}: exact flops {self.report.flops:,} vs XLA {x['flops']:,.0f} "
            f"(estimate matches XLA: {self.estimate_matches['flops']})>"
        )


def compare(source: Any, *, trip_counts: Mapping[str, int] | None = None) -> Comparison:
    """`analyze(source)` plus XLA's own numbers (needs jax), reconciled."""
    module = load_module(source)
    xla = xla_cost_analysis(source)
    report = _report(module, trip_counts, {k: xla[k] for k in COST_KEYS if k in xla})
    return Comparison(report=report, xla=xla)
