//! GPT-2 124M training at real size: the step time at P = 1, 2 and 4
//! simulated ranks, the device memory per rank, and the process's peak RSS
//! against the state a step must hold.
//!
//! Model: vocab 50257, context 1024, width 768, 12 heads, 12 layers (random
//! weights, seed 0); or with `WGPU_TP_TRAIN_MODEL=smollm2` SmolLM2-135M's
//! shape (vocab 49152, width 576, 30 layers, 9 / 3 heads, ffn 1536, tied; a
//! `CausalLm` of a `LlamaConfig`). Batch 2 × 256 tokens; `loss` +
//! `loss.backward()` + AdamW step + zero-grad, then `Mesh::synchronize`. One
//! untimed step compiles the pipelines and creates the AdamW moments; the
//! figure is the best and the median of N steps.
//!
//! Memory, per configuration:
//! - `state`: what must exist, summed over ranks: parameters, gradients and
//!   the two AdamW moments (4 × the bytes of every parameter shard) plus the
//!   activations forward leaves for backward (device bytes in use after
//!   forward minus before it);
//! - `dev/rank`: the largest device's pools after the steps (in use +
//!   pooled + staging); `dev peak`: the most bytes the pools held at once
//!   during the timed steps, summed over devices, and its ratio to `state`;
//! - `RSS step`: the process's high-water mark over the timed steps (reset
//!   through `/proc/self/clear_refs` after the untimed one), and `RSS all`
//!   over the whole configuration (the build and the first step's pipeline
//!   compilation included), each with its ratio to `state` (on a CPU
//!   adapter device memory is the process's memory).
//!
//! `cargo bench --bench gpt2`; `WGPU_TP_GPT2_RANKS=2,4` picks the
//! configurations, `WGPU_TP_GPT2_LAYERS` the depth (quick runs),
//! `WGPU_TP_BENCH_STEPS` N (default 3), `WGPU_TP_GPT2_DTYPE=f16` trains in
//! mixed precision (GPT-2 only), `WGPU_TP_GPT2_TOP=N` traces one more step
//! and lists its top N kernels, `WGPU_TP_GPT2_LOAD=1` adds a
//! checkpoint load per configuration (GPT-2 only), `WGPU_TP_GPT2_SHARED=1`
//! puts every rank on one shared device and `=0` each on its own (unset:
//! `DeviceLayout::default_for` the adapter), `WGPU_TP_GPT2_BLOCK_MIB=8`
//! suballocates device memory in 8 MiB blocks (`MeshBuilder::memory_hints`).
//! `WGPU_TP_LIMITS=webgpu` opens the
//! devices with WebGPU's default limits. The JAX peer of the same step is
//! `benches/peers/jax_gpt2_step.py`, the PyTorch one
//! `benches/peers/torch_lm.py step --model gpt2|smollm2`.

use std::time::{Duration, Instant};

use wgpu_tp::models::{CausalLm, Gpt2Config, LlamaConfig, LoadOptions};
use wgpu_tp::nn::{AdamW, Params};
use wgpu_tp::{DeviceLayout, Mesh, MeshBuilder};

const BATCH: usize = 2;
const SEQ: usize = 256;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn config() -> Gpt2Config {
    Gpt2Config::new(50257, 1024, 768, 12, env_usize("WGPU_TP_GPT2_LAYERS", 12))
}

/// How GPT-2 is built: f32, or with `WGPU_TP_GPT2_DTYPE=f16` mixed
/// precision (f16 activations, f32 masters): on GPUs with cooperative
/// matrices its products run on the tensor cores.
fn options() -> LoadOptions {
    let opts = LoadOptions::default();
    match std::env::var("WGPU_TP_GPT2_DTYPE").is_ok_and(|d| d == "f16") {
        true => opts.activations(wgpu_tp::DType::F16),
        false => opts,
    }
}

/// SmolLM2-135M's shape (`WGPU_TP_TRAIN_MODEL=smollm2`), else `None`.
fn smollm2() -> Option<LlamaConfig> {
    let wanted = std::env::var("WGPU_TP_TRAIN_MODEL").is_ok_and(|m| m == "smollm2");
    wanted.then(|| {
        let mut c = LlamaConfig::new(49152, 576, 1536, 30, 9, 3);
        c.rope.theta = 100000.0;
        c
    })
}

/// The model of this run on `mesh` (GPT-2's or the Llama family's), and
/// its vocabulary.
fn build(mesh: &Mesh) -> wgpu_tp::Result<(CausalLm, usize)> {
    let model = match smollm2() {
        Some(c) => CausalLm::new(mesh, c, 0)?,
        None => CausalLm::new_with(mesh, config(), 0, options())?,
    };
    let vocab = model.vocab_size();
    Ok((model, vocab))
}

/// The same LCG batch for every configuration (and the JAX peer).
fn batch(vocab: usize) -> (Vec<i32>, Vec<i32>) {
    let mut s: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 33) % vocab as u64) as i32
    };
    let ids: Vec<i32> = (0..BATCH * SEQ).map(|_| next()).collect();
    // Next-token targets within each sequence; the last one wraps.
    let targets = (0..BATCH * SEQ)
        .map(|i| ids[(i / SEQ) * SEQ + (i % SEQ + 1) % SEQ])
        .collect();
    (ids, targets)
}

