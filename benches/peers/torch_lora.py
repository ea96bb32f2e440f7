"""PyTorch + peft peer of benches/lora.rs: the same configurations in one
process each, eager, f32, random weights, on the CPU with --threads.

    lora1 / lora4   LoRA r 16 (alpha 32) on q,k,v,o,gate,up,down, 2 x 512
                    tokens, AdamW over the adapters (torch has one device:
                    lora4 is lora1)
    lora1r / lora4r the same with gradient checkpointing
                    (model.gradient_checkpointing_enable(), non-reentrant)
    full1           every weight trained, 2 x 512
    inferena        input 0..127: a 128-token forward, a one-token forward,
                    a full training step at sequence 128

Prints `RESULT best median [...] peak_rss_mib [loss]` as benches/lora.rs reads it.

    python3 benches/peers/torch_lora.py lora1 --steps 2 --threads 2
"""

import argparse
import resource
import statistics
import time

import torch
import transformers


def build(layers):
    cfg = transformers.LlamaConfig(
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=layers,
        num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048,
        rope_theta=100000.0, tie_word_embeddings=True, attn_implementation="eager")
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).float()


def peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def best_median(ts):
    ms = [t * 1e3 for t in ts]
    return min(ms), statistics.median(ms)


def batch(rows, seq):
    s = 0x2545F4914F6CDD1D
    mask = (1 << 64) - 1
    ids = []
    for _ in range(rows * seq):
        s ^= (s << 13) & mask
        s ^= s >> 7
        s ^= (s << 17) & mask
        ids.append(s % 49152)
    ids = torch.tensor(ids).reshape(rows, seq)
    targets = torch.roll(ids, -1, dims=1)
    return ids, targets


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--layers", type=int, default=30)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model = build(a.layers)
    if a.case == "inferena":
        ids = torch.arange(128)[None]
        fwd, one = [], []
        model.eval()
        with torch.no_grad():
            for _ in range(a.steps + 1):
                t = time.perf_counter(); model(ids); fwd.append(time.perf_counter() - t)
                t = time.perf_counter(); model(ids[:, :1]); one.append(time.perf_counter() - t)
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        targets = torch.arange(1, 129)[None]
        train = []
        for _ in range(a.steps + 1):
            t = time.perf_counter()
            logits = model(ids).logits
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
            loss.backward(); opt.step(); opt.zero_grad(set_to_none=False)
            train.append(time.perf_counter() - t)
        f, o, s = best_median(fwd[1:]), best_median(one[1:]), best_median(train[1:])
        print(f"RESULT {f[0]:.0f} {f[1]:.0f} {o[0]:.1f} {o[1]:.1f} {s[0]:.0f} {s[1]:.0f} {peak_mib():.0f}")
        return
    if a.case.startswith("lora"):
        from peft import LoraConfig, get_peft_model
        cfg = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, task_type="CAUSAL_LM",
                         target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
        if a.case.endswith("r"):
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            model.enable_input_require_grads()
        model = get_peft_model(model, cfg)
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    ids, targets = batch(2, 512)
    times = []
    for _ in range(a.steps + 1):
        t = time.perf_counter()
        logits = model(input_ids=ids).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=False)
        times.append(time.perf_counter() - t)
    b, m = best_median(times[1:])
    print(f"RESULT {b:.0f} {m:.0f} {peak_mib():.0f} {loss.item():.4f}")


if __name__ == "__main__":
    main()
