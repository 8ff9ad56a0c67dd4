"""Compiled module texts of generated draws, kept on disk for long sweeps
(`benchmarks/remat_sweep.py --cache DIR`). Compiling a draw and its twin is most of a sweep's
time, and it does not depend on the analysis: a sweep rerun after a change to a rule reads the
texts back and judges them again. A text is keyed by the draw (`Form`'s repr), the program
(with remat or its twin), the stage, the jax and jaxlib versions, libtpu's where installed, and
the sources that build the programs (tests/programs), so a change there compiles afresh."""

from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Callable

from tests.remat.judge import module_text

PROGRAMS = Path(__file__).resolve().parents[1] / "programs"


def cached_texts(directory: Path, form: object, pair, compile: Callable[[object, str], str] = module_text
                 ) -> Callable[[object, str], str]:
    """`module_text` for the two programs of `pair` (`build(form)`), read from `directory` where a
    sweep wrote them before, else compiled and written there."""
    directory.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha1((repr(form) + _toolchain()).encode()).hexdigest()[:20]

    def text(program, stage: str) -> str:
        which = "remat" if program is pair.remat else "plain" if program is pair.plain else None
        if which is None:  # not one of this draw's programs: nothing to key it by
            return compile(program, stage)
        path = directory / f"{key}_{which}_{stage}.hlo"
        if path.exists():
            return path.read_text()
        out = compile(program, stage)
        partial = path.with_suffix(f".{os.getpid()}.partial")  # a reader never sees half a text
        partial.write_text(out)
        os.replace(partial, path)
        return out

    return text


@lru_cache(maxsize=1)
def _toolchain() -> str:
    versions = []
    for dist in ("jax", "jaxlib", "libtpu", "libtpu-nightly", "flax", "equinox", "dm-haiku"):
        try:
            versions.append(f"{dist}={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            pass
    sources = hashlib.sha1()
    for path in sorted(PROGRAMS.glob("*.py")):
        sources.update(path.name.encode() + path.read_bytes())
    return " ".join(versions) + " " + sources.hexdigest()
