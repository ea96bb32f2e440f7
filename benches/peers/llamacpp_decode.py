"""llama.cpp peer of the decode bench (benches/decode/): the same model
shapes as random-weight GGUF files, quantized by llama.cpp itself, decoded
by `llama-cpp-python` with the same number of threads.

build: writes `<dir>/<model>-f16.gguf` (gguf-py's `GGUFWriter`; arch
`llama`, or `qwen2` for Qwen2.5's q/k/v biases; matrices F16, norms and
biases F32, N(0, 0.02) weights and unit norms as `CausalLm::new` draws
them; tied heads: no `output.weight`; a minimal SentencePiece vocabulary,
since llama.cpp refuses a file without `tokenizer.ggml.*`), then quantizes
it with `llama_cpp.llama_model_quantize` to each of --types (`q8_0`,
`q4_k_m`, `q4_k_s`, `q4_0`; `--pure` keeps every matrix in the one type,
as `Params::store_weights_as` does, instead of llama.cpp's mix). Prints
each file's path and size; the decode bench loads the same file
(`WGPU_TP_DECODE_GGUF=<path>`).

decode: loads a file with `n_threads` = --threads, evaluates a prompt of
--prompt tokens (the prefill: the time to the first token), then --tokens
greedy tokens through `Llama.generate` (top_k 1). Prints the best and
median gap between tokens and the mean gap over the whole call (as the
decode bench does for `nn::generate`), after one warm-up call, and the
process's resident memory after loading and after decoding against the
file's tensor bytes.

    python3 benches/peers/llamacpp_decode.py build --model smollm2 --types q8_0,q4_k_m
    python3 benches/peers/llamacpp_decode.py decode /tmp/wgpu-tp-gguf/smollm2-q4_k_m.gguf --threads 2
"""

import argparse
import ctypes
import os
import statistics
import time

import numpy as np

# The shapes benches/decode/shapes.rs builds.
SHAPES = {
    "smollm2": dict(arch="llama", vocab=49152, hidden=576, layers=30, heads=9, kv=3, ffn=1536,
                    theta=100000.0, bias=False),
    "qwen2.5": dict(arch="qwen2", vocab=151936, hidden=896, layers=24, heads=14, kv=2, ffn=4864,
                    theta=1000000.0, bias=True),
    "llama3.2-1b": dict(arch="llama", vocab=128256, hidden=2048, layers=16, heads=32, kv=8,
                        ffn=8192, theta=500000.0, bias=False),
}

FTYPES = {"q8_0": 7, "q4_0": 2, "q4_k_s": 14, "q4_k_m": 15, "q5_k_m": 17, "q6_k": 18, "f16": 1}


def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def build(args):
    import gguf

    s = SHAPES[args.model]
    os.makedirs(args.dir, exist_ok=True)
    f16 = os.path.join(args.dir, f"{args.model}-f16.gguf")
    rng = np.random.default_rng(0)
    if not os.path.exists(f16):
        a, h, head_dim = s["arch"], s["hidden"], s["hidden"] // s["heads"]
        w = gguf.GGUFWriter(f16, a)
        w.add_name(f"random {args.model}")
        w.add_context_length(2048)
        w.add_embedding_length(h)
        w.add_block_count(s["layers"])
        w.add_feed_forward_length(s["ffn"])
        w.add_head_count(s["heads"])
        w.add_head_count_kv(s["kv"])
        w.add_rope_freq_base(s["theta"])
        w.add_rope_dimension_count(head_dim)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_file_type(1)
        # A SentencePiece vocabulary: <unk> <s> </s>, the 256 byte pieces
        # (llama.cpp looks up <0x0A> for the newline), then filler pieces.
        tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
        tokens += [f"t{i}" for i in range(s["vocab"] - len(tokens))]
        types = [2, 3, 3] + [6] * 256 + [1] * (s["vocab"] - 259)
        w.add_tokenizer_model("llama")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_scores([0.0] * s["vocab"])
        w.add_token_types(types)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_unk_token_id(0)

        def mat(rows, cols):
            return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)

        q, kv = s["heads"] * head_dim, s["kv"] * head_dim
        w.add_tensor("token_embd.weight", mat(s["vocab"], h))
        w.add_tensor("output_norm.weight", np.ones(h, np.float32))
        for i in range(s["layers"]):
            b = f"blk.{i}."
            w.add_tensor(b + "attn_norm.weight", np.ones(h, np.float32))
            for name, rows in (("attn_q", q), ("attn_k", kv), ("attn_v", kv)):
                w.add_tensor(b + name + ".weight", mat(rows, h))
                if s["bias"]:
                    w.add_tensor(b + name + ".bias", np.zeros(rows, np.float32))
            w.add_tensor(b + "attn_output.weight", mat(h, q))
            w.add_tensor(b + "ffn_norm.weight", np.ones(h, np.float32))
            w.add_tensor(b + "ffn_gate.weight", mat(s["ffn"], h))
            w.add_tensor(b + "ffn_up.weight", mat(s["ffn"], h))
            w.add_tensor(b + "ffn_down.weight", mat(h, s["ffn"]))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    print(f"{f16}: {os.path.getsize(f16) / 1e6:.0f} MB")
    import llama_cpp

    for t in args.types.split(","):
        out = os.path.join(args.dir, f"{args.model}-{t}{'-pure' if args.pure else ''}.gguf")
        if not os.path.exists(out):
            p = llama_cpp.llama_model_quantize_default_params()
            p.nthread = args.threads
            p.ftype = FTYPES[t]
            p.pure = args.pure
            rc = llama_cpp.llama_model_quantize(f16.encode(), out.encode(), ctypes.byref(p))
            if rc != 0:
                raise SystemExit(f"llama_model_quantize {t} failed: {rc}")
        print(f"{out}: {os.path.getsize(out) / 1e6:.0f} MB")


