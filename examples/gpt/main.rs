//! A character-level GPT trained on P simulated ranks.
//!
//! Trains a GPT (`CausalLm`s of a `Gpt2Config`: GPT-2's structure:
//! vocab-parallel `wte` tied to the output head, replicated `wpe`, pre-LN
//! blocks with attention heads split over ranks, vocab-parallel
//! cross-entropy) on Genesis 1–11 of the King James Version
//! (`examples/data/genesis_kjv.txt`, public domain). At step 0 it checks the
//! loss and every gradient against the same model on one rank, then trains
//! with AdamW, shows a progress bar and the loss curve, prints what one step
//! communicates, and ends with a sample decoded with the key/value cache.
//!
//! Run: `cargo run --release --example gpt` (`-- --help` lists the flags;
//! `--axes dp=2,tp=2` trains 2 data-parallel replicas of 2 tensor-parallel
//! ranks each, `--zero` sharding AdamW over dp, `--axes pp=2,tp=2` splits
//! the model into 2 pipeline stages; `--features mpi` and
//! `mpirun -np 4 target/release/examples/gpt --mpi --axes dp=2,tp=2` runs
//! one rank per process, checked bit for bit against one process;
//! `WGPU_BACKEND=gl` picks GL llvmpipe on a machine without a GPU). Exits
//! non-zero if parity fails or the loss does not fall.

#[path = "../common/mod.rs"]
mod common;
mod replicas;

use common::say;

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use replicas::{Optimiser, axes, build_replicas, dp_step, pipeline};
use wgpu_tp::DType;
use wgpu_tp::Mesh;
use wgpu_tp::models::{CausalLm, Gpt2Config, LoadOptions};
use wgpu_tp::nn::{DataParallel, Params, Sampling, StageDecoder};

const TEXT: &str = include_str!("../data/genesis_kjv.txt");

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
    /// Put all ranks on one wgpu device (collectives become on-device
    /// copies; the default for several ranks).
    #[arg(long)]
    shared_device: bool,
    /// Give each rank its own wgpu device (collectives through the host, as
    /// between GPUs).
    #[arg(long, conflicts_with = "shared_device")]
    device_per_rank: bool,
    /// One rank per MPI process (launch with `mpirun -np P`; --ranks is
    /// ignored). Step 0 is then checked bit for bit against a single-process
    /// mesh of the same P. Needs `--features mpi`.
    #[arg(long)]
    mpi: bool,
    /// Named axes `pp=S,dp=D,tp=T` (any subset): S pipeline stages (S
    /// micro-batches a step), D data-parallel replicas, each on T
    /// tensor-parallel ranks and its slice of the batch (S·D·T ranks, or
    /// processes with --mpi; --ranks is then ignored).
    #[arg(long, value_parser = replicas::parse_axes)]
    axes: Option<replicas::Axes>,
    /// With dp > 1: shard AdamW's moments and update over dp (ZeRO-1).
    #[arg(long)]
    zero: bool,
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

/// Step 0 on P ranks and on the reference (one rank; with `--mpi`, one
/// process of P ranks, on process 0 only): the loss and every gradient must
/// agree. Every process reads the model's gradients (that gathers them).
fn parity(
    model: &[CausalLm],
    serial: Option<&[CausalLm]>,
    (loss_p, loss_1): (f32, f32),
    tol: f64,
) -> wgpu_tp::Result<bool> {
    let loss_err = common::rel_err(&[loss_p], &[loss_1]);
    say!("  loss                      {loss_p:.6} vs {loss_1:.6}  rel {loss_err:.2e}");
    let mut worst = loss_err;
    let grads = |stages: &[CausalLm]| -> wgpu_tp::Result<BTreeMap<String, Option<Vec<f32>>>> {
        let mut all = BTreeMap::new();
        for s in stages {
            for (name, p) in s.named_parameters() {
                let g = p.master_grad()?;
                all.entry(name).or_insert(g);
            }
        }
        Ok(all)
    };
    let mine = grads(model)?;
    let Some(reference) = serial.map(grads).transpose()? else {
        return Ok(true);
    };
    for (name, g) in mine {
        let e = match (g, reference.get(&name).cloned().flatten()) {
            (Some(g), Some(gs)) if tol == 0.0 => {
                let same = g.iter().zip(&gs).all(|(a, b)| a.to_bits() == b.to_bits());
                if same && g.len() == gs.len() {
                    0.0
                } else {
                    f64::INFINITY
                }
            }
            (Some(g), Some(gs)) => common::rel_err(&g, &gs),
            _ => f64::INFINITY,
        };
        worst = worst.max(e);
        if e > tol || name.starts_with("h.0.") || !name.starts_with("h.") {
            say!("  grad {name:<22} rel {e:.2e}");
        }
    }
    let ok = worst <= tol;
    let verdict = if ok { "PASS" } else { "FAIL" };
    say!("  max relative error over all parameters  {worst:.2e}  {verdict}");
    Ok(ok)
}

