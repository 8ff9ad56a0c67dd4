"""TPU programs as users write them, compiled ahead of time for real TPU topologies through libtpu
(no TPU needed: `jax.experimental.topologies`), each beside its truth.

Importing this module does not import jax; `build(name, topology)` does. Every entry builds
`program` (the step as written: scans, conds, shard_map collectives) and, where the step has a
loop, `twin` (the same step with the loop written as a Python loop, which XLA compiles without a
while). The truths the tests check (tests/tpu/test_tpu_catalogue.py):

- dot FLOPs of `program`, loop-aware, equal those of `twin` exactly (per device); where the twin
  has no loop, hloflops' total equals XLA's own `cost_analysis()` of the twin;
- `comm`: the bytes one device sends, by collective, written by hand below from the ring formulas
  (all-reduce 2(n-1)/n S, all-gather (n-1)/n S_out, reduce-scatter (n-1)/n S_in, all-to-all
  (n-1)/n S, collective-permute S), multiplied by how often the loop runs.

Sizes are small (the stored modules are a few KB gzipped) but TPU-shaped: bf16, feature sizes a
multiple of 128, so XLA picks the layouts, async collectives and fusions it picks for real steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

TOPOLOGIES = {"v4": "v4:2x2x1", "v5e": "v5e:2x2", "v5p": "v5p:2x2x1", "v6e": "v6e:2x2"}
DEVICES = {"v4": 8, "v5e": 4, "v5p": 4, "v6e": 4}
BF16 = 2


@dataclass(frozen=True)
class Entry:
    name: str
    build: Callable  # (devices) -> dict(program=(fn, args), twin=(fn, args) | None)
    topologies: tuple[str, ...] = tuple(TOPOLOGIES)
    # (n devices, topology key) -> {collective as hloflops reports it: bytes per device}; None:
    # not hand-counted (XLA's SPMD partitioner picks the collectives: only the totals are checked)
    comm: Callable[[int, str], dict[str, int]] | None = None
    twin: bool = False  # build() returns a twin: the loop written as a Python loop


def _jax():
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    return jax, jnp, np, lax, Mesh, NamedSharding, P


def _arg(mesh, shape, spec, dtype=None):
    jax, jnp, _, _, _, NamedSharding, P = _jax()
    return jax.ShapeDtypeStruct(shape, dtype or jnp.bfloat16, sharding=NamedSharding(mesh, P(*spec)))


def _mesh(devices, shape, names):
    _, _, np, _, Mesh, _, _ = _jax()
    return Mesh(np.array(devices).reshape(shape), names)


# --- FSDP: a 4-layer MLP as a scan over stacked weights split over every device, batch split too.
L, D, B = 4, 512, 64


def _mlp_loss(layers_as_scan: bool):
    jax, jnp, _, lax, _, _, _ = _jax()

    def loss(w, x):
        if layers_as_scan:
            h, _ = lax.scan(lambda h, wi: (jnp.tanh(h @ wi), None), x, w)
        else:
            h = x
            for i in range(w.shape[0]):
                h = jnp.tanh(h @ w[i])
        return jnp.mean(h.astype(jnp.float32) ** 2)

    return loss


def _sgd(loss):
    jax, *_ = _jax()

    def step(w, x):
        value, grad = jax.value_and_grad(loss)(w, x)
        return w - 0.01 * grad, value

    return step


def _loss_all_reduce(n: int) -> int:
    return -(-2 * (n - 1) * 4 // n)  # the step's f32 mean loss, all-reduced: 2 (n-1)/n x 4 bytes


def _fsdp_scan_comm(n: int, topology: str) -> dict[str, int]:
    # each layer's [D, D] bf16 weight is gathered in the forward loop and again in the backward
    # loop; its gradient goes back to the shards once per layer: a reduce-scatter (an
    # all-reduce-scatter fusion), except on v4, where XLA runs it as an all-reduce and slices
    layer = D * D * BF16
    gathers = {"all-gather": 2 * L * ((n - 1) * layer // n)}
    if topology == "v4":
        return gathers | {"all-reduce": L * (2 * (n - 1) * layer // n) + _loss_all_reduce(n)}
    return gathers | {"reduce-scatter": L * ((n - 1) * layer // n), "all-reduce": _loss_all_reduce(n)}


def build_fsdp_scan(devices):
    n = len(devices)
    mesh = _mesh(devices, (n,), ("fsdp",))
    args = (_arg(mesh, (L, D, D), (None, "fsdp", None)), _arg(mesh, (B, D), ("fsdp", None)))
    return {"program": (_sgd(_mlp_loss(True)), args), "twin": (_sgd(_mlp_loss(False)), args)}


# --- FSDP gradient as the issue reports it: bf16 gradients of 10,485,760 bytes reduce-scattered
# over 4 devices ([1280, 2048] and [2048, 1280] weights, split by rows, as the batch). Each device
# sends (4-1)/4 of them: 7,864,320 bytes (TPU prints each as an all-reduce-scatter fusion), and
# gathers each weight for the forward, (4-1)/4 of it again.
def build_fsdp_grad(devices):
    jax, jnp, *_ = _jax()
    n = len(devices)
    mesh = _mesh(devices, (n,), ("fsdp",))

    def gathered(w):  # FSDP as MaxText writes it: the layer's weight gathered where it is used
        return jax.lax.with_sharding_constraint(w, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))

    def grads(w1, w2, x):
        def loss(w1, w2):
            return jnp.mean(jnp.tanh(jnp.tanh(x @ gathered(w1)) @ gathered(w2)).astype(jnp.float32) ** 2)
        g1, g2 = jax.grad(loss, (0, 1))(w1, w2)
        return w1 - 0.01 * g1, w2 - 0.01 * g2

    spec = ("fsdp", None)
    args = (_arg(mesh, (1280, 2048), spec), _arg(mesh, (2048, 1280), spec), _arg(mesh, (256, 1280), spec))
    return {"program": (grads, args), "twin": None}


def _fsdp_grad_comm(n: int, topology: str) -> dict[str, int]:
    grad_bytes = 2 * 1280 * 2048 * BF16
    if topology == "v6e":
        # v6e lays w1's gradient out column-major and reduces it with a plain all-reduce that each
        # device slices afterwards (in a separate fusion): that all-reduce is what moves
        half = grad_bytes // 2
        return {"all-gather": (n - 1) * grad_bytes // n, "all-reduce": 2 * (n - 1) * half // n,
                "reduce-scatter": (n - 1) * half // n}
    return {"reduce-scatter": (n - 1) * grad_bytes // n, "all-gather": (n - 1) * grad_bytes // n}


# --- Megatron tensor parallelism on a 2-D mesh (data x model): w1 split by columns, w2 by rows.
def build_tp_2d(devices):
    jax, jnp, *_ = _jax()
    n = len(devices)
    mesh = _mesh(devices, (2, n // 2), ("data", "model"))

    def step(w1, w2, x):
        def loss(w1, w2):
            return jnp.mean((jax.nn.gelu(x @ w1) @ w2).astype(jnp.float32) ** 2)
        g1, g2 = jax.grad(loss, (0, 1))(w1, w2)
        return w1 - 0.01 * g1, w2 - 0.01 * g2

    args = (_arg(mesh, (512, 2048), (None, "model")), _arg(mesh, (2048, 512), ("model", None)),
            _arg(mesh, (64, 512), ("data", None)))
    return {"program": (step, args), "twin": None}


def build_permuted_mesh(devices):
    """A 2-D mesh whose device order is not the topology's (as mesh_utils or a user's own
    arrangement gives); x split by rows over 'model', the result wanted split by columns: XLA
    gathers x over 'model' and prints the groups as `mesh[...], device_ids=(...) {...}`."""
    jax, jnp, *_ = _jax()
    n = len(devices)
    order = [0, 3, 1, 2] + list(range(4, n))
    mesh = _mesh([devices[i] for i in order], (2, n // 2), ("data", "model"))

    def f(x, w):
        y = jnp.tanh(x @ w)
        by_columns = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(None, "model"))
        y = jax.lax.with_sharding_constraint(y, by_columns)
        return jnp.sum(y * 2, axis=0)

    return {"program": (f, (_arg(mesh, (256, 256), ("model", None)), _arg(mesh, (256, 256), (None, None)))),
            "twin": None}


def _permuted_comm(n: int, topology: str) -> dict[str, int]:
    m = n // 2  # x ([256, 256] bf16) gathered over 'model': (m-1)/m of the gathered result
    return {"all-gather": (m - 1) * 256 * 256 * BF16 // m}


# --- Data parallel: replicated weights, batch split; a scan over 3 layers; gradients all-reduced.
def build_dp_scan(devices):
    n = len(devices)
    mesh = _mesh(devices, (n,), ("data",))
    args = (_arg(mesh, (3, 256, 256), (None, None, None)), _arg(mesh, (16 * n, 256), ("data", None)))
    return {"program": (_sgd(_mlp_loss(True)), args), "twin": (_sgd(_mlp_loss(False)), args)}


def _dp_comm(n: int, topology: str) -> dict[str, int]:
    # the gradient (3 x 256 x 256 bf16) all-reduced once; the f32 loss's mean is all-reduced too
    grad = 3 * 256 * 256 * BF16
    return {"all-reduce": -(-2 * (n - 1) * grad // n) + _loss_all_reduce(n)}


# --- Gradient accumulation: a scan over 3 micro-batches of a 2-layer FSDP MLP.
MICRO = 3


def build_grad_accum(devices):
    jax, jnp, _, lax, _, _, _ = _jax()
    n = len(devices)
    mesh = _mesh(devices, (n,), ("fsdp",))
    loss = _mlp_loss(False)

    def accumulate(w, xs, as_scan):
        if as_scan:
            g, _ = lax.scan(lambda g, xb: (g + jax.grad(loss)(w, xb), None), jnp.zeros_like(w), xs)
        else:
            g = jnp.zeros_like(w)
            for i in range(xs.shape[0]):
                g = g + jax.grad(loss)(w, xs[i])
        return w - 0.01 * g

    args = (_arg(mesh, (2, 256, 256), (None, "fsdp", None)), _arg(mesh, (MICRO, 16 * n, 256), (None, "fsdp", None)))
    return {"program": (lambda w, xs: accumulate(w, xs, True), args),
            "twin": (lambda w, xs: accumulate(w, xs, False), args)}


# --- MoE: one expert per device, tokens dispatched and combined by all-to-all (shard_map), inside
# a gradient-accumulation scan of 3 micro-batches.
C, DM = 128, 256  # tokens per expert per device, model width


def build_moe_accum(devices):
    jax, jnp, _, lax, _, _, P = _jax()
    n = len(devices)
    mesh = _mesh(devices, (n,), ("expert",))

    def expert_loss(w, xb):
        def body(w, xb):  # w [1, DM, DM], xb [n*C/n... per device: C*? tokens]
            y = lax.all_to_all(xb, "expert", 0, 0, tiled=True)
            y = jnp.tanh(y @ w[0])
            y = lax.all_to_all(y, "expert", 0, 0, tiled=True)
            return jnp.sum(y.astype(jnp.float32) ** 2, keepdims=True)
        return jax.shard_map(body, mesh=mesh, in_specs=(P("expert"), P("expert")), out_specs=P("expert"))(w, xb).sum()

    def step(w, xs, as_scan):
        if as_scan:
            g, _ = lax.scan(lambda g, xb: (g + jax.grad(expert_loss)(w, xb), None), jnp.zeros_like(w), xs)
        else:
            g = jnp.zeros_like(w)
            for i in range(xs.shape[0]):
                g = g + jax.grad(expert_loss)(w, xs[i])
        return w - 0.01 * g

    args = (_arg(mesh, (n, DM, DM), ("expert",)), _arg(mesh, (MICRO, n * C, DM), (None, "expert")))
    return {"program": (lambda w, xs: step(w, xs, True), args), "twin": (lambda w, xs: step(w, xs, False), args)}


def _moe_comm(n: int, topology: str) -> dict[str, int]:
    # per micro-batch: forward dispatch and combine, and the combine's transpose in the backward
    # (the dispatch's transpose would carry the tokens' gradient, which nothing asks for); each
    # moves a device's [C, DM] bf16 block, (n-1)/n of which leaves the device
    block = C * DM * BF16
    return {"all-to-all": MICRO * 3 * ((n - 1) * block // n)}


# --- Collectives inside loops (shard_map): a ppermute ring in a fori_loop of 5, an all-gather and
# a reduce-scatter in a scan of 3.
RING, SCAN = 5, 3


def build_ring(devices):
    jax, jnp, _, lax, _, _, P = _jax()
    n = len(devices)
    mesh = _mesh(devices, (n,), ("x",))

    def ring(x):
        def body(x):
            shift = [(j, (j + 1) % n) for j in range(n)]
            return lax.fori_loop(0, RING, lambda i, x: lax.ppermute(x, "x", shift) * 1.5, x)
        return jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"))(x)

    return {"program": (ring, (_arg(mesh, (n * 128, 256), ("x",)),)), "twin": None}


def _ring_comm(n: int, topology: str) -> dict[str, int]:
    return {"collective-permute-start": RING * 128 * 256 * BF16}  # TPU runs every permute async


def build_gather_scatter_scan(devices):
    jax, jnp, _, lax, _, _, P = _jax()
    n = len(devices)
    mesh = _mesh(devices, (n,), ("x",))

    def body(x):
        def one(x, _):
            full = lax.all_gather(x, "x", tiled=True)  # [n*128, 256]
            part = lax.psum_scatter(jnp.tanh(full), "x", scatter_dimension=0, tiled=True)  # [128, 256]
            return part * 0.5, None
        return lax.scan(one, x, None, length=SCAN)[0]

    def f(x):
        return jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"))(x)

    return {"program": (f, (_arg(mesh, (n * 128, 256), ("x",)),)), "twin": None}


def _gather_scatter_comm(n: int, topology: str) -> dict[str, int]:
    full = n * 128 * 256 * BF16
    if topology == "v4":
        # XLA for v4 runs the psum_scatter as an all-reduce (then each device slices its part,
        # in a separate loop fusion): the all-reduce is what moves, 2 (n-1)/n of the input
        return {"all-gather": SCAN * ((n - 1) * full // n), "all-reduce": SCAN * (2 * (n - 1) * full // n)}
    return {"all-gather": SCAN * ((n - 1) * full // n), "reduce-scatter": SCAN * ((n - 1) * full // n)}


def _tp_comm(n: int, topology: str) -> dict[str, int]:
    # forward: x @ w1 @ w2 is a partial sum over 'model' (m = n/2 devices): its [32, 512] bf16
    # all-reduced; backward: each weight gradient ([512, 2048/m] and [2048/m, 512] bf16) summed
    # over 'data' (2 devices): 2 (2-1)/2 x S = S each. The loss is not returned: nothing else moves.
    m = n // 2
    y = (64 // 2) * 512 * BF16
    w = 512 * (2048 // m) * BF16
    return {"all-reduce": -(-2 * (m - 1) * y // m) + 2 * w}


# --- lax.cond on a counter (every other layer) and on data, inside a scan of 6.
def build_conds(devices):
    jax, jnp, _, lax, _, _, _ = _jax()
    n = len(devices)
    mesh = _mesh(devices, (n,), ("x",))

    def conds(w, x):
        def layer(h, i):
            h = lax.cond(i % 2 == 0, lambda h: jnp.tanh(h @ w), lambda h: h * 2, h)
            return h, None
        return lax.scan(layer, x, jnp.arange(6))[0]

    def twin(w, x):
        h = x
        for i in range(6):
            h = jnp.tanh(h @ w) if i % 2 == 0 else h * 2
        return h

    args = (_arg(mesh, (256, 256), (None, None)), _arg(mesh, (16 * n, 256), ("x", None)))
    return {"program": (conds, args), "twin": (twin, args)}


# --- lax.cond on data: each of 6 layers applies the matmul only where the activations sum
# positive, which only the data decides: the count is a range, the dear end every layer's matmul.
def build_cond_on_data(devices):
    jax, jnp, _, lax, _, _, _ = _jax()
    n = len(devices)
    mesh = _mesh(devices, (n,), ("x",))

    def f(w, x):
        def layer(h, _):
            return lax.cond(jnp.sum(h) > 0, lambda h: jnp.tanh(h @ w), lambda h: h * 0.5, h), None
        return lax.scan(layer, x, None, length=6)[0]

    args = (_arg(mesh, (256, 256), (None, None)), _arg(mesh, (16 * n, 256), ("x", None)))
    return {"program": (f, args), "twin": None}


# --- A scanned LM block (attention + MLP) under jax.checkpoint policies, trained one step.
LM_L, LM_T, LM_D, LM_H = 3, 128, 256, 2


def _lm(policy: str | None, as_scan: bool):
    jax, jnp, _, lax, _, _, _ = _jax()
    policies = {"dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
                "nothing": jax.checkpoint_policies.nothing_saveable}

    def block(h, w):
        wq, wk, wv, wo, w1, w2 = w
        b, t, d = h.shape
        q, k, v = (jnp.einsum("btd,de->bte", h, m).reshape(b, t, LM_H, d // LM_H) for m in (wq, wk, wv))
        s = jnp.einsum("bthe,bshe->bhts", q, k) / jnp.sqrt(jnp.float32(d // LM_H)).astype(h.dtype)
        a = jnp.einsum("bhts,bshe->bthe", jax.nn.softmax(s, axis=-1), v).reshape(b, t, d)
        h = h + a @ wo
        return h + jax.nn.gelu(h @ w1) @ w2

    if policy is not None:
        block = jax.checkpoint(block, policy=policies[policy])

    def loss(ws, x):
        if as_scan:
            h, _ = lax.scan(lambda h, w: (block(h, w), None), x, ws)
        else:
            h = x
            for i in range(LM_L):
                h = block(h, tuple(m[i] for m in ws))
        return jnp.mean(h.astype(jnp.float32) ** 2)

    def step(ws, x):
        value, grads = jax.value_and_grad(loss)(ws, x)
        return tuple(w - 0.01 * g for w, g in zip(ws, grads)), value

    return step


def _lm_args(devices):
    n = len(devices)
    mesh = _mesh(devices, (n,), ("data",))
    d, f = LM_D, 4 * LM_D
    shapes = [(LM_L, d, d)] * 4 + [(LM_L, d, f), (LM_L, f, d)]
    ws = tuple(_arg(mesh, s, (None, None, None)) for s in shapes)
    return ws, _arg(mesh, (2 * n, LM_T, d), ("data", None, None))


def build_lm(policy):
    def build(devices):
        args = _lm_args(devices)
        # the twin is the same model without remat, layers unrolled: the model FLOPs
        return {"program": (_lm(policy, True), args), "twin": (_lm(None, False), args)}
    return build


# --- A Pallas TPU kernel (a tiled matmul), with and without a cost_estimate.
def build_pallas(with_estimate: bool):
    def build(devices):
        jax, jnp, *_ = _jax()
        from jax.experimental import pallas as pl

        m = k = nn_ = 256

        def kernel(a_ref, b_ref, o_ref):
            o_ref[...] = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32).astype(o_ref.dtype)

        estimate = pl.CostEstimate(flops=2 * m * k * nn_, transcendentals=0,
                                   bytes_accessed=3 * m * k * BF16) if with_estimate else None

        def f(a, b):
            return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((m, nn_), jnp.bfloat16),
                                  cost_estimate=estimate)(a, b)

        mesh = _mesh(devices[:1], (1,), ("x",))
        args = (_arg(mesh, (m, k), (None, None)), _arg(mesh, (k, nn_), (None, None)))
        return {"program": (f, args), "twin": None}
    return build


CATALOGUE: tuple[Entry, ...] = (
    Entry("fsdp_scan", build_fsdp_scan, comm=_fsdp_scan_comm, twin=True),
    Entry("fsdp_grad", build_fsdp_grad, comm=_fsdp_grad_comm, topologies=("v5e", "v6e")),
    Entry("tp_2d", build_tp_2d, comm=_tp_comm, topologies=("v4", "v5e")),
    Entry("permuted_mesh", build_permuted_mesh, comm=_permuted_comm, topologies=("v4", "v5e")),
    Entry("dp_scan", build_dp_scan, comm=_dp_comm, twin=True),
    Entry("grad_accum", build_grad_accum, topologies=("v5e", "v5p"), twin=True),
    Entry("moe_accum", build_moe_accum, comm=_moe_comm, twin=True),
    Entry("ring", build_ring, comm=_ring_comm),
    Entry("gather_scatter_scan", build_gather_scatter_scan, comm=_gather_scatter_comm, topologies=("v4", "v6e")),
    Entry("conds", build_conds, topologies=("v5e", "v6e"), twin=True),
    Entry("cond_on_data", build_cond_on_data, topologies=("v5p",)),
    Entry("lm_remat_dots", build_lm("dots"), topologies=("v5e", "v5p"), twin=True),
    Entry("lm_remat_nothing", build_lm("nothing"), topologies=("v6e",), twin=True),
    Entry("lm_scan", build_lm(None), topologies=("v4", "v6e"), twin=True),
    Entry("pallas_estimate", build_pallas(True), topologies=("v5e",)),
    Entry("pallas_plain", build_pallas(False), topologies=("v5e",)),
)
BY_NAME = {e.name: e for e in CATALOGUE}


def cases() -> list[tuple[str, str]]:
    """(entry name, topology key) of every compiled module."""
    return [(e.name, t) for e in CATALOGUE for t in e.topologies]
