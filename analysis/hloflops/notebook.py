"""The notebook path: `hloflops.count(fn)(*args)` jits, compiles and analyses in one line, and the
`Report` it returns renders itself (`_repr_html_`: the summary with loops and remat, and the
chart).

    import hloflops
    report = hloflops.count(train_step)(params, opt_state, batch)
    report            # in Jupyter: the summary table and the chart
    report.flops      # exact, loop-aware

jax is imported here only when the counted function is called: the rest of `analysis` never
needs it.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Mapping

from hloflops.api import analyze
from hloflops.report.report import Report


def count(fn: Callable[..., Any], *, trip_counts: Mapping[str, int] | None = None,
          **jit_options: Any) -> Callable[..., Report]:
    """A function taking `fn`'s arguments and returning the `Report` of `fn` compiled for them.
    `fn` may already be jitted (`jax.jit(f, ...)`: its options are kept); otherwise it is jitted
    with `jit_options` (`static_argnums=...`, `donate_argnums=...`). The module analysed is the
    one XLA compiled for these arguments' shapes and dtypes (`Compiled.as_text()`)."""
    is_jitted = hasattr(fn, "lower")
    if is_jitted and jit_options:
        raise ValueError(f"count(): {getattr(fn, '__name__', fn)!r} is already jitted; give jit options to "
                         "jax.jit, not to count()")

    @functools.wraps(fn)
    def counted(*args: Any, **kwargs: Any) -> Report:
        import jax

        jitted = fn if is_jitted else jax.jit(fn, **jit_options)
        return analyze(jitted.lower(*args, **kwargs).compile(), trip_counts=trip_counts)

    return counted
