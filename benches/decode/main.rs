//! Greedy decoding with the key/value cache, ms per generated token, on
//! P = 1, 2 and 4 simulated ranks (host-staged: each rank its own wgpu
//! device), beside the weight-streaming floor measured in the same run.
//!
//! Models (random weights, f32; `WGPU_TP_DECODE_MODEL`):
//! - `gpt2` (the default): GPT-2 124M's shape (vocab 50257, context 1024,
//!   width 768, 12 heads, 12 layers; a `CausalLm` of a `Gpt2Config`),
//!   prompt 8;
//! - `smollm2`: SmolLM2-135M's (vocab 49152, width 576, 30 layers, 9 query
//!   / 3 key-value heads, ffn 1536, tied; of a `LlamaConfig`), prompt 128;
//! - `qwen2.5`: Qwen2.5-0.5B's (vocab 151936, width 896, 24 layers, 14 / 2
//!   heads, ffn 4864, q/k/v biases, tied), prompt 128;
//! - `llama3.2-1b`: Llama-3.2-1B's (vocab 128256, width 2048, 16 layers,
//!   32 / 8 heads, ffn 8192, tied), prompt 128;
//! - `small`: a quick GPT (vocab 4096, context 256, width 256, 4 heads, 2
//!   layers), prompt 8.
//!
//! Kernel tuning (`wgpu_tp::Tuning`): the first P runs once with every
//! kernel on its vendor / Mesa guess (row `P=1g`), then with the choices
//! measured during its warm-up, and prints the ratio; the end lists what
//! was chosen per shape class. `WGPU_TP_TUNE=off` skips both;
//! `WGPU_TP_DECODE_GUESSES=0` skips the guesses' row (so the measured
//! choices run first in their process, as a `WGPU_TP_TUNE=off` process's
//! guesses do: the second case in a process tends to run slower).
//!
//! The prompt is decoded in one step (the prefill, timed apart), then N
//! tokens one at a time through `nn::generate`; the figure is the best and
//! the median time between consecutive tokens. Pipelines compile in a
//! warm-up generation first. `benches/peers/torch_lm.py decode` runs the
//! same shapes in PyTorch.
//!
//! Floor: one token reads every weight once (a tied head all of the
//! embedding; GPT-2's `wpe` one row), so bytes of weights per token / the
//! host's copy bandwidth (a `copy_from_slice` of that many bytes, best of
//! 5, measured here) is the time no implementation reading f32 weights from
//! memory can beat (a copy also writes, so read-only streaming may run up to
//! 2× that).
//!
//! Per P also the time `new` took to build the model (random weights drawn
//! on the devices) and the process's peak RSS right after it, against the
//! f32 weights of this process's ranks (on a CPU adapter device memory is
//! the host's, so about 1× P is the floor: no host copy of the weights).
//!
//! After each case, the resident set then (on CPU adapters the textures the
//! small-M GEMM keeps of the weights are device memory outside the pools).
//!
//! Then, per P, the top kernels of one traced token (`WGPU_TP_DECODE_TOP`
//! of them, default 8), after the host time rank 0 spent in collectives
//! (with a device per rank, where it waits for every rank's kernels).
//!
//! Weights: each P runs with f32 weights, then kept in bf16
//! (`Params::store_weights_as`; rows `P=n bf16`), printing the bytes a token
//! reads and the resident memory after; `WGPU_TP_DECODE_WEIGHTS=f32,bf16,f16`
//! picks; it also takes any quantized type by llama.cpp's name (`q8_0`,
//! `q4_0`, `q4_k`, …: `Params::store_weights_as(DType::Quant(q))`, llama.cpp's
//! reference quantizer on the host, from a freshly built f32 model, so
//! each quantized case starts from the same random weights).
//! `WGPU_TP_DECODE_GGUF=a.gguf,b.gguf` adds a case per file, loaded with
//! `CausalLm::from_gguf` (the files `benches/peers/llamacpp_decode.py
//! build` writes, which llama.cpp runs in the same session). The trace
//! line counts the dispatches of one token.
//!
//! Per case: prefill ms, best and median ms between tokens, and the mean
//! ms a token over the whole timed `generate` call (last token's time −
//! first's, / (N − 1): every wait, submit and stall counts); resident
//! memory after loading and after decoding as a ratio to the weight bytes
//! the ranks hold (the quantized blocks for a quantized case); the
//! streaming floor for the bytes a token reads in that dtype; and the
//! stream rate of the products (bytes of weights a token reads / the
//! traced time of the product kernels) beside the host's copy rate. A
//! token is also run by hand, split into the host's recording of its
//! kernels and the wait for the device (where the spread between tokens
//! comes from). For a memory figure not inflated by an earlier case, run
//! one case a process (`WGPU_TP_DECODE_RANKS=1 WGPU_TP_DECODE_WEIGHTS=` with
//! `WGPU_TP_DECODE_GGUF=<file>`).
//!
//! `cargo bench --bench decode`; `WGPU_TP_DECODE_TOKENS` sets N (default
//! 16), `WGPU_TP_DECODE_RANKS` the world sizes (default `1,2,4`),
//! `WGPU_TP_DECODE_PROMPT` the prompt's length, `WGPU_TP_DECODE_SHARED=1`
//! puts every rank on one shared device and `=0` each on its own (unset:
//! `DeviceLayout::default_for` the adapter); `WGPU_TP_LIMITS=webgpu`
//! opens the devices with WebGPU's default limits; `WGPU_TP_DECODE_BLOCK_MIB=8`
//! suballocates device memory in 8 MiB blocks (`MeshBuilder::memory_hints`).
//! A world size whose model cannot be built prints `skipped: <error>`.

