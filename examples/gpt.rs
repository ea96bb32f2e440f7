//! A character-level GPT trained on P simulated ranks.
//!
//! Trains [`Gpt`] (GPT-2's structure: vocab-parallel `wte` tied to the
//! output head, replicated `wpe`, pre-LN blocks with attention heads split
//! over ranks, vocab-parallel cross-entropy) on Genesis 1–11 of the King
//! James Version (`examples/data/genesis_kjv.txt`, public domain). At step 0
//! it checks the loss and every gradient against the same model on one rank,
//! then trains with AdamW, shows a progress bar and the loss curve, prints
//! what one step communicates, and ends with a sample decoded with the
//! key/value cache.
//!
//! Run: `cargo run --release --example gpt` (`-- --help` lists the flags;
//! `WGPU_BACKEND=gl` picks GL llvmpipe on a machine without a GPU). Exits
//! non-zero if parity fails or the loss does not fall.

mod common;

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use wgpu_tp::nn::{AdamW, Gpt, GptConfig, Params, Sampling};
use wgpu_tp::{DType, Mesh, MeshBuilder};

const TEXT: &str = include_str!("data/genesis_kjv.txt");

/// Relative error (norm-wise) above which the parity check fails.
const PARITY_TOL: f64 = 1e-4;
/// With f16 activations a sum taken in another order can round to the
/// neighbouring f16 (2^-11 relative): allow a few such steps.
const PARITY_TOL_F16: f64 = 4.0 / 2048.0;

/// Train a character-level GPT on simulated ranks and sample from it.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Simulated ranks (the tensor-parallel world size P).
    #[arg(long, default_value_t = 4)]
    ranks: usize,
    /// Transformer blocks.
    #[arg(long, default_value_t = 2)]
    layers: usize,
    /// Model width.
    #[arg(long, default_value_t = 64)]
    hidden: usize,
    /// Attention heads (need not divide by --ranks).
    #[arg(long, default_value_t = 4)]
    heads: usize,
    /// Characters per training sequence.
    #[arg(long, default_value_t = 64)]
    seq: usize,
    /// Sequences per step.
    #[arg(long, default_value_t = 8)]
    batch: usize,
    /// Training steps.
    #[arg(long, default_value_t = 80)]
    steps: usize,
    /// AdamW learning rate.
    #[arg(long, default_value_t = 3e-3)]
    lr: f32,
    /// Seed for the weights, the batches and the sample.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Characters to generate at the end.
    #[arg(long, default_value_t = 200)]
    sample_len: usize,
    /// Sampling temperature (0 = greedy).
    #[arg(long, default_value_t = 0.8)]
    temperature: f32,
    /// Sample from the k most likely characters.
    #[arg(long, default_value_t = 10)]
    top_k: usize,
    /// Text the sample continues.
    #[arg(long, default_value = "And God said")]
    prompt: String,
    /// Put all ranks on one wgpu device (collectives become on-device copies).
    #[arg(long)]
    shared_device: bool,
    /// Mixed precision: f16 activations, f32 accumulation and master weights
    /// (needs SHADER_F16: Mesa >= 24 lavapipe, most GPUs; not GL).
    #[arg(long)]
    f16: bool,
}

/// Characters ↔ ids.
struct Vocab {
    chars: Vec<char>,
}

impl Vocab {
    fn new(text: &str) -> Vocab {
        let mut chars: Vec<char> = text.chars().collect();
        chars.sort_unstable();
        chars.dedup();
        Vocab { chars }
    }

    fn encode(&self, text: &str) -> Vec<i32> {
        text.chars()
            .filter_map(|c| self.chars.binary_search(&c).ok())
            .map(|i| i as i32)
            .collect()
    }

    fn decode(&self, ids: &[i32]) -> String {
        ids.iter().map(|&i| self.chars[i as usize]).collect()
    }
}

fn build_mesh(ranks: usize, shared: bool) -> wgpu_tp::Result<Mesh> {
    let b = MeshBuilder::new().ranks(ranks);
    if shared { b.shared_device() } else { b }.build()
}

/// Step 0 on P ranks and on one: the loss and every gradient must agree.
fn parity(
    model: &Gpt,
    serial: &Gpt,
    (loss_p, loss_1): (f32, f32),
    tol: f64,
) -> wgpu_tp::Result<bool> {
    let loss_err = common::rel_err(&[loss_p], &[loss_1]);
    println!("  loss                      {loss_p:.6} vs {loss_1:.6}  rel {loss_err:.2e}");
    let mut worst = loss_err;
    for ((name, p), (_, s)) in model
        .named_parameters()
        .into_iter()
        .zip(serial.named_parameters())
    {
        let e = match (p.master_grad()?, s.master_grad()?) {
            (Some(g), Some(gs)) => common::rel_err(&g, &gs),
            _ => f64::INFINITY,
        };
        worst = worst.max(e);
        if e > tol || name.starts_with("h.0.") || !name.starts_with("h.") {
            println!("  grad {name:<22} rel {e:.2e}");
        }
    }
    let ok = worst <= tol;
    let verdict = if ok { "PASS" } else { "FAIL" };
    println!("  max relative error over all parameters  {worst:.2e}  {verdict}");
    Ok(ok)
}

