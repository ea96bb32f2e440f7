#!/usr/bin/env python3
"""Greedy GPT-2 decoding with a key/value cache in JAX: the peer figure of
`benches/decode/` (`cargo bench --bench decode`).

Model: GPT-2 124M's shape (vocab 50257, context 1024, width 768, 12 heads,
12 layers, ffn 3072, GELU tanh, LayerNorm eps 1e-5, head tied to wte), f32,
random weights N(0, 0.02²) (biases 0, norms 1), on one CPU device (the P = 1
peer; XLA uses the machine's cores inside its kernels).

One jit-compiled function decodes one token: embed token + position,
12 pre-LN blocks attending to the cache (a [layers, 2, heads, context,
head_dim] array updated in place with dynamic_update_slice and donated;
positions past the current one masked), ln_f, the tied head on that one
position, and argmax (ties: the lowest id, as wgpu-tp's greedy), so only the
chosen id leaves the function, as in wgpu-tp. The prompt (8 tokens) is fed
through the same step, untimed. Then N tokens are decoded one at a time,
each ended by block_until_ready; the best and median ms/token are printed,
with the CPUs the process kept busy.

Run (see benches/peers/README.md):
    python benches/peers/jax_decode.py              # GPT-2 124M shape, 32 tokens
    python benches/peers/jax_decode.py --small      # vocab 4096, ctx 256, width 256, 4 heads, 2 layers
"""

import argparse
import os
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

PROMPT = 8


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokens", type=int, default=32, help="timed tokens (default 32)")
    p.add_argument("--small", action="store_true",
                   help="vocab 4096, context 256, width 256, 4 heads, 2 layers (the bench's small model)")
    return p.parse_args()


def init(key, vocab, ctx, hidden, layers, ffn):
    ks = iter(jax.random.split(key, 2 + 4 * layers))
    n = lambda shape: 0.02 * jax.random.normal(next(ks), shape, jnp.float32)  # noqa: E731
    blocks = []
    for _ in range(layers):
        blocks.append(dict(
            ln1_g=jnp.ones(hidden), ln1_b=jnp.zeros(hidden),
            attn_w=n((hidden, 3 * hidden)), attn_b=jnp.zeros(3 * hidden),
            proj_w=n((hidden, hidden)), proj_b=jnp.zeros(hidden),
            ln2_g=jnp.ones(hidden), ln2_b=jnp.zeros(hidden),
            fc_w=n((hidden, ffn)), fc_b=jnp.zeros(ffn),
            fc2_w=n((ffn, hidden)), fc2_b=jnp.zeros(hidden),
        ))
    return dict(wte=n((vocab, hidden)), wpe=n((ctx, hidden)), blocks=blocks,
                lnf_g=jnp.ones(hidden), lnf_b=jnp.zeros(hidden))


def layer_norm(x, g, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + eps) * g + b


def gelu(x):
    return 0.5 * x * (1.0 + jnp.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))


def make_step(heads):
    def step(params, cache, token, pos):
        """One token: (next token, cache with this position's keys/values)."""
        x = params["wte"][token] + params["wpe"][pos]  # [hidden]
        hidden = x.shape[0]
        hd = hidden // heads
        ctx = cache.shape[3]
        visible = jnp.arange(ctx) <= pos
        for i, b in enumerate(params["blocks"]):
            h = layer_norm(x, b["ln1_g"], b["ln1_b"])
            qkv = h @ b["attn_w"] + b["attn_b"]
            q, k, v = (qkv[j * hidden:(j + 1) * hidden].reshape(heads, hd) for j in range(3))
            cache = jax.lax.dynamic_update_slice(cache, k[None, None, :, None, :], (i, 0, 0, pos, 0))
            cache = jax.lax.dynamic_update_slice(cache, v[None, None, :, None, :], (i, 1, 0, pos, 0))
            s = jnp.einsum("hd,htd->ht", q, cache[i, 0]) / jnp.sqrt(jnp.float32(hd))
            s = jnp.where(visible[None, :], s, -jnp.inf)
            a = jnp.einsum("ht,htd->hd", jax.nn.softmax(s, axis=-1), cache[i, 1]).reshape(hidden)
            x = x + a @ b["proj_w"] + b["proj_b"]
            h = layer_norm(x, b["ln2_g"], b["ln2_b"])
            x = x + gelu(h @ b["fc_w"] + b["fc_b"]) @ b["fc2_w"] + b["fc2_b"]
        x = layer_norm(x, params["lnf_g"], params["lnf_b"])
        logits = params["wte"] @ x
        return jnp.argmax(logits).astype(jnp.int32), cache

    return jax.jit(step, donate_argnums=(1,))


def cpu_time():
    t = os.times()
    return t.user + t.system


def main():
    args = parse_args()
    if args.small:
        name, (vocab, ctx, hidden, heads, layers) = "small", (4096, 256, 256, 4, 2)
    else:
        name, (vocab, ctx, hidden, heads, layers) = "GPT-2 124M", (50257, 1024, 768, 12, 12)
    ffn = 4 * hidden
    print(f"jax {jax.__version__} on {jax.devices()[0].platform} ({os.cpu_count()} CPUs)")
    print(f"decode: {name} (vocab {vocab}, context {ctx}, width {hidden}, {heads} heads, "
          f"{layers} layers, f32), greedy with a KV cache, prompt {PROMPT}, {args.tokens} tokens")
    params = init(jax.random.PRNGKey(0), vocab, ctx, hidden, layers, ffn)
    n_params = sum(int(np.prod(p.shape)) for p in jax.tree_util.tree_leaves(params))
    print(f"parameters: {n_params / 1e6:.1f} M")
    cache = jnp.zeros((layers, 2, heads, ctx, hidden // heads), jnp.float32)
    step = make_step(heads)
    token = jnp.int32(0)
    prompt = [(i * 7919 + 13) % vocab for i in range(PROMPT)]
    t0 = time.perf_counter()
    for pos, t in enumerate(prompt):  # compiles on the first call
        token, cache = step(params, cache, jnp.int32(t), jnp.int32(pos))
    token.block_until_ready()
    print(f"prompt (with compile): {(time.perf_counter() - t0) * 1e3:.0f} ms")
    times = []
    c0, w0 = cpu_time(), time.perf_counter()
    for pos in range(PROMPT, PROMPT + args.tokens):
        t = time.perf_counter()
        token, cache = step(params, cache, token, jnp.int32(pos))
        token.block_until_ready()
        times.append(time.perf_counter() - t)
    busy = (cpu_time() - c0) / (time.perf_counter() - w0)
    times.sort()
    print(f"best {times[0] * 1e3:.2f} ms/token, median {times[len(times) // 2] * 1e3:.2f} ms/token, "
          f"cores {busy:.2f}")


if __name__ == "__main__":
    main()
