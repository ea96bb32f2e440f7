//! Greedy decoding with the key/value cache, ms per generated token, on
//! P = 1, 2 and 4 simulated ranks (host-staged: each rank its own wgpu
//! device), beside the weight-streaming floor measured in the same run.
//!
//! Model: GPT-2 124M's shape (vocab 50257, context 1024, width 768, 12
//! heads, 12 layers, f32) with random weights (`Gpt::new`). A prompt of 8
//! tokens is decoded in one step (the prefill, timed apart), then N tokens
//! one at a time through `Gpt::generate_with`; the figure is the best and
//! the median time between consecutive tokens. Pipelines compile in a
//! warm-up generation first.
//!
//! Floor: one token reads every weight once (the tied head all of `wte`;
//! `wpe` one row), so bytes of weights per token / the host's copy
//! bandwidth (a `copy_from_slice` of that many bytes, best of 5, measured
//! here) is the time no implementation reading f32 weights from memory can
//! beat (a copy also writes, so read-only streaming may run up to 2× that).
//!
//! Then, per P, the top kernels of one traced token.
//!
//! `cargo bench --bench decode`; `WGPU_TP_DECODE_TOKENS` sets N (default
//! 16), `WGPU_TP_DECODE_RANKS` the world sizes (default `1,2,4`),
//! `WGPU_TP_DECODE_MODEL=small` a quick model (vocab 4096, context 256,
//! width 256, 4 heads, 2 layers).
//! A world size whose model cannot be built prints `skipped: <error>`.

use std::time::{Duration, Instant};

use wgpu_tp::nn::{Gpt, GptConfig, Params, Sampling};
use wgpu_tp::{Mesh, MeshBuilder, Trace};

const PROMPT: usize = 8;
const TOP_KERNELS: usize = 8;

fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn config() -> (&'static str, GptConfig) {
    match std::env::var("WGPU_TP_DECODE_MODEL").as_deref() {
        Ok("small") => ("small", GptConfig::new(4096, 256, 256, 4, 2)),
        _ => ("GPT-2 124M", GptConfig::new(50257, 1024, 768, 12, 12)),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// Bytes one token reads from the weights: all of them but `wpe` (one row).
fn weight_bytes(gpt: &Gpt) -> u64 {
    let c = gpt.config();
    let all: usize = gpt
        .named_parameters()
        .iter()
        .map(|(_, p)| p.shape().iter().product::<usize>())
        .sum();
    4 * (all - (c.n_ctx - 1) * c.hidden) as u64
}

/// Host copy bandwidth in bytes/s over a buffer of `bytes` (best of 5).
fn copy_bandwidth(bytes: u64) -> f64 {
    let src = vec![1u8; bytes as usize];
    let mut dst = vec![0u8; bytes as usize];
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        dst.copy_from_slice(&src);
        best = best.min(t.elapsed());
        std::hint::black_box(&mut dst);
    }
    bytes as f64 / best.as_secs_f64()
}

struct Timing {
    prefill: Duration,
    best: Duration,
    median: Duration,
    trace: Trace,
}

/// Decode `tokens` tokens after the prompt; the intervals between tokens.
fn time_case(mesh: &Mesh, gpt: &mut Gpt, tokens: usize) -> wgpu_tp::Result<Timing> {
    let vocab = gpt.config().vocab as i32;
    let prompt: Vec<i32> = (0..PROMPT as i32)
        .map(|i| (i * 7919 + 13) % vocab)
        .collect();
    gpt.generate(&prompt, 3, Sampling::Greedy)?; // compiles the pipelines
    let start = Instant::now();
    let mut stamps = Vec::with_capacity(tokens);
    gpt.generate_with(&prompt, tokens, Sampling::Greedy, |_| {
        stamps.push(Instant::now());
        Ok(())
    })?;
    let mut gaps: Vec<Duration> = stamps.windows(2).map(|w| w[1] - w[0]).collect();
    gaps.sort();
    // One more short generation, traced: the last token's kernels.
    let mut trace = None;
    let mut n = 0;
    gpt.generate_with(&prompt, 2, Sampling::Greedy, |_| {
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
    let (name, cfg) = config();
    println!(
        "decode: {name} (vocab {}, context {}, width {}, {} heads, {} layers, f32), greedy with the \
         KV cache, prompt {PROMPT}, {tokens} tokens",
        cfg.vocab, cfg.n_ctx, cfg.hidden, cfg.heads, cfg.layers
    );
    println!("load at start: {}", load());
    let mut floor_printed = false;
    let mut traces = Vec::new();
    println!(
        "\n{:<6} {:>11} {:>13} {:>15} {:>8}",
        "case", "prefill_ms", "best_ms/tok", "median_ms/tok", "vs_P=1"
    );
    let mut base = None;
    for &p in &ranks {
        let label = format!("P={p}");
        let built = MeshBuilder::new()
            .ranks(p)
            .build()
            .and_then(|mesh| Gpt::new(&mesh, cfg, 0).map(|gpt| (mesh, gpt)));
        let (mesh, mut gpt) = match built {
            Ok(b) => b,
            Err(e) => {
                println!("{label:<6} skipped: {e}");
                continue;
            }
        };
        if !floor_printed {
            println!("adapter: {}", mesh.adapter_summary());
            let bytes = weight_bytes(&gpt);
            let bw = copy_bandwidth(bytes);
            println!(
                "floor: {:.1} MB of weights per token / host copy {:.2} GB/s = {:.2} ms/token",
                bytes as f64 / 1e6,
                bw / 1e9,
                bytes as f64 / bw * 1e3
            );
            floor_printed = true;
        }
        match time_case(&mesh, &mut gpt, tokens) {
            Ok(t) => {
                let vs = base.map_or("-".to_string(), |b: Duration| {
                    format!("{:.2}", t.median.as_secs_f64() / b.as_secs_f64())
                });
                if p == 1 {
                    base = Some(t.median);
                }
                println!(
                    "{label:<6} {:>11.1} {:>13.2} {:>15.2} {:>8}",
                    ms(t.prefill),
                    ms(t.best),
                    ms(t.median),
                    vs
                );
                traces.push((label, t.trace));
            }
            Err(e) => println!("{label:<6} skipped: {e}"),
        }
    }
    for (label, trace) in &traces {
        println!(
            "\n{label}: top kernels of one traced token ({:.1} ms; kernels {:.1} ms summed over {} ranks)",
            ms(trace.span()),
            ms(trace.kernel_time()),
            trace.tracks().len()
        );
        for k in trace.top_kernels(TOP_KERNELS) {
            println!(
                "  {:<32} {:>5} calls {:>9.2} ms {:>6.1} %",
                k.name,
                k.calls,
                ms(k.total),
                k.share * 100.0
            );
        }
    }
    println!("load at end: {}", load());
}