fn run(args: &Args) -> wgpu_tp::Result<bool> {
    let started = Instant::now();
    let vocab = Vocab::new(TEXT);
    let data = vocab.encode(TEXT);
    let cfg = Gpt2Config::new(
        vocab.chars.len(),
        args.seq.max(args.prompt.chars().count() + args.sample_len),
        args.hidden,
        args.heads,
        args.layers,
    );
    let opts = match args.f16 {
        true => LoadOptions::default().activations(DType::F16),
        false => LoadOptions::default(),
    };
    let world: usize = axes(args).iter().map(|a| a.1).product();
    let mesh = common::build_mesh(
        world,
        common::layout(args.shared_device, args.device_per_rank),
        args.mpi,
    )?;
    let mesh = mesh.with_axes(&axes(args))?;
    // With --mpi every process runs this; only process 0 reports.
    common::set_quiet(mesh.process_index() != 0);
    say!("wgpu-tp character-level GPT");
    say!("  adapter   {}", mesh.adapter_summary());
    say!(
        "  mesh      {} ranks {:?}, {:?} transport",
        mesh.size(),
        mesh.axes(),
        mesh.transport()
    );
    say!(
        "  model     {} layers · hidden {} · {} heads · vocab {} · context {}",
        cfg.n_layer,
        cfg.n_embd,
        cfg.n_head,
        cfg.vocab_size,
        cfg.n_positions
    );
    if args.f16 {
        say!("  precision f16 activations, f32 accumulation and master weights");
    }
    say!(
        "  data      Genesis 1-11 (KJV), {} characters; {} steps of {} × {} characters",
        data.len(),
        args.steps,
        args.batch,
        args.seq
    );

    let pipe = pipeline(&mesh)?;
    let mut replicas = build_replicas(&mesh, &pipe, (&cfg, opts), args.seed)?;
    let dp = DataParallel::new(&mesh, "dp")?;
    let mut windows = common::Windows(args.seed);
    let (ids, targets) = windows.batch(&data, args.batch, args.seq);

    // Step 0 on one rank first: on software adapters the driver's shader
    // cache then serves the P devices.
    // With --mpi the reference is one process driving the same ranks and
    // axes, and the two must agree bit for bit.
    let (parity_tol, reference) = match (args.mpi, args.f16) {
        (true, _) => (0.0, format!("{:?} in one process", mesh.axes())),
        (false, true) => (PARITY_TOL_F16, "one rank".into()),
        (false, false) => (PARITY_TOL, "one rank".into()),
    };
    say!(
        "\nstep-0 parity, {:?} vs {reference} on the whole batch (tolerance {parity_tol:.0e}):",
        mesh.axes()
    );
    let serial = if mesh.process_index() == 0 {
        let serial_mesh = match args.mpi {
            true => common::build_mesh(mesh.size(), None, false)?.with_axes(&axes(args))?,
            false => {
                let one = [("pp", 1), ("dp", 1), ("tp", 1)];
                common::build_mesh(1, None, false)?.with_axes(&one)?
            }
        };
        let serial_pipe = pipeline(&serial_mesh)?;
        let mut serial = build_replicas(&serial_mesh, &serial_pipe, (&cfg, opts), args.seed)?;
        let serial_dp = DataParallel::new(&serial_mesh, "dp")?;
        let both = (&serial_pipe, &serial_dp);
        let loss_1 = dp_step(&mut serial, both, (&ids, &targets), args.seq)?;
        Some((serial, loss_1))
    } else {
        None
    };
    let loss_p = dp_step(&mut replicas, (&pipe, &dp), (&ids, &targets), args.seq)?;
    let loss_1 = serial.as_ref().map_or(loss_p, |s| s.1);
    let parity_ok = parity(
        &replicas,
        serial.as_ref().map(|s| s.0.as_slice()),
        (loss_p, loss_1),
        parity_tol,
    )?;
    drop(serial);

    let mut opt = Optimiser::new(args, &dp, replicas.len());
    opt.step(&mut replicas)?;
    let mut losses = vec![loss_p];
    let bar = common::progress(args.steps);
    bar.inc(1);
    let mut comm = None;
    let tp0 = replicas[0].named_parameters()[0].1.value.mesh().clone();
    let train_started = Instant::now();
    for step in 1..args.steps {
        let (ids, targets) = windows.batch(&data, args.batch, args.seq);
        tp0.reset_comm_stats();
        for axis in ["pp", "dp"] {
            mesh.axis_groups(axis)?
                .iter()
                .for_each(Mesh::reset_comm_stats);
        }
        let loss = dp_step(&mut replicas, (&pipe, &dp), (&ids, &targets), args.seq)?;
        opt.step(&mut replicas)?;
        if step == 1 {
            comm = Some((
                tp0.comm_stats(),
                mesh.axis_comm_stats("dp")?,
                mesh.axis_comm_stats("pp")?,
            ));
        }
        losses.push(loss);
        bar.set_message(format!("{loss:.4}"));
        bar.inc(1);
    }
    bar.finish_and_clear();
    let train_s = train_started.elapsed().as_secs_f64();

    say!("\nloss curve ({} steps):", losses.len());
    let fell = common::report_loss(&losses, cfg.vocab_size, 5, 0.8);
    say!(
        "  {:.1} ms per step (forward + backward + AdamW + loss readback)",
        train_s * 1e3 / (args.steps.max(2) - 1) as f64
    );
    if let Some((tp, dp_stats, pp_stats)) = comm {
        say!(
            "\ncommunication in one training step, the first tp group here (P = {}):",
            tp0.size()
        );
        common::print_comm(&tp);
        if dp.size() > 1 {
            say!(
                "gradient average over dp, all dp groups (ZeRO-1: {}):",
                args.zero
            );
            common::print_comm(&dp_stats);
        }
        if pipe.stages() > 1 {
            say!(
                "between pipeline stages, all pp groups (activations, gradients, the tied table, the loss):"
            );
            common::print_comm(&pp_stats);
        }
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
    tp0.reset_comm_stats();
    let t0 = Instant::now();
    // Through the stages this process drives (every replica holds the same
    // weights, so they choose alike).
    let refs: Vec<&dyn StageDecoder> = replicas.iter().map(|s| s as &dyn StageDecoder).collect();
    let out = pipe.generate(&refs, &prompt, args.sample_len, sampling)?;
    let gen_s = t0.elapsed().as_secs_f64();
    say!(
        "\nsample ({} characters with the key/value cache, {:.1} ms each, {sampling:?}):",
        args.sample_len,
        gen_s * 1e3 / args.sample_len.max(1) as f64
    );
    say!("{}{}", args.prompt, vocab.decode(&out));
    say!("decoding communication:");
    common::print_comm(&tp0.comm_stats());

    say!(
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
    let (pp, dp, _) = args.axes.unwrap_or((1, 1, args.ranks));
    if args.batch % (dp * pp) != 0 {
        eprintln!(
            "--batch must be a multiple of dp ({dp}) × pp ({pp}): each replica takes an equal \
             slice, cut into pp micro-batches"
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
