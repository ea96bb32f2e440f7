"""PyTorch peer of the decode and training benches (benches/decode/,
benches/gpt2.rs): the same model shapes in `transformers`, eager attention,
f32, random weights, on the CPU (with the same number of threads) or a CUDA
GPU.

decode: a prompt of --prompt tokens in one forward (the prefill, timed
apart), then --tokens greedy tokens one at a time through the KV cache
(`past_key_values`), the argmax read back to the host each token as
wgpu-tp's sampler does. Prints the best and median ms between tokens.

step: batch 2 x 256 tokens, mean cross-entropy, backward, AdamW step,
zero-grad, then a synchronize. Prints the best and median of --steps steps
after one untimed step. --amp runs forward and loss under
`torch.autocast(float16)` (f32 masters, as wgpu-tp's
`LoadOptions::activations(F16)`), with a GradScaler on CUDA.

    python3 benches/peers/torch_lm.py decode --model gpt2 --threads 2
    python3 benches/peers/torch_lm.py decode --model smollm2 --prompt 128
    python3 benches/peers/torch_lm.py step --model gpt2 --device cuda
"""

import argparse
import statistics
import time

import torch
import transformers

# The shapes benches/decode/ and benches/gpt2.rs build (random weights).
SHAPES = {
    "gpt2": dict(family="gpt2", vocab=50257, ctx=1024, hidden=768, layers=12, heads=12),
    # SmolLM2-135M: 9 query / 3 KV heads, ffn 1536, tied.
    "smollm2": dict(family="llama", vocab=49152, ctx=2048, hidden=576, layers=30, heads=9,
                    kv=3, ffn=1536, theta=100000.0),
    # Qwen2.5-0.5B: 14 query / 2 KV heads, ffn 4864, q/k/v biases, tied.
    "qwen2.5": dict(family="qwen2", vocab=151936, ctx=32768, hidden=896, layers=24, heads=14,
                    kv=2, ffn=4864, theta=1000000.0),
    # Llama-3.2-1B: 32 query / 8 KV heads, ffn 8192, tied (no rope scaling,
    # as benches/decode/shapes.rs builds it).
    "llama3.2-1b": dict(family="llama", vocab=128256, ctx=2048, hidden=2048, layers=16,
                        heads=32, kv=8, ffn=8192, theta=500000.0),
}


def build(name, device):
    s = SHAPES[name]
    if s["family"] == "gpt2":
        cfg = transformers.GPT2Config(
            vocab_size=s["vocab"], n_positions=s["ctx"], n_embd=s["hidden"],
            n_layer=s["layers"], n_head=s["heads"], attn_implementation="eager")
        model = transformers.GPT2LMHeadModel(cfg)
    else:
        common = dict(
            vocab_size=s["vocab"], hidden_size=s["hidden"], intermediate_size=s["ffn"],
            num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
            num_key_value_heads=s["kv"], max_position_embeddings=s["ctx"],
            rope_theta=s["theta"], tie_word_embeddings=True, attn_implementation="eager")
        if s["family"] == "qwen2":
            model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**common))
        else:
            model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**common))
    model = model.to(device=device, dtype=torch.float32)
    weights = sum(p.numel() for p in model.parameters()) * 4
    return model, s, weights


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def decode(args):
    model, s, weights = build(args.model, args.device)
    model.eval()
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, s["vocab"], (1, args.prompt), generator=gen).to(args.device)
    with torch.no_grad():
        for run in range(2):  # the first warms up kernels and caches
            sync(args.device)
            t0 = time.perf_counter()
            out = model(prompt, use_cache=True)
            past = out.past_key_values
            nxt = int(out.logits[0, -1].argmax())
            prefill = time.perf_counter() - t0
            times = []
            t_all = time.perf_counter()
            for _ in range(args.tokens):
                t = time.perf_counter()
                ids = torch.tensor([[nxt]], device=args.device)
                out = model(ids, past_key_values=past, use_cache=True)
                past = out.past_key_values
                nxt = int(out.logits[0, -1].argmax())
                times.append(time.perf_counter() - t)
            mean = (time.perf_counter() - t_all) / args.tokens
    ms = [t * 1e3 for t in times]
    print(f"torch {torch.__version__} transformers {transformers.__version__} {args.device} "
          f"threads {torch.get_num_threads()}: {args.model} decode, prompt {args.prompt}: "
          f"prefill {prefill * 1e3:.1f} ms, {args.tokens} tokens: best {min(ms):.2f} ms/token, "
          f"median {statistics.median(ms):.2f} ms/token, mean {mean * 1e3:.2f} ms/token; "
          f"f32 weights {weights / 1e6:.0f} MB")


def step(args):
    model, s, weights = build(args.model, args.device)
    model.train()
    # No dropout: wgpu-tp's bench step has none either.
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, s["vocab"], (args.batch, args.seq), generator=gen).to(args.device)
    kind = "cuda" if args.device.startswith("cuda") else "cpu"
    scaler = torch.amp.GradScaler(kind, enabled=args.amp and kind == "cuda")
    times = []
    for i in range(args.steps + 1):
        sync(args.device)
        t = time.perf_counter()
        with torch.autocast(kind, dtype=torch.float16, enabled=args.amp):
            loss = model(ids, labels=ids).loss
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=False)
        sync(args.device)
        if i > 0:
            times.append(time.perf_counter() - t)
    ms = [t * 1e3 for t in times]
    print(f"torch {torch.__version__} {args.device} threads {torch.get_num_threads()}: "
          f"{args.model} step {args.batch}x{args.seq} AdamW{' amp f16' if args.amp else ''}: best {min(ms):.1f} ms, "
          f"median {statistics.median(ms):.1f} ms (loss {loss.item():.3f})")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("what", choices=["decode", "step"])
    ap.add_argument("--model", choices=sorted(SHAPES), default="gpt2")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    ap.add_argument("--prompt", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--amp", action="store_true", help="step: autocast to float16 (mixed precision)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    (decode if args.what == "decode" else step)(args)


if __name__ == "__main__":
    main()