mod measure;
mod shapes;

use std::time::{Duration, Instant};

use wgpu_tp::models::CausalLm;
use wgpu_tp::nn::{CausalDecoder, KvCache, Params, Sampling, generate};

use measure::{copy_bandwidth, device_mib, held_bytes, load, ms, peak_rss, rss_now};
use shapes::config;
use wgpu_tp::quant::QuantType;
use wgpu_tp::{DType, DeviceLayout, Mesh, MeshBuilder, Trace};

/// The model as `nn::generate` takes it.
fn decoder(m: &CausalLm) -> &dyn CausalDecoder {
    m
}

const TOP_KERNELS: usize = 8;

fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

struct Timing {
    prefill: Duration,
    best: Duration,
    median: Duration,
    /// The mean gap between tokens over the whole call.
    mean: Duration,
    trace: Trace,
}

/// What a case's weights are: a dtype the built f32 model is kept in, or
/// a GGUF file.
#[derive(Clone)]
enum Weights {
    Dtype(DType),
    Gguf(String),
}

impl Weights {
    fn label(&self) -> String {
        match self {
            Weights::Dtype(d) => d.to_string(),
            Weights::Gguf(p) => std::path::Path::new(p)
                .file_stem()
                .map_or(p.clone(), |s| s.to_string_lossy().into_owned()),
        }
    }
}

