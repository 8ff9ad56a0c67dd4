"""Drawing remat programs for the differential test (issue 28): `draw(seed)` gives a `Form`
(tests/programs/remat_forms.py), `check(form)` judges it against its twin without the remat
wrapper at both stages (tests/remat/judge.py).

What a draw ranges over: the form (Python loop, lax.scan, scan with unroll=True or k, fori_loop,
a whole-model checkpoint, gradient accumulation, nnx, Equinox, linen's nn.remat per block, under
nn.scan, nn.remat_scan, around the whole model, nested), the policy and `prevent_cse`, the
architecture (MLP, attention blocks, a transformer LM, an encoder-decoder with cross-attention,
a BiLSTM), and the sizes (batch 2-32, width 16-128, hidden 32-512, 1-4 heads, 4-64 tokens, 1-8
layers; the Flax examples' small configs fall in this range), float32 or bfloat16.

Two more families, drawn apart so that the seeds above keep their programs (`draw(seed, family)`):
`more`, the forms added in the third round: nnx's scan over `nnx.vmap`-built layers with
`nnx.remat`, Haiku's `hk.remat` per block in a Python loop and in `hk.layer_stack`, a conv net
(linen `nn.Conv` blocks, `nn.remat` per block, under `nn.scan`, nested), the host-offload policies
(`save_and_offload_only_these_names`, `offload_dot_with_no_batch_dims`), and sizes taken from the
public Flax examples' configs (lm1b, wmt, the MNIST CNN) with fewer layers and a smaller batch, so
that a CPU compile stays within seconds; and `tpu`, a draw of either family compiled by libtpu for
a v5e (one device, or sharded FSDP / tensor parallel over 2x2), judged the same way.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

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
OFFLOAD_POLICIES = ("save_and_offload_only_these_names", "offload_dot_with_no_batch_dims")

# family `more`: form -> the architectures it is drawn with
MORE_FORMS: dict[str, tuple[str, ...]] = {
    "nnx_scan": ("mlp",),
    "hk_loop": ("mlp", "attn"),
    "hk_layer_stack": ("mlp", "attn"),
    "linen_loop": ("conv", "lm"),
    "linen_scan": ("conv", "lm"),
    "linen_nested": ("conv",),
}
# The public Flax examples' configs (examples/lm1b, examples/wmt: bf16; the MNIST CNN), their
# widths, heads, MLP sizes and lengths kept, their depth and batch cut down for a CPU compile.
EXAMPLE_SIZES: dict[str, dict] = {
    "lm1b": dict(width=512, heads=8, hidden=2048, tokens=128, batch=4, dtype="bfloat16"),
    "wmt": dict(width=1024, heads=16, hidden=4096, tokens=256, batch=2, dtype="bfloat16"),
    "mnist": dict(width=32, heads=1, hidden=64, tokens=28, batch=16, dtype="float32"),
}
MESHES = ("single", "fsdp", "tp")


def draw(seed: int, family: str = "base") -> Form:
    """The program of `seed` in `family` (`base`, `more` or `tpu`)."""
    if family == "more":
        return _draw_more(random.Random(seed))
    if family == "tpu":
        rng = random.Random(seed)
        f = _draw_more(rng) if rng.random() < 0.5 else _draw_base(rng)
        # libtpu's compile time grows with the sizes (a wmt-sized layer takes minutes on this host):
        # at most lm1b's width, 3 layers
        f = f.with_(platform="tpu", mesh=rng.choice(MESHES), adam=False, layers=min(f.layers, 3))
        if f.width > 512:
            f = f.with_(**(EXAMPLE_SIZES["lm1b"] | dict(dtype=f.dtype)))
        return f
    if family != "base":
        raise ValueError(f"unknown family {family!r}")
    return _draw_base(random.Random(seed))


def _draw_base(rng: random.Random) -> Form:
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


def _draw_more(rng: random.Random) -> Form:
    if rng.random() < 0.2:  # an offload policy on a form of the first family
        form = rng.choice(("python_loop", "scan", "linen_loop", "nnx_loop"))
        arch = "lm" if form == "linen_loop" and rng.random() < 0.5 else "mlp"
        policy = rng.choice(OFFLOAD_POLICIES)
    else:
        form = rng.choice(sorted(MORE_FORMS))
        arch = rng.choice(MORE_FORMS[form])
        policy = rng.choice(POLICY_NAMES + OFFLOAD_POLICIES)
    f = Form(form, arch=arch, policy=policy, prevent_cse=rng.random() < 0.8, act=rng.choice(("tanh", "gelu", "relu")),
             layers=rng.randint(1, 3) if arch in ("attn", "lm", "conv") else rng.randint(1, 6))
    example = rng.choice({"attn": ["", "", "lm1b", "wmt"], "lm": ["", "", "lm1b", "wmt"],
                          "conv": ["", "", "mnist"]}.get(arch, [""]))
    if example:
        f = f.with_(layers=min(f.layers, 2), **EXAMPLE_SIZES[example])
    else:
        width = rng.choice((16, 32, 64, 128))
        f = f.with_(width=width, heads=rng.choice([h for h in (1, 2, 4) if width % h == 0]),
                    hidden=rng.choice((32, 64, 128, 256, 512)), batch=rng.choice((2, 4, 8, 16)),
                    tokens=rng.choice((8, 16, 32) if arch == "conv" else (4, 8, 16, 32, 64)),
                    dtype="bfloat16" if rng.random() < 0.15 else "float32")
        if arch in ("attn", "conv") and f.batch * f.tokens > 256:  # quick to compile
            f = f.with_(tokens=max(4, 256 // f.batch))
    if f.form.startswith("hk_") or f.form == "nnx_scan":
        f = f.with_(dtype="float32")  # their parameters are float32 whatever the input is
    return f


def label(form: Form) -> str:
    """The sweep's row for a draw: the form, and what a `more` draw adds to it."""
    parts = [form.form]
    if form.arch in ("conv", "attn", "lm") and form.form in MORE_FORMS:
        parts.append(form.arch)
    if form.policy in OFFLOAD_POLICIES:
        parts.append("offload")
    if form.platform != "cpu":
        parts.append(f"{form.platform}:{form.mesh}")
    return " ".join(parts)


@dataclass(frozen=True)
class Outcome:
    form: Form
    verdicts: tuple[Verdict, ...]

    def matmul_ok(self, stage: str) -> bool:
        v = self._at(stage)
        return not v.twin_remat and all(v.reported.get(op, 0) == v.truth.get(op, 0) for op in ("dot", "convolution"))

    def all_ok(self, stage: str) -> bool:
        return self._at(stage).ok

    def in_bounds(self, stage: str) -> bool:
        return self._at(stage).in_bounds

    def attainable(self, stage: str) -> bool:
        return self._at(stage).attainable

    def _at(self, stage: str) -> Verdict:
        return next(v for v in self.verdicts if v.stage == stage)

    def describe(self) -> str:
        return "\n".join([f"replay: check({self.form!r})"] + [v.describe() for v in self.verdicts])


def check(form: Form, cache: Path | None = None) -> Outcome:
    """Compile `form` and its twin and judge both stages; with `cache`, the compiled texts are
    kept in (and read back from) that directory (tests/remat/text_cache.py)."""
    pair = build(form)
    if cache is None:
        return Outcome(form, tuple(judge(pair, stage) for stage in STAGES))
    from tests.remat.text_cache import cached_texts

    text = cached_texts(cache, form, pair)
    return Outcome(form, tuple(judge(pair, stage, text) for stage in STAGES))
