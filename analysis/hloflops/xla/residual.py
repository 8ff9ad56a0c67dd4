"""What the reconciliation's residual is made of.

`reconciliation["residual"]` = exact total - XLA's flops - every loop's extra (what counting
each loop at its trip count adds over XLA's counting it once). With every loop taken away, the
residual is the accounting's loop-once total minus XLA's number, and it splits exactly into

    conditionals      the accounting's loop-once total (each conditional charged its branch with
                      the most flops, whole) minus the loop-once total with XLA's rule for
                      conditionals (each key's maximum over the branches on its own);
    exact_view        that total in our exact view minus the same total in XLA's view (integers):
                      custom-calls XLA counts as -1 and we cost by their target, ops we cannot
                      cost (uncounted: 0 here, something in XLA's view), kernels XLA misses;
    float32_rounding  XLA's view summed in integers minus XLA's float32 sums (`xla_estimate`
                      reproduces XLA's float32 arithmetic; on loop-free modules without
                      custom-calls this is the whole residual);
    unexplained       whatever is left (0 unless XLA's estimate could not be predicted, when the
                      whole exact total shows as residual).
"""

from __future__ import annotations

import math

from hloflops.cost.costs import Cost
from hloflops.results import Accounting
from hloparse.ir import Module

CAUSES = ("conditionals", "exact_view", "float32_rounding", "unexplained")
RESIDUAL = "residual"


def residual_causes(module: Module, accounting: Accounting) -> dict[str, int]:
    """The residual split by cause (flops; they sum to the residual). Empty when it is 0."""
    residual = int(accounting.reconciliation.get(RESIDUAL, 0))
    if not residual:
        return {}
    from hloflops.engine import evaluate
    from hloflops.xla.estimate import loop_once_total

    loop_extras = sum(v for k, v in accounting.reconciliation.items() if k != RESIDUAL)
    once = accounting.total.flops - loop_extras
    xla_flops = float(accounting.xla_estimate.get("flops", 0.0))
    causes = dict.fromkeys(CAUSES, 0)
    if not accounting.xla_estimate or not math.isfinite(xla_flops):
        causes["unexplained"] = residual
        return causes
    try:
        exact = evaluate(module)  # the pass the accounting ran: kept with the module
        # ENTRY's total as an APPLIED body is this sum (every loop once, a conditional by its
        # per-key maximum), already made; not where an uncounted op made it a reason instead.
        entry = exact.applied[module.entry_name]
        exact_once = entry.flops if isinstance(entry, Cost) else loop_once_total(module, exact.exact).flops
        # Where no instruction costs differently in XLA's view, its integer total is the same: the
        # second pass over the module (a third of `hloflops FILE` on a large one) is not needed.
        xla_once = loop_once_total(module, evaluate(module, view="xla").exact).flops if exact.views_differ \
            else exact_once
    except ValueError:  # XLA's view cannot be costed: nothing to split
        causes["unexplained"] = residual
        return causes
    causes["conditionals"] = once - exact_once
    causes["exact_view"] = exact_once - xla_once
    causes["float32_rounding"] = xla_once - int(xla_flops)
    causes["unexplained"] = residual - causes["conditionals"] - causes["exact_view"] - causes["float32_rounding"]
    return causes


def residual_text(causes: dict[str, int]) -> str:
    """`12 float32 rounding of XLA's sums, -3 custom-calls ...` (the non-zero causes)."""
    words = {
        "conditionals": "conditionals (XLA takes each key's largest branch, we the branch with the most flops)",
        "exact_view": "ops XLA counts differently (custom-calls it counts -1, uncounted ops, kernels)",
        "float32_rounding": "float32 rounding of XLA's sums",
        "unexplained": "unexplained",
    }
    return "; ".join(f"{value:,} {words[key]}" for key, value in causes.items() if value)