/// Where a token's time goes: `n` tokens after the prompt run by hand as
/// `nn::generate` runs them, each split into the host's recording of its
/// kernels (`decode_logits` returns once they are recorded, nothing
/// waited for) and the wait for the device (`Mesh::synchronize`, which
/// submits what is pending), then the read of the argmax. Medians, ms:
/// (record, device wait, read back).
fn split(
    mesh: &Mesh,
    model: &dyn CausalDecoder,
    prompt_len: usize,
    n: usize,
) -> wgpu_tp::Result<(f64, f64, f64)> {
    let vocab = model.vocab_size() as i64;
    let prompt: Vec<i32> = (0..prompt_len as i64)
        .map(|i| ((i * 7919 + 13) % vocab) as i32)
        .collect();
    let mut caches = vec![KvCache::default(); model.num_caches()];
    model.decode_logits(&prompt, &mut caches)?;
    mesh.synchronize()?;
    let (mut rec, mut wait, mut read) = (vec![], vec![], vec![]);
    let mut next = prompt[prompt_len - 1];
    for _ in 0..n {
        let t0 = Instant::now();
        let logits = model.decode_logits(&[next], &mut caches)?;
        let t1 = Instant::now();
        mesh.synchronize()?;
        let t2 = Instant::now();
        let row = logits.to_host()?;
        next = row
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map_or(0, |(i, _)| i as i32);
        rec.push(ms(t1 - t0));
        wait.push(ms(t2 - t1));
        read.push(ms(t2.elapsed()));
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Ok((median(&mut rec), median(&mut wait), median(&mut read)))
}

/// Whether a kernel multiplies by a weight matrix (the products whose
/// time streams the weights): GEMVs, their pairs, grouped and quantized
/// products, and the small-M GEMMs.
fn is_product(name: &str) -> bool {
    ["gemv", "quant", "gemm", "matmul", "linear"]
        .iter()
        .any(|k| name.contains(k))
}

/// Greedy decoding of `max_new` tokens after `prompt`, `on_token` called with each.
fn run(
    model: &dyn CausalDecoder,
    prompt: &[i32],
    max_new: usize,
    on_token: impl FnMut(i32) -> wgpu_tp::Result<()>,
) -> wgpu_tp::Result<Vec<i32>> {
    pollster::block_on(generate(
        model,
        prompt,
        max_new,
        Sampling::Greedy,
        &[],
        on_token,
    ))
}

/// Decode `tokens` tokens after the prompt; the intervals between tokens.
fn time_case(
    mesh: &Mesh,
    model: &dyn CausalDecoder,
    prompt_len: usize,
    tokens: usize,
) -> wgpu_tp::Result<Timing> {
    let vocab = model.vocab_size() as i64;
    let prompt: Vec<i32> = (0..prompt_len as i64)
        .map(|i| ((i * 7919 + 13) % vocab) as i32)
        .collect();
    run(model, &prompt, 3, |_| Ok(()))?; // compiles the pipelines
    let start = Instant::now();
    let mut stamps = Vec::with_capacity(tokens);
    run(model, &prompt, tokens, |_| {
        stamps.push(Instant::now());
        Ok(())
    })?;
    let mut gaps: Vec<Duration> = stamps.windows(2).map(|w| w[1] - w[0]).collect();
    gaps.sort();
    let mean = (stamps[stamps.len() - 1] - stamps[0]) / (stamps.len() as u32 - 1);
    // One more short generation, traced: the last token's kernels.
    let mut trace = None;
    let mut n = 0;
    run(model, &prompt, 2, |_| {
        n += 1;
        if n == 1 {
            mesh.start_trace()?;
        } else {
            trace = Some(mesh.stop_trace()?);
        }
        Ok(())
    })?;
    Ok(Timing {
        prefill: stamps[0] - start,
        best: gaps[0],
        median: gaps[gaps.len() / 2],
        mean,
        trace: trace.expect("traced"),
    })
}

fn main() {
    let tokens = env::<usize>("WGPU_TP_DECODE_TOKENS").unwrap_or(16).max(3);
    let ranks: Vec<usize> = std::env::var("WGPU_TP_DECODE_RANKS")
        .unwrap_or_else(|_| "1,2,4".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let (name, shape, prompt) = config();
    let prompt = env::<usize>("WGPU_TP_DECODE_PROMPT")
        .unwrap_or(prompt)
        .max(1);
    let shared = std::env::var("WGPU_TP_DECODE_SHARED").ok();
    let mut cases: Vec<Weights> = std::env::var("WGPU_TP_DECODE_WEIGHTS")
        .unwrap_or_else(|_| "f32,bf16".into())
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .filter_map(|s| match s.trim() {
            "f32" => Some(DType::F32),
            "bf16" => Some(DType::BF16),
            "f16" => Some(DType::F16),
            q => match q.parse::<QuantType>() {
                Ok(q) => Some(DType::Quant(q)),
                Err(e) => {
                    println!("WGPU_TP_DECODE_WEIGHTS: {e}");
                    None
                }
            },
        })
        .map(Weights::Dtype)
        .collect();
    if let Ok(files) = std::env::var("WGPU_TP_DECODE_GGUF") {
        cases.extend(
            files
                .split(',')
                .filter(|s| !s.trim().is_empty())
                .map(|s| Weights::Gguf(s.trim().to_string())),
        );
    }
    let labels: Vec<String> = cases.iter().map(Weights::label).collect();
    println!(
        "decode: {name} ({}, random weights: {labels:?}), greedy with the KV cache, \
         prompt {prompt}, {tokens} tokens, {}",
        shape.describe(),
        match shared.as_deref() {
            Some("1") => "every rank on one shared device",
            Some("0") => "a device per rank",
            _ => "ranks laid out as the adapter's default",
        }
    );
    println!("load at start: {}", load());
    // Bytes a token reads per byte the parameters hold (GPT-2's `wpe`:
    // one row of it).
    let read_share = shape.weight_bytes() as f64 / shape.param_bytes() as f64;
    let mut copy_rate: Option<f64> = None;
    let mut traces = Vec::new();
    let mut rows = Vec::new();
    let header = format!(
        "{:<26} {:>11} {:>12} {:>14} {:>12} {:>8}",
        "case", "prefill_ms", "best_ms/tok", "median_ms/tok", "mean_ms/tok", "vs_P=1"
    );
    println!("\n{header}");
    let mut base = None;
    let mut guessed: Option<Duration> = None;
    for &p in &ranks {
        let label = format!("P={p}");
        // The high-water mark from here (the last P's model is dropped).
        let _ = std::fs::write("/proc/self/clear_refs", "5");
        let mut builder = MeshBuilder::new().ranks(p);
        if let Some(mib) = env::<u64>("WGPU_TP_DECODE_BLOCK_MIB") {
            let size = mib << 20;
            builder = builder.memory_hints(wgpu::MemoryHints::Manual {
                suballocated_device_memory_block_size: size..size,
            });
        }
        let builder = match shared.as_deref() {
            Some("1") => builder.shared_device(),
            Some("0") => builder.layout(DeviceLayout::Simulated),
            _ => builder,
        };
        let mesh = match builder.build() {
            Ok(m) => m,
            Err(e) => {
                println!("{label:<6} skipped: {e}");
                continue;
            }
        };
        // What the process holds before any weight: the runtime, the
        // driver, the mesh.
        let rss_base = rss_now().unwrap_or(0) as f64;
        println!(
            "{label:<6} RSS with the mesh alone {:.0} MiB",
            rss_base / 1048576.0
        );
        if copy_rate.is_none() {
            println!("adapter: {}", mesh.adapter_summary());
            let bytes = shape.weight_bytes();
            let bw = copy_bandwidth(bytes);
            println!(
                "floor: {:.1} MB of f32 weights per token / host copy {:.2} GB/s = {:.2} ms/token",
                bytes as f64 / 1e6,
                bw / 1e9,
                bytes as f64 / bw * 1e3
            );
            copy_rate = Some(bw);
        }
        let bw = copy_rate.unwrap_or(1.0);
        // The model of the case before, reused where its weights can be
        // cast (f32 to bf16); built afresh for quantized cases and files.
        let mut model: Option<CausalLm> = None;
        for (i, case) in cases.iter().enumerate() {
            let label = format!("{label} {}", case.label());
            let fresh = match case {
                Weights::Gguf(_) => true,
                Weights::Dtype(d) => {
                    d.quant().is_some()
                        || model.as_ref().is_none_or(|m| {
                            m.named_parameters()
                                .iter()
                                .any(|(_, p)| p.value.dtype().quant().is_some())
                        })
                }
            };
            if fresh {
                // Give the last case's memory back before the next loads.
                drop(model.take());
                device_mib(&mesh);
                let t = Instant::now();
                let built = match case {
                    Weights::Gguf(path) => CausalLm::from_gguf(&mesh, path),
                    Weights::Dtype(_) => shape.build(&mesh),
                }
                .and_then(|m| {
                    mesh.synchronize()?; // the draws run
                    Ok(m)
                });
                match built {
                    Ok(m) => model = Some(m),
                    Err(e) => {
                        println!("{label:<26} skipped: {e}");
                        continue;
                    }
                }
                if i == 0
                    && let Some(rss) = peak_rss()
                {
                    println!(
                        "{label:<26} {:?} built in {:.1} s; peak RSS {:.0} MiB",
                        mesh.layout(),
                        t.elapsed().as_secs_f64(),
                        rss as f64 / (1 << 20) as f64,
                    );
                }
            }
            let Some(m) = model.as_mut() else { continue };
            if let Weights::Dtype(dtype) = case {
                let t = Instant::now();
                if let Err(e) = m.store_weights_as(*dtype) {
                    println!("{label:<26} skipped: {e}");
                    continue;
                }
                if *dtype != DType::F32 {
                    println!(
                        "{label:<26} weights kept in {dtype} in {:.1} s",
                        t.elapsed().as_secs_f64()
                    );
                }
            }
            let m = &*m;
            // Pools trimmed: what the weights (and nothing of a past
            // generation) hold.
            let dev_mib = device_mib(&mesh);
            let held = held_bytes(m) as f64;
            let read = held * read_share;
            let rss_load = rss_now().unwrap_or(0) as f64;
            // The first P also runs with every kernel on its guess (tuning
            // off), then measured: the ratio says what measuring bought.
            let tune = wgpu_tp::tuning();
            let guesses = std::env::var("WGPU_TP_DECODE_GUESSES").as_deref() != Ok("0");
            if tune.enabled && guesses && p == ranks[0] && i == 0 {
                wgpu_tp::set_tuning(wgpu_tp::Tuning {
                    enabled: false,
                    ..tune.clone()
                });
                let guess = time_case(&mesh, decoder(m), prompt, tokens);
                wgpu_tp::set_tuning(tune);
                if let Ok(t) = guess {
                    guessed = Some(t.median);
                    println!(
                        "{:<26} {:>11.1} {:>12.2} {:>14.2} {:>12.2} {:>8}",
                        format!("{label} g"),
                        ms(t.prefill),
                        ms(t.best),
                        ms(t.median),
                        ms(t.mean),
                        "-"
                    );
                }
            }
            match time_case(&mesh, decoder(m), prompt, tokens) {
                Ok(t) => {
                    let vs = base.map_or("-".to_string(), |b: Duration| {
                        format!("{:.2}", t.median.as_secs_f64() / b.as_secs_f64())
                    });
                    if base.is_none() {
                        base = Some(t.median);
                    }
                    if let Some(g) = guessed.take() {
                        println!(
                            "{label}: measured kernels {:.2}× the guesses' median ms/token",
                            t.median.as_secs_f64() / g.as_secs_f64()
                        );
                    }
                    let row = format!(
                        "{label:<26} {:>11.1} {:>12.2} {:>14.2} {:>12.2} {:>8}",
                        ms(t.prefill),
                        ms(t.best),
                        ms(t.median),
                        ms(t.mean),
                        vs
                    );
                    println!("{row}");
                    let rss_after = rss_now().unwrap_or(0) as f64;
                    let products: f64 = t
                        .trace
                        .kernels()
                        .filter(|k| is_product(&k.name))
                        .map(|k| k.duration_us)
                        .sum::<f64>()
                        / 1e6;
                    let detail = format!(
                        "{:<26} weights held {:.1} MB (device in use {dev_mib:.0} MiB); RSS after \
                         loading {:.0} MiB = {:.2}×, after decoding {:.0} MiB = {:.2}× the weights \
                         ({:.2}× above the mesh alone); \
                         floor {:.2} ms ({:.1} MB a token / copy {:.2} GB/s); products stream \
                         {:.2} GB/s ({:.1} ms a token)",
                        "",
                        held / 1e6,
                        rss_load / 1048576.0,
                        rss_load / held,
                        rss_after / 1048576.0,
                        rss_after / held,
                        (rss_after - rss_base) / held,
                        read / bw * 1e3,
                        read / 1e6,
                        bw / 1e9,
                        read / products.max(1e-9) / 1e9,
                        products * 1e3,
                    );
                    println!("{detail}");
                    rows.push(format!("{row}\n{detail}"));
                    if let Ok((rec, wait, read)) = split(&mesh, decoder(m), prompt, 5) {
                        println!(
                            "{:<26} a token by hand (medians of 5): host records its kernels \
                             {rec:.2} ms, then waits for the device {wait:.2} ms, reads the logits \
                             back {read:.2} ms",
                            ""
                        );
                    }
                    traces.push((label, t.trace));
                }
                Err(e) => println!("{label:<26} skipped: {e}"),
            }
        }
    }
    println!("\nsummary (load now {}):\n{header}", load());
    for r in &rows {
        println!("{r}");
    }
    for (label, trace) in &traces {
        let dispatches: u64 = trace.top_kernels(usize::MAX).iter().map(|k| k.calls).sum();
        println!(
            "\n{label}: top kernels of one traced token ({:.1} ms; kernels {:.1} ms summed over {} ranks; \
             {dispatches} dispatches)",
            ms(trace.span()),
            ms(trace.kernel_time()),
            trace.tracks().len()
        );
        // Host spans of the collectives on rank 0's track: at P > 1 a
        // token waits in them for every rank's kernels and the copies.
        let comm: Vec<_> = trace
            .host_spans()
            .filter(|e| e.category == "comm" && e.rank == 0)
            .collect();
        if !comm.is_empty() {
            println!(
                "  collectives: {} on rank 0, {:.2} ms of host time",
                comm.len(),
                comm.iter().map(|e| e.duration_us).sum::<f64>() / 1e3
            );
        }
        for k in trace.top_kernels(env::<usize>("WGPU_TP_DECODE_TOP").unwrap_or(TOP_KERNELS)) {
            println!(
                "  {:<32} {:>5} calls {:>9.2} ms {:>6.1} %",
                k.name,
                k.calls,
                ms(k.total),
                k.share * 100.0
            );
        }
    }
    let t = wgpu_tp::tuning();
    println!(
        "\nkernel tuning: {} (budget {} ms, cache {})",
        if t.enabled {
            "on"
        } else {
            "off (WGPU_TP_TUNE=off)"
        },
        t.budget.as_millis(),
        t.dir.map_or("none".into(), |d| d.display().to_string())
    );
    for (_, class, choice) in wgpu_tp::tuned_choices() {
        println!("  {class:<56} {choice}");
    }
    println!("load at end: {}", load());
}
