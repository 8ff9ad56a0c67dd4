"""What a batch worker does with one file: bytes in, one flat, picklable result record out.

`analyze_file(path, data, options)` never raises: every failure becomes a record with a
`status` (see `hloflops.batch.db`) and a one-line `error`, so that one bad file cannot stop a
batch. It runs in a local worker process or on a dask worker; it receives the file's bytes from
the parent (which hashed them) so that remote workers need no shared filesystem.
"""

from __future__ import annotations

import hashlib
import time
import traceback
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from hloflops.batch.db import ANALYSIS_ERROR, MEMORY, OK, PARSE_ERROR, READ_ERROR
from hloflops.batch.programs import identity_fields
from hloflops.report.formulas import FORMULA_KEYS
from hloparse.gzipped import GZIP_MAGIC, InflateError, inflate

# What decides a module's numbers: every source file of the parser and the analysis except the
# batch machinery and the pure presentation layers (per package, the paths that are not engine).
# Changing any other file invalidates cached rows. The directories are where Python imports the
# packages from (a checkout's analysis/ is the `hloflops` package), so a wheel and a checkout agree.
_ENGINE_PACKAGES = (("hloparse", ()), ("hloflops", ("batch/", "cli.py", "report/html.py", "report/text.py")))
# Batch modules that compute columns of a row (the program fingerprint): hashed like the engine, so
# a row computed before them (or by another version of them) is redone, not kept with an old value.
_ROW_MODULES = ("batch/programs.py",)


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    scopes: bool = False  # also return per-scope sums
    scope_depth: int | None = 3  # frames of the op_name name stack per scope (None: whole stack)
    max_inflated: int | None = None  # cap on a gzip file's inflated bytes (None: hloparse.gzipped's rule)
    memory_limit: int | None = None  # address-space limit of a local worker process, bytes (None: none)
    # (top, width, with path): also return the module's `Report.summary(top=, width=)` as "summary_text",
    # its path shown or not; `hloflops run` prints the top module's, so it need not analyse it again.
    summary: tuple[int, int | None, bool] | None = None
    # Also return the module's HTML page as "page_html", PAGE_PREAMBLE where `hloflops run --html` puts its
    # modules table (its path shown as the summary's is), so that the top module is not analysed again for it.
    page: bool = False


# Where a page rendered by a worker takes the preamble the parent writes later (html.escape leaves no `<`
# in the title before it, so the first occurrence is this one).
PAGE_PREAMBLE = "<!--hloflops: preamble-->"


WorkerFn = Callable[[str, bytes, WorkerOptions], dict[str, Any]]


def package_version() -> str:
    """The `hloflops` version of the running sources (`hloflops.__version__`, which pyproject reads:
    an installed distribution's metadata could belong to another checkout)."""
    from hloflops import __version__

    return __version__


@lru_cache(maxsize=1)
def engine_version() -> str:
    """`hloflops` version plus a hash of the engine's sources, so changed rules invalidate cached rows."""
    import importlib

    digest = hashlib.sha256()
    for package, not_engine in _ENGINE_PACKAGES:
        root = Path(importlib.import_module(package).__file__).resolve().parent
        for source in sorted(root.rglob("*")):
            rel = source.relative_to(root).as_posix()
            if source.suffix not in (".py", ".lark") or (any(rel.startswith(n) for n in not_engine)
                                                         and rel not in _ROW_MODULES):
                continue
            digest.update(f"{package}/{rel}\0".encode())
            digest.update(source.read_bytes())
            digest.update(b"\0")
    return f"{package_version()}+{digest.hexdigest()[:16]}"


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


PROGRAM_SEPARATOR = "::"  # `profile.xplane.pb::jit_f(6)`: one program of a file that holds several


def decode_module_text(data: bytes, max_inflated: int | None = None, path: str = "") -> str:
    """The HLO text in a file's bytes (gunzipped when they are gzip; an HLO proto, a profile's
    program or StableHLO converted by `hloparse.inputs`). Raises ValueError."""
    from hloparse import formats
    from hloparse.errors import HloParseError

    if data[:2] == GZIP_MAGIC:
        try:
            data = inflate(data, max_inflated)  # streamed and capped: a gzip bomb is a read_error row
        except InflateError as e:
            raise ValueError(f"bad gzip data: {e}") from None
    file, _, program = path.partition(PROGRAM_SEPARATOR)
    found = formats.sniff(data[: formats.HEAD_BYTES], file.removesuffix(".gz"))
    if found.kind in (formats.HLO_PROTO, formats.HLO_MODULE_PROTO, formats.XSPACE, formats.STABLEHLO):
        from hloparse.inputs import programs_of

        try:
            programs = programs_of(data, file)
        except HloParseError as e:
            raise ValueError(f"{found.kind}: {e.message}") from None
        chosen = [p for p in programs if p.name == program] if program else programs
        if len(chosen) != 1:
            raise ValueError(f"{found.kind}: {len(chosen)} programs named {program!r} in it")
        return chosen[0].text
    if found.kind == formats.OTHER_BINARY:
        raise ValueError(f"not UTF-8 text, nor an HLO proto: {found.describe()}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 text: byte 0x{data[e.start]:02x} at offset {e.start}") from None


