"""Drawing remat programs for the differential test (issue 28): `draw(seed)` gives a `Form`
(tests/programs/remat_forms.py), `check(form)` judges it against its twin without the remat
wrapper at both stages (tests/remat/judge.py).

What a draw ranges over: the form (Python loop, lax.scan, scan with unroll=True or k, fori_loop,
a whole-model checkpoint, gradient accumulation, nnx, Equinox, linen's nn.remat per block, under
nn.scan, nn.remat_scan, around the whole model, nested), the policy and `prevent_cse`, the
architecture (MLP, attention blocks, a transformer LM, an encoder-decoder with cross-attention,
a BiLSTM), and the sizes (batch 2-32, width 16-128, hidden 32-512, 1-4 heads, 4-64 tokens, 1-8
layers; the Flax examples' small configs fall in this range), float32 or bfloat16.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tests.programs.remat_forms import Form, build
from tests.remat.judge import STAGES, Verdict, judge

# form -> the architectures it is drawn with
FORMS: dict[str, tuple[str, ...]] = {
    "python_loop": ("mlp", "attn"),
    "scan": ("mlp", "attn"),
    "scan_unrolled": ("mlp", "attn"),
    "fori_loop": ("mlp",),
    "whole_model": ("mlp", "attn"),
    "grad_accumulation": ("mlp", "attn"),
    "nnx_loop": ("mlp",),
    "eqx_list": ("mlp",),
    "linen_loop": ("mlp", "lm", "encdec", "bilstm"),
    "linen_scan": ("mlp", "lm"),
    "linen_remat_scan": ("mlp", "lm"),
    "linen_whole": ("mlp", "lm", "encdec"),
    "linen_nested": ("mlp", "lm", "encdec"),
    "whole_model_checkpoint": ("lm", "encdec"),
}
POLICY_NAMES = ("none", "nothing_saveable", "dots_saveable", "dots_with_no_batch_dims_saveable",
                "save_only_these_names")


def draw(seed: int) -> Form:
    rng = random.Random(seed)
    form = rng.choice(sorted(FORMS))
    arch = rng.choice(FORMS[form])
    width = rng.choice((16, 32, 64, 128))
    heads = rng.choice([h for h in (1, 2, 4) if width % h == 0])
    layers = rng.randint(1, 3) if arch in ("lm", "encdec", "attn") else rng.randint(1, 8)
    f = Form(form, arch=arch,
             policy="none" if form == "linen_remat_scan" else rng.choice(POLICY_NAMES),
             prevent_cse=form == "linen_remat_scan" or rng.random() < 0.8,
             batch=rng.choice((2, 4, 8, 16, 32)), width=width, hidden=rng.choice((32, 64, 128, 256, 512)),
             heads=heads, tokens=rng.choice((4, 8, 16, 32, 64)), layers=layers, micro=rng.choice((2, 4)),
             unroll=rng.choice((True, 2)) if form in ("scan_unrolled", "grad_accumulation") else 1,
             adam=form in ("nnx_loop", "eqx_list") and rng.random() < 0.5,
             dtype="bfloat16" if rng.random() < 0.15 else "float32",
             act=rng.choice(("tanh", "gelu", "relu")))
    if f.arch == "attn" and f.batch * f.tokens > 256:  # keep the attention programs quick to compile
        f = f.with_(tokens=max(4, 256 // f.batch))
    return f


@dataclass(frozen=True)
class Outcome:
    form: Form
    verdicts: tuple[Verdict, ...]

    def matmul_ok(self, stage: str) -> bool:
        v = self._at(stage)
        return not v.twin_remat and all(v.reported.get(op, 0) == v.truth.get(op, 0) for op in ("dot", "convolution"))

    def all_ok(self, stage: str) -> bool:
        return self._at(stage).ok

    def _at(self, stage: str) -> Verdict:
        return next(v for v in self.verdicts if v.stage == stage)

    def describe(self) -> str:
        return "\n".join([f"replay: check({self.form!r})"] + [v.describe() for v in self.verdicts])


def check(form: Form) -> Outcome:
    pair = build(form)
    return Outcome(form, tuple(judge(pair, stage) for stage in STAGES))