def tensor_bytes(path):
    import gguf

    r = gguf.GGUFReader(path)
    total = sum(int(t.n_bytes) for t in r.tensors)
    kinds = {}
    for t in r.tensors:
        if len(t.shape) >= 2:
            kinds[t.tensor_type.name] = kinds.get(t.tensor_type.name, 0) + int(t.n_bytes)
    return total, kinds


def decode(args):
    import llama_cpp

    total, kinds = tensor_bytes(args.path)
    base = rss()
    t = time.perf_counter()
    llm = llama_cpp.Llama(model_path=args.path, n_threads=args.threads,
                          n_threads_batch=args.threads, n_ctx=args.prompt + 2 * args.tokens + 16,
                          n_batch=max(args.prompt, 8), use_mmap=args.mmap, verbose=False)
    load_s = time.perf_counter() - t
    after_load = rss()
    vocab = llm.n_vocab()
    prompt = [int((i * 7919 + 13) % vocab) for i in range(args.prompt)]

    def once(n):
        # Forget the cached tokens: `generate` would otherwise reuse the
        # prompt's keys and values from the call before (a prefix match).
        llm.reset()
        stamps = []
        start = time.perf_counter()
        for tok in llm.generate(prompt, top_k=1, temp=0.0, reset=True):
            stamps.append(time.perf_counter())
            if len(stamps) == n:
                break
        return start, stamps

    once(3)  # warm-up
    start, stamps = once(args.tokens)
    gaps = sorted(b - a for a, b in zip(stamps, stamps[1:]))
    after = rss()
    ms = lambda x: x * 1e3  # noqa: E731
    print(f"llama.cpp (llama-cpp-python {llama_cpp.__version__}) threads {args.threads}: "
          f"{os.path.basename(args.path)} ({', '.join(f'{k} {v / 1e6:.0f} MB' for k, v in kinds.items())}; "
          f"tensors {total / 1e6:.1f} MB), loaded in {load_s:.1f} s")
    print(f"  prompt {args.prompt}: prefill {ms(stamps[0] - start):.1f} ms; {args.tokens} tokens: "
          f"best {ms(gaps[0]):.2f}, median {ms(statistics.median(gaps)):.2f}, "
          f"generate mean {ms((stamps[-1] - stamps[0]) / (len(stamps) - 1)):.2f} ms/token")
    print(f"  RSS after loading {after_load / 2**20:.0f} MiB = {after_load / total:.2f} x the tensor "
          f"bytes (Python alone {base / 2**20:.0f} MiB; mmap {'on' if args.mmap else 'off'}); "
          f"after decoding {after / 2**20:.0f} MiB = {after / total:.2f} x")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    b = sub.add_parser("build")
    b.add_argument("--model", choices=sorted(SHAPES), default="smollm2")
    b.add_argument("--types", default="q8_0,q4_k_m")
    b.add_argument("--pure", action="store_true", help="every matrix in the one type")
    b.add_argument("--dir", default="/tmp/wgpu-tp-gguf")
    b.add_argument("--threads", type=int, default=2)
    d = sub.add_parser("decode")
    d.add_argument("path")
    d.add_argument("--threads", type=int, default=2)
    d.add_argument("--prompt", type=int, default=128)
    d.add_argument("--tokens", type=int, default=32)
    d.add_argument("--mmap", action="store_true", help="map the file (default: read it in)")
    args = ap.parse_args()
    (build if args.what == "build" else decode)(args)


if __name__ == "__main__":
    main()
