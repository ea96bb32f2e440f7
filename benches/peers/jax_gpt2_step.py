#!/usr/bin/env python3
"""GPT-2 124M's training step in JAX, the peer figure of `benches/gpt2.rs`.

The same model and step as the Rust bench: vocab 50257, context 1024, width
768, 12 heads, 12 layers, pre-LN blocks, GELU (tanh form), LayerNorm eps
1e-5, output head tied to `wte`; batch 2 x 256 tokens from the bench's LCG
(targets: the next token of each sequence, the last one wrapping); mean
cross-entropy; backward; AdamW with PyTorch's defaults (beta 0.9 / 0.999,
eps 1e-8, weight decay 0.01, on every parameter as `nn::AdamW` does) at lr
3e-4. f32 throughout, weights N(0, 0.02^2) (residual projections
0.02 / sqrt(2 * layers)), biases 0, LayerNorm 1 / 0.

Unsharded: one jit-compiled step (parameters and moments donated, so it
updates in place) that XLA runs on all of the machine's cores; the Rust
bench's P simulated ranks share the same cores. Compilation and one warm-up
step are not timed; then N steps are timed one by one, each ended by
block_until_ready. Prints best and median ms/step, the CPUs kept busy, and
whether the CPU has AVX-512 (XLA uses it where present; lavapipe emits
256-bit code).

Run (see benches/peers/README.md):
    python benches/peers/jax_gpt2_step.py                 # 12 layers, 3 timed steps
    python benches/peers/jax_gpt2_step.py --layers 2 --steps 2
"""

import argparse
import os
import sys
import time

VOCAB, CTX, WIDTH, HEADS = 50257, 1024, 768, 12
BATCH, SEQ = 2, 256
LR, B1, B2, EPS, WD = 3e-4, 0.9, 0.999, 1e-8, 0.01


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=12, help="blocks (default 12)")
    p.add_argument("--steps", type=int, default=3, help="timed steps (default 3)")
    return p.parse_args()


ARGS = parse_args()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402


def init_params(layers, seed=0):
    rng = np.random.default_rng(seed)
    n = lambda std, *s: (std * rng.standard_normal(s)).astype(np.float32)  # noqa: E731
    z = lambda *s: np.zeros(s, np.float32)  # noqa: E731
    o = lambda *s: np.ones(s, np.float32)  # noqa: E731
    proj = 0.02 / np.sqrt(2 * layers)
    blocks = []
    for _ in range(layers):
        blocks.append({
            "ln_1_w": o(WIDTH), "ln_1_b": z(WIDTH),
            "c_attn_w": n(0.02, 3 * WIDTH, WIDTH), "c_attn_b": z(3 * WIDTH),
            "c_proj_w": n(proj, WIDTH, WIDTH), "c_proj_b": z(WIDTH),
            "ln_2_w": o(WIDTH), "ln_2_b": z(WIDTH),
            "c_fc_w": n(0.02, 4 * WIDTH, WIDTH), "c_fc_b": z(4 * WIDTH),
            "mlp_proj_w": n(proj, WIDTH, 4 * WIDTH), "mlp_proj_b": z(WIDTH),
        })
    return {"wte": n(0.02, VOCAB, WIDTH), "wpe": n(0.02, CTX, WIDTH), "h": blocks,
            "ln_f_w": o(WIDTH), "ln_f_b": z(WIDTH)}


def layer_norm(x, w, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + 1e-5) * w + b


def block(p, x):
    # x: [B, T, C]; weights [out, in] as nn.Linear.
    bsz, t, c = x.shape
    hd = c // HEADS
    qkv = layer_norm(x, p["ln_1_w"], p["ln_1_b"]) @ p["c_attn_w"].T + p["c_attn_b"]
    q, k, v = jnp.split(qkv, 3, axis=-1)
    heads = lambda a: a.reshape(bsz, t, HEADS, hd).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = heads(q), heads(k), heads(v)
    s = (q @ k.transpose(0, 1, 3, 2)) / np.sqrt(hd)
    mask = jnp.tril(jnp.ones((t, t), bool))
    s = jnp.where(mask, s, -jnp.inf)
    a = jax.nn.softmax(s, axis=-1) @ v
    a = a.transpose(0, 2, 1, 3).reshape(bsz, t, c)
    x = x + a @ p["c_proj_w"].T + p["c_proj_b"]
    h = layer_norm(x, p["ln_2_w"], p["ln_2_b"]) @ p["c_fc_w"].T + p["c_fc_b"]
    h = jax.nn.gelu(h, approximate=True)
    return x + h @ p["mlp_proj_w"].T + p["mlp_proj_b"]