def _one_line(text: str, limit: int = 2000) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _where(error: BaseException) -> str:
    """The innermost frame of a traceback, to point an engine bug at its line."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    return f" [at {Path(last.filename).name}:{last.lineno} in {last.name}]"


_MEMORY_MESSAGE = "analysis needed more memory than the worker's limit (--memory-limit); stopped"


def analyze_file(path: str, data: bytes, options: WorkerOptions = WorkerOptions()) -> dict[str, Any]:
    """Analyse one module file's bytes; see the module docstring."""
    start = time.perf_counter()
    base: dict[str, Any] = {"engine_version": engine_version()}
    try:
        text = decode_module_text(data, options.max_inflated, path)
    except MemoryError:
        return {**base, "status": MEMORY, "error": _MEMORY_MESSAGE, "seconds": time.perf_counter() - start}
    except ValueError as e:
        return {**base, "status": READ_ERROR, "error": str(e), "seconds": time.perf_counter() - start}
    try:
        import hloparse
        from hloflops.api import analyze
    except Exception as e:  # a broken installation fails every file the same way; say why
        message = _one_line(f"cannot import the engine: {type(e).__name__}: {e}")
        return {**base, "status": ANALYSIS_ERROR, "error": message, "seconds": time.perf_counter() - start}
    try:
        module = hloparse.parse(text, path=path)
        report = analyze(module)
        result = report.to_dict(by=("scope",) if options.scopes else (), depth=options.scope_depth)
        identity = identity_fields(module, text)  # which program this is (hloflops.batch.programs)
        summary_text = None
        if options.summary is not None:
            top, width, with_path = options.summary
            if not with_path:
                report.path = None
            summary_text = report.summary(top=top, width=width)
        page_html = None
        if options.page:
            if options.summary is not None and not options.summary[2]:
                report.path = None
            from hloflops.report.html import render_html
            from hloparse.allocation import long_lived_objects

            with long_lived_objects():  # as Report.to_html renders it
                page_html = render_html(report, preamble_html=PAGE_PREAMBLE)
    except hloparse.HloParseError as e:
        return {**base, "status": PARSE_ERROR, "error": _one_line(str(e)), "seconds": time.perf_counter() - start}
    except MemoryError:  # the worker's memory limit (--memory-limit): the file's size, not a bug
        return {**base, "status": MEMORY, "error": _MEMORY_MESSAGE, "seconds": time.perf_counter() - start}
    except Exception as e:  # anything else (RecursionError included) is the engine's fault, not the file's
        message = _one_line(f"{type(e).__name__}: {e}{_where(e)}")
        return {**base, "status": ANALYSIS_ERROR, "error": message, "seconds": time.perf_counter() - start}
    record = record_from_report_dict(result)
    record.update(identity)
    record.update(base)
    if summary_text is not None:
        record["summary_text"] = summary_text
    if page_html is not None:
        record["page_html"] = page_html
    record["seconds"] = time.perf_counter() - start
    return record


def range_reason_of(report: dict[str, Any]) -> str | None:
    """'between A and B flops: conditionals X, Y decided at run time', or None (no such range)."""
    unresolved = [c for c in report.get("conditionals", ()) if c.get("resolution") not in ("constant", "per-trip")]
    if not unresolved:
        return None
    low, high = report.get("flops_bounds") or [None, None]
    span = f"between {low:,} and {high:,} flops" if high is not None else f"at least {low:,} flops"
    parts = []
    for names, why in (([c["name"] for c in unresolved if not c.get("waits_on")], "decided at run time"),
                       ([c["name"] for c in unresolved if c.get("waits_on")],
                        "on the counter of a loop of unknown trip count")):
        if names:
            shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
            parts.append(f"{len(names)} conditional(s) {why} ({shown})")
    return f"{span}: {'; '.join(parts)}"


def record_from_report_dict(report: dict[str, Any]) -> dict[str, Any]:
    """The batch record of a successful analysis, from `Report.to_dict()`."""
    xla = report.get("xla_estimate") or {}
    record: dict[str, Any] = {
        "status": OK,
        "error": None,
        "module_name": report.get("module"),
        "flops": report["flops"],
        "transcendentals": report["transcendentals"],
        "bytes_accessed": report["bytes_accessed"],
        "model_flops": report["model_flops"],
        "remat_flops": report["remat_flops"],
        "comm_bytes_per_device": (report.get("communication") or {}).get("bytes_per_device"),
        "devices": report.get("devices"),
        "exact": report.get("exact"),
        "flops_low": (report.get("flops_bounds") or [None, None])[0],
        "flops_high": (report.get("flops_bounds") or [None, None])[1],
        "range_reason": range_reason_of(report),
        "xla_flops": xla.get("flops"),
        "xla_transcendentals": xla.get("transcendentals"),
        "xla_bytes_accessed": xla.get("bytes_accessed"),
        "loops": [
            {
                "name": lp["name"],
                "trip_count": lp["trip_count"],
                "source": lp["source"],
                "executions": lp["executions"],
                "bounds": lp.get("bounds"),
                "note": lp.get("note", ""),
                "location": lp.get("source_line"),  # the user's line and function (hloflops.user_code)
                "function": lp.get("function"),
                "xla_misses": (lp.get("extra_over_xla") or {}).get("flops"),  # the summary's column
            }
            for lp in report.get("loops", ())
        ],
        "uncounted": [
            {"name": u["name"], "opcode": u["opcode"], "reason": u["reason"], "target": u.get("target")}
            for u in report.get("uncounted", ())
        ],
    }
    if "flops_formula" in report:  # some trip count unknown: the formula the summary prints
        record["formula"] = {key: report[key] for key in FORMULA_KEYS if key in report}
    by_scope = report.get("by_scope")
    if by_scope is not None:
        record["scopes"] = [
            {
                "scope": key,
                "flops": value["flops"],
                "transcendentals": value["transcendentals"],
                "bytes_accessed": value["bytes_accessed"],
            }
            for key, value in by_scope.items()
        ]
    return record