/// Bytes in use over every distinct device of the mesh.
fn in_use(mesh: &Mesh) -> u64 {
    mesh.devices().iter().map(|d| d.memory().in_use).sum()
}

/// The process's peak resident set (VmHWM), in bytes; Linux only.
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Start a new high-water mark at the current RSS (Linux ≥ 4.0).
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

struct Figures {
    build: Duration,
    first: Duration,
    best: Duration,
    median: Duration,
    loss: f32,
    params: u64,
    activations: u64,
    device_max: u64,
    /// Device bytes held at once during the timed steps, summed over devices.
    device_peak: u64,
    /// Peak RSS over the build and every step.
    peak_all: Option<u64>,
    /// Peak RSS over the timed steps.
    peak: Option<u64>,
}

/// `p` ranks laid out as `WGPU_TP_GPT2_SHARED` says (1: one shared device,
/// 0: a device each, unset: the builder's default), with memory blocks of
/// `WGPU_TP_GPT2_BLOCK_MIB` if set.
fn builder(p: usize) -> MeshBuilder {
    let mut b = MeshBuilder::new().ranks(p);
    if let Some(mib) = std::env::var("WGPU_TP_GPT2_BLOCK_MIB")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        let size = mib << 20;
        b = b.memory_hints(wgpu::MemoryHints::Manual {
            suballocated_device_memory_block_size: size..size,
        });
    }
    match std::env::var("WGPU_TP_GPT2_SHARED").as_deref() {
        Ok("1") => b.shared_device(),
        Ok("0") => b.layout(DeviceLayout::Simulated),
        _ => b,
    }
}

fn run(p: usize, steps: usize) -> wgpu_tp::Result<Figures> {
    reset_peak_rss();
    let t0 = Instant::now();
    let mesh = builder(p).build()?;
    eprintln!(
        "  P = {p}: {:?}, {} device(s)",
        mesh.layout(),
        mesh.devices().len()
    );
    let (mut gpt, vocab) = build(&mesh)?;
    mesh.synchronize()?;
    let build = t0.elapsed();
    let (ids, targets) = batch(vocab);
    let mut opt = AdamW::new(3e-4);
    let params: u64 = gpt
        .named_parameters()
        .iter()
        .flat_map(|(_, p)| p.value.shards().iter().map(|s| s.byte_len()))
        .sum();
    let mut activations = 0;
    let mut times = Vec::new();
    let mut loss = f32::NAN;
    let mut peak_all = None;
    for i in 0..=steps {
        let t = Instant::now();
        let before = in_use(&mesh);
        let l = gpt.loss(&ids, &targets, SEQ)?;
        if i == 0 {
            // Only the untimed step waits here to read what forward holds.
            mesh.synchronize()?;
            activations = in_use(&mesh).saturating_sub(before);
        }
        l.backward()?;
        opt.step(&mut gpt)?;
        gpt.zero_grad();
        loss = l.to_host()?[0];
        mesh.synchronize()?;
        times.push(t.elapsed());
        if i == 0 {
            // The timed steps' own high-water marks, without the build and
            // the first step's pipeline compilation.
            peak_all = peak_rss();
            reset_peak_rss();
            mesh.devices().iter().for_each(|d| d.reset_peak_memory());
            eprintln!("  P = {p}: first step {:.2?}, loss {loss:.4}", times[0]);
        }
    }
    let first = times.remove(0);
    times.sort();
    if let Some(top) = std::env::var("WGPU_TP_GPT2_TOP")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        traced_step(&mesh, &mut gpt, &mut opt, (&ids, &targets), top)?;
    }
    let device_max = mesh
        .devices()
        .iter()
        .map(|d| d.memory().total())
        .max()
        .unwrap_or(0);
    Ok(Figures {
        build,
        first,
        best: times[0],
        median: times[times.len() / 2],
        loss,
        params,
        activations,
        device_max,
        device_peak: mesh.devices().iter().map(|d| d.memory().peak).sum(),
        peak_all,
        peak: peak_rss(),
    })
}

/// With `WGPU_TP_GPT2_TOP=N`: one more step, traced (after the timed ones):
/// its span, the kernels' summed time and dispatches, and the top N kernels.
fn traced_step(
    mesh: &Mesh,
    model: &mut CausalLm,
    opt: &mut AdamW,
    (ids, targets): (&[i32], &[i32]),
    top: usize,
) -> wgpu_tp::Result<()> {
    mesh.start_trace()?;
    let l = model.loss(ids, targets, SEQ)?;
    l.backward()?;
    opt.step(model)?;
    model.zero_grad();
    mesh.synchronize()?;
    let trace = mesh.stop_trace()?;
    let kernels = trace.top_kernels(usize::MAX);
    let dispatches: u64 = kernels.iter().map(|k| k.calls).sum();
    eprintln!(
        "  traced step: {:.1?}, kernels {:.1?} summed over ranks, {dispatches} dispatches",
        trace.span(),
        trace.kernel_time()
    );
    for k in kernels.iter().take(top) {
        eprintln!("    {:<28} {:>5} calls {:>10.2?}", k.name, k.calls, k.total);
    }
    Ok(())
}