def loss_fn(params, ids, targets):
    x = params["wte"][ids] + params["wpe"][jnp.arange(SEQ)][None]
    for p in params["h"]:
        x = block(p, x)
    x = layer_norm(x, params["ln_f_w"], params["ln_f_b"])
    logits = x @ params["wte"].T
    lse = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return jnp.mean(lse - picked)


def step(params, m, v, t, ids, targets):
    loss, g = jax.value_and_grad(loss_fn)(params, ids, targets)
    t = t + 1
    m = jax.tree_util.tree_map(lambda m, g: B1 * m + (1 - B1) * g, m, g)
    v = jax.tree_util.tree_map(lambda v, g: B2 * v + (1 - B2) * g * g, v, g)
    c1, c2 = 1 - B1 ** t, 1 - B2 ** t

    def update(p, m, v):
        p = p * (1 - LR * WD)
        return p - LR * (m / c1) / (jnp.sqrt(v / c2) + EPS)

    return jax.tree_util.tree_map(update, params, m, v), m, v, t, loss


def batch():
    """benches/gpt2.rs `batch()`: the LCG ids and next-token targets."""
    s, mask = 0x2545_F491_4F6C_DD1D, (1 << 64) - 1
    ids = []
    for _ in range(BATCH * SEQ):
        s = (s * 6364136223846793005 + 1442695040888963407) & mask
        ids.append((s >> 33) % VOCAB)
    ids = np.array(ids, np.int32).reshape(BATCH, SEQ)
    return ids, np.roll(ids, -1, axis=1)


def cpu_isa():
    try:
        flags = next(ln for ln in open("/proc/cpuinfo") if ln.startswith("flags")).split()
    except (OSError, StopIteration):
        return "unknown"
    return "AVX-512" if "avx512f" in flags else ("AVX2+FMA" if "fma" in flags else "SSE/AVX")


def main():
    import jaxlib

    params = jax.tree_util.tree_map(jnp.asarray, init_params(ARGS.layers))
    zeros = lambda: jax.tree_util.tree_map(jnp.zeros_like, params)  # noqa: E731
    m, v, t = zeros(), zeros(), jnp.zeros((), jnp.float32)
    ids, targets = (jnp.asarray(a) for a in batch())
    n = sum(x.size for x in jax.tree_util.tree_leaves(params))
    print(f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, numpy {np.__version__}, "
          f"python {sys.version.split()[0]}; {jax.devices()[0].platform}, "
          f"os.cpu_count() {os.cpu_count()}, CPU has {cpu_isa()}")
    print(f"GPT-2: {n / 1e6:.1f}M parameters, {ARGS.layers} layers; batch {BATCH} x {SEQ}; "
          f"forward + backward + AdamW; {ARGS.steps} timed steps")
    f = jax.jit(step, donate_argnums=(0, 1, 2))
    t0 = time.perf_counter()
    params, m, v, t, loss = f(params, m, v, t, ids, targets)
    jax.block_until_ready(loss)
    print(f"compile + first step: {(time.perf_counter() - t0) * 1e3:.0f} ms; loss {float(loss):.4f}")
    params, m, v, t, loss = f(params, m, v, t, ids, targets)
    jax.block_until_ready(loss)
    times = []
    cpu0 = time.process_time()
    for _ in range(ARGS.steps):
        t1 = time.perf_counter()
        params, m, v, t, loss = f(params, m, v, t, ids, targets)
        jax.block_until_ready((params, loss))
        times.append(time.perf_counter() - t1)
    cores = (time.process_time() - cpu0) / sum(times)
    times.sort()
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    except ImportError:
        peak = float("nan")
    print(f"loss after {ARGS.steps + 2} steps: {float(loss):.4f}")
    print(f"best {times[0] * 1e3:.0f} ms/step, median {times[len(times) // 2] * 1e3:.0f} ms/step; "
          f"cores busy {cores:.2f} of {os.cpu_count()}; peak RSS {peak:.0f} MiB")


if __name__ == "__main__":
    main()