fn run(args: &Args) -> wgpu_tp::Result<bool> {
    let started = Instant::now();
    let vocab = Vocab::new(TEXT);
    let data = vocab.encode(TEXT);
    let mut cfg = GptConfig::new(
        vocab.chars.len(),
        args.seq.max(args.prompt.chars().count() + args.sample_len),
        args.hidden,
        args.heads,
        args.layers,
    );
    if args.f16 {
        cfg.dtype = DType::F16;
    }
    let mesh = build_mesh(args.ranks, args.shared_device)?;
    println!("wgpu-tp character-level GPT");
    println!("  adapter   {}", mesh.adapter_summary());
    println!(
        "  mesh      {} ranks, {:?} transport",
        mesh.size(),
        mesh.transport()
    );
    println!(
        "  model     {} layers · hidden {} · {} heads · vocab {} · context {}",
        cfg.layers, cfg.hidden, cfg.heads, cfg.vocab, cfg.n_ctx
    );
    if args.f16 {
        println!("  precision f16 activations, f32 accumulation and master weights");
    }
    println!(
        "  data      Genesis 1-11 (KJV), {} characters; {} steps of {} × {} characters",
        data.len(),
        args.steps,
        args.batch,
        args.seq
    );

    let mut model = Gpt::new(&mesh, cfg, args.seed)?;
    let mut windows = common::Windows(args.seed);
    let (ids, targets) = windows.batch(&data, args.batch, args.seq);

    // Step 0 on one rank first: on software adapters the driver's shader
    // cache then serves the P devices.
    let parity_tol = if args.f16 { PARITY_TOL_F16 } else { PARITY_TOL };
    println!(
        "\nstep-0 parity, P = {} vs P = 1 (tolerance {parity_tol:.0e}):",
        mesh.size()
    );
    let serial_mesh = build_mesh(1, false)?;
    let serial = Gpt::new(&serial_mesh, cfg, args.seed)?;
    let loss = serial.loss(&ids, &targets, args.seq)?;
    let loss_1 = loss.to_host()?[0];
    loss.backward()?;
    let loss = model.loss(&ids, &targets, args.seq)?;
    let loss_p = loss.to_host()?[0];
    loss.backward()?;
    let parity_ok = parity(&model, &serial, (loss_p, loss_1), parity_tol)?;
    drop((serial, serial_mesh));

    let mut opt = AdamW::new(args.lr);
    opt.step(&mut model)?;
    model.zero_grad();
    let mut losses = vec![loss_p];
    let bar = ProgressBar::new(args.steps as u64);
    bar.set_style(
        ProgressStyle::with_template("  {bar:30} {pos:>4}/{len} steps  loss {msg}  [{elapsed}]")
            .expect("a valid template"),
    );
    bar.inc(1);
    let mut comm = None;
    let train_started = Instant::now();
    for step in 1..args.steps {
        let (ids, targets) = windows.batch(&data, args.batch, args.seq);
        mesh.reset_comm_stats();
        let loss = model.loss(&ids, &targets, args.seq)?;
        loss.backward()?;
        opt.step(&mut model)?;
        model.zero_grad();
        let loss = loss.to_host()?[0];
        if step == 1 {
            comm = Some(mesh.comm_stats());
        }
        losses.push(loss);
        bar.set_message(format!("{loss:.4}"));
        bar.inc(1);
    }
    bar.finish_and_clear();
    let train_s = train_started.elapsed().as_secs_f64();

    println!("\nloss curve ({} steps):", losses.len());
    let fell = common::report_loss(&losses, cfg.vocab, 5, 0.8);
    println!(
        "  {:.1} ms per step (forward + backward + AdamW + loss readback)",
        train_s * 1e3 / (args.steps.max(2) - 1) as f64
    );
    if let Some(stats) = comm {
        println!(
            "\ncommunication in one training step (P = {}):",
            mesh.size()
        );
        common::print_comm(&stats);
    }

    let sampling = if args.temperature <= 0.0 {
        Sampling::Greedy
    } else {
        Sampling::TopK {
            k: args.top_k.max(1),
            temperature: args.temperature,
            seed: args.seed,
        }
    };
    let prompt = vocab.encode(&args.prompt);
    mesh.reset_comm_stats();
    let t0 = Instant::now();
    let out = model.generate(&prompt, args.sample_len, sampling)?;
    let gen_s = t0.elapsed().as_secs_f64();
    println!(
        "\nsample ({} characters with the key/value cache, {:.1} ms each, {sampling:?}):",
        args.sample_len,
        gen_s * 1e3 / args.sample_len.max(1) as f64
    );
    println!("{}{}", args.prompt, vocab.decode(&out));
    println!("decoding communication:");
    common::print_comm(&mesh.comm_stats());

    println!(
        "\n{} in {:.1} s",
        if parity_ok && fell { "PASS" } else { "FAIL" },
        started.elapsed().as_secs_f64()
    );
    Ok(parity_ok && fell)
}

fn main() -> ExitCode {
    common::quiet_vulkan_loader();
    let args = Args::parse();
    let sizes = [
        args.ranks,
        args.layers,
        args.hidden,
        args.heads,
        args.seq,
        args.batch,
        args.steps,
    ];
    if sizes.contains(&0) {
        eprintln!(
            "--ranks, --layers, --hidden, --heads, --seq, --batch and --steps must be at least 1"
        );
        return ExitCode::from(2);
    }
    if args.hidden % args.heads != 0 {
        eprintln!("--hidden must be a multiple of --heads");
        return ExitCode::from(2);
    }
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