/// With `WGPU_TP_GPT2_LOAD=1`: `CausalLm::from_pretrained` of this model
/// saved in Hugging Face layout (to a temporary directory): its time, the
/// device bytes held after it (pools included) against the parameters, and
/// the peak RSS while loading (which counts the memory-mapped file's pages
/// read).
fn load(p: usize) -> wgpu_tp::Result<String> {
    let dir = std::env::temp_dir().join(format!("wgpu-tp-gpt2-load-{}", std::process::id()));
    {
        let mesh = MeshBuilder::new().ranks(p).build()?;
        CausalLm::new_with(&mesh, config(), 0, options())?.save_pretrained(&dir)?;
    }
    reset_peak_rss();
    let t = Instant::now();
    let mesh = MeshBuilder::new().ranks(p).build()?;
    let gpt = CausalLm::from_pretrained(&mesh, &dir)?;
    mesh.synchronize()?;
    let took = t.elapsed();
    let _ = std::fs::remove_dir_all(&dir);
    let params: u64 = gpt
        .named_parameters()
        .iter()
        .flat_map(|(_, p)| p.value.shards().iter().map(|s| s.byte_len()))
        .sum();
    let peak = peak_rss().map_or("n/a".into(), |b| format!("{:.0} MiB", mib(b)));
    Ok(format!(
        "load P = {p}: {took:.2?}; params {:.0} MiB, devices hold {:.0} MiB, peak RSS {peak}",
        mib(params),
        mib(mesh.devices().iter().map(|d| d.memory().total()).sum())
    ))
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not supported.
    let ranks: Vec<usize> = std::env::var("WGPU_TP_GPT2_RANKS")
        .unwrap_or_else(|_| "1,2,4".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let steps = env_usize("WGPU_TP_BENCH_STEPS", 3).max(1);
    if let Ok(v) = std::env::var("WGPU_TP_GPT2_SHARED") {
        println!("WGPU_TP_GPT2_SHARED={v}: 1 puts every rank on one device, 0 each on its own");
    }
    if let Ok(mib) = std::env::var("WGPU_TP_GPT2_BLOCK_MIB") {
        println!("device memory in blocks of {mib} MiB (WGPU_TP_GPT2_BLOCK_MIB)");
    }
    match smollm2() {
        Some(c) => println!(
            "SmolLM2-135M's shape: vocab {}, width {}, {} layers, {} / {} heads, ffn {}, tied; batch {BATCH} x {SEQ}; AdamW; {steps} timed steps",
            c.vocab_size,
            c.hidden_size,
            c.num_hidden_layers,
            c.num_attention_heads,
            c.num_key_value_heads,
            c.intermediate_size
        ),
        None => {
            let c = config();
            println!(
                "GPT-2: vocab {}, ctx {}, width {}, {} heads, {} layers; batch {BATCH} x {SEQ}; AdamW; {steps} timed steps",
                c.vocab_size, c.n_positions, c.n_embd, c.n_head, c.n_layer
            );
        }
    }
    println!(
        "{:>3} {:>8} {:>8} {:>8} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>9} {:>6} {:>9} {:>6}",
        "P",
        "build",
        "best",
        "median",
        "loss",
        "4x param",
        "activ.",
        "state",
        "dev/rank",
        "dev peak",
        "dev/st",
        "RSS step",
        "/st",
        "RSS all",
        "/st"
    );
    for p in ranks {
        match run(p, steps) {
            Ok(f) => {
                let state = 4 * f.params + f.activations;
                let ratio = |b: u64| format!("{:.2}", b as f64 / state as f64);
                let rss = |b: Option<u64>| match b {
                    Some(b) => (format!("{:.0}M", mib(b)), ratio(b)),
                    None => ("n/a".into(), "n/a".into()),
                };
                let ((step, step_ratio), (all, all_ratio)) = (rss(f.peak), rss(f.peak_all));
                let m = |b: u64| format!("{:.0}M", mib(b));
                println!(
                    "{p:>3} {:>8.2?} {:>8.2?} {:>8.2?} {:>7.4} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>9} {:>6} {:>9} {:>6}",
                    f.build,
                    f.best,
                    f.median,
                    f.loss,
                    m(4 * f.params),
                    m(f.activations),
                    m(state),
                    m(f.device_max),
                    m(f.device_peak),
                    ratio(f.device_peak),
                    step,
                    step_ratio,
                    all,
                    all_ratio
                );
                eprintln!("  P = {p}: first step {:.2?}", f.first);
            }
            Err(e) => println!("{p:>3} skipped: {e}"),
        }
        if std::env::var("WGPU_TP_GPT2_LOAD").is_ok_and(|v| v == "1") && smollm2().is_none() {
            match load(p) {
                Ok(line) => println!("{line}"),
                Err(e) => println!("load P = {p} failed: {e}"),
            }
        }
    }
}
