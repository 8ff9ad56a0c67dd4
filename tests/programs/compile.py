"""Compile catalogue programs with XLA, caching XLA's answers on disk.

`compile_program(p)` returns `(compiled_text, lowered_text, xla_cost)`:

- `compiled_text`: `compiled.as_text()`, the optimized module XLA runs (and costs);
- `lowered_text`: `lowered.as_text(dialect="hlo")`, the module before XLA's optimizations;
- `xla_cost`: `compiled.cost_analysis()` as a plain `dict[str, float]`.

The cache lives in `$HLOFLOPS_TEST_CACHE` or `~/.cache/hloflops-tests`. Its key is the program
name, the jax and jaxlib versions and a hash of the lowered module text, so a program whose
definition changes is recompiled (lowering is cheap; XLA's compile is what we avoid). What it
stores is XLA's own output on this machine; delete the folder to ask XLA again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

from tests.programs import Program

CACHE_ENV = "HLOFLOPS_TEST_CACHE"
_SCHEMA = 1


def cache_dir() -> Path:
    root = os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "hloflops-tests")
    return Path(root)


def _x64_context(program: Program):
    import jax

    return jax.enable_x64(True) if program.x64 else contextlib.nullcontext()


def lower_program(program: Program):
    """`jax.jit(program.fn).lower(*program.args)`, with x64 on for this call only if asked."""
    import jax

    with _x64_context(program):
        return jax.jit(program.fn).lower(*program.args)


# Executables compiled in this process, by program name, so that running a program right after
# asking XLA for its text does not compile it a second time.
_EXECUTABLES: dict[str, Any] = {}


def executable(program: Program):
    """A jax `Compiled` for the program (compiled at most once per process)."""
    if program.name not in _EXECUTABLES:
        with _x64_context(program):
            _EXECUTABLES[program.name] = lower_program(program).compile()
    return _EXECUTABLES[program.name]


def run_program(program: Program) -> Any:
    """Run the program on its (concrete) args; x64 on for this call only if asked."""
    import jax

    with _x64_context(program):
        return jax.block_until_ready(executable(program)(*program.args))


def _cache_path(program: Program, lowered_text: str) -> Path:
    import jax
    import jaxlib

    digest = hashlib.sha256(
        "\0".join([str(_SCHEMA), program.name, jax.__version__, jaxlib.__version__, lowered_text]).encode()
    ).hexdigest()[:20]
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", program.name)[:120]
    return cache_dir() / f"{safe}-{digest}.json"


def _write_atomically(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(payload, f)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


# The last few programs lowered in this process, by name (lowering is cheap, but not free):
# enough for compile_program and lowered_debug_text of one program to share one lowering.
_LOWERED: OrderedDict[str, Any] = OrderedDict()
_LOWERED_KEPT = 8


def _lowered(program: Program):
    if program.name in _LOWERED:
        _LOWERED.move_to_end(program.name)
    else:
        _LOWERED[program.name] = lower_program(program)
        while len(_LOWERED) > _LOWERED_KEPT:
            _LOWERED.popitem(last=False)
    return _LOWERED[program.name]


def lowered_debug_text(program: Program) -> str:
    """The module before optimization with op_name metadata (`as_text(debug_info=True)`): what
    an `--xla_dump_to` dump of it holds. `compile_program`'s lowered text has no metadata."""
    return _lowered(program).as_text(dialect="hlo", debug_info=True)


def compile_program(program: Program, *, use_cache: bool = True) -> tuple[str, str, dict[str, float]]:
    lowered = _lowered(program)
    lowered_text = lowered.as_text(dialect="hlo")
    path = _cache_path(program, lowered_text)
    if use_cache and path.exists():
        try:
            cached = json.loads(path.read_text())
            return cached["compiled_text"], lowered_text, cached["xla_cost"]
        except (OSError, ValueError, KeyError):
            pass  # a torn or foreign file: recompile and overwrite it
    with _x64_context(program):
        compiled = lowered.compile()
        compiled_text = compiled.as_text()
        cost = compiled.cost_analysis()
    _EXECUTABLES[program.name] = compiled
    if isinstance(cost, (list, tuple)):  # jax 0.4.x returned one dict per module
        cost = cost[0]
    xla_cost = {str(k): float(v) for k, v in (cost or {}).items()}
    if use_cache:
        _write_atomically(path, {"name": program.name, "compiled_text": compiled_text, "xla_cost": xla_cost})
    return compiled_text, lowered_text, xla_cost


def concrete_args(program: Program, seed: int = 0) -> tuple[Any, ...]:
    """The program's args with every ShapeDtypeStruct leaf replaced by a small random array.

    Floats are N(0, 0.3^2) (small enough that tanh/exp chains stay finite), integers are in
    [0, 4), booleans are fair coins. Concrete leaves are kept as they are.
    """
    import jax
    import numpy as np

    rng = np.random.default_rng(seed)

    def make(leaf):
        if not isinstance(leaf, jax.ShapeDtypeStruct):
            return leaf
        dtype = np.dtype(leaf.dtype)
        if dtype == np.bool_:
            return rng.random(leaf.shape) < 0.5
        if np.issubdtype(dtype, np.integer):
            return rng.integers(0, 4, size=leaf.shape).astype(dtype)
        if np.issubdtype(dtype, np.complexfloating):
            return (rng.normal(0, 0.3, leaf.shape) + 1j * rng.normal(0, 0.3, leaf.shape)).astype(dtype)
        return rng.normal(0, 0.3, leaf.shape).astype(dtype)

    return tuple(jax.tree_util.tree_map(make, program.args))
