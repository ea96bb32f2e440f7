//! Quickstart: a small tensor-parallel language model trained on simulated ranks.
//!
//! Builds `MlpLanguageModel` (vocab-parallel embedding → column-parallel
//! linear → GELU → row-parallel linear → vocab-parallel head → vocab-parallel
//! cross-entropy) on `--ranks` simulated ranks of the default adapter, and the
//! same model (same seed) on one rank. At step 0 it checks that the loss and
//! every parameter gradient of the parallel model equal the serial ones, then
//! trains the parallel model on a synthetic next-token task
//! (`target = (a·id + b) mod vocab` over a fixed random token stream) and
//! prints the loss curve, the time per step, what each collective moved, and
//! how many pipelines were built and how long that took (apart from training).
//! With `--trace FILE` the last step is traced (after the warm-up steps) and
//! written as Chrome trace-event JSON for <https://ui.perfetto.dev>, and its
//! top kernels are printed.
//!
//! Run: `cargo run --release --example quickstart` (add `-- --help` for the
//! flags; `WGPU_BACKEND=gl` picks GL, e.g. llvmpipe on a machine without a GPU).
//! Exits non-zero if parity fails or the loss did not fall.

mod common;

use common::say;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use wgpu_tp::nn::{AdamW, MlpLanguageModel, MlpLmConfig, Params, Sgd};

/// Relative error (norm-wise) above which the parity check fails.
const PARITY_TOL: f64 = 1e-4;

/// Which optimiser trains the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Optimizer {
    /// SGD with momentum 0.9 (from the small N(0, 0.02²) init it learns
    /// this task much more slowly than AdamW: give it more steps).
    Sgd,
    /// AdamW (β = 0.9, 0.999; weight decay 0.01).
    Adamw,
}

/// Train a small tensor-parallel MLP language model and check it against the serial model.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Number of simulated ranks (the tensor-parallel world size P).
    #[arg(long, default_value_t = 4)]
    ranks: usize,
    /// Tokens per training step (the batch).
    #[arg(long, default_value_t = 128)]
    tokens: usize,
    /// Hidden (embedding) size.
    #[arg(long, default_value_t = 64)]
    hidden: usize,
    /// Feed-forward size.
    #[arg(long, default_value_t = 128)]
    ffn: usize,
    /// Vocabulary size.
    #[arg(long, default_value_t = 256)]
    vocab: usize,
    /// Training steps.
    #[arg(long, default_value_t = 60)]
    steps: usize,
    /// Learning rate [default: 0.01 for AdamW, 1.0 for SGD].
    #[arg(long)]
    lr: Option<f32>,
    /// Optimiser.
    #[arg(long, value_enum, default_value_t = Optimizer::Adamw)]
    optimizer: Optimizer,
    /// Seed for the weights and the token stream.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Put all ranks on one wgpu device (collectives become on-device
    /// copies; the default for several ranks).
    #[arg(long)]
    shared_device: bool,
    /// Give each rank its own wgpu device (collectives through the host, as
    /// between GPUs).
    #[arg(long, conflicts_with = "shared_device")]
    device_per_rank: bool,
    /// One rank per MPI process (`mpirun -np P`; --ranks is ignored; needs
    /// `--features mpi`); only process 0 prints.
    #[arg(long)]
    mpi: bool,
    /// Trace the last training step (every kernel and collective, per rank)
    /// and write it to FILE as Chrome trace-event JSON (open it in
    /// https://ui.perfetto.dev); that step is left out of the time per step.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
}

/// SplitMix64, for the synthetic token stream.
struct Stream(u64);

impl Stream {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// The synthetic task: a fixed random token stream, and the rule
/// `target = (a·id + b) mod vocab` the model has to learn.
struct Task {
    stream: Vec<i32>,
    a: usize,
    b: usize,
    vocab: usize,
}

impl Task {
    fn new(vocab: usize, seed: u64) -> Task {
        let mut rng = Stream(seed ^ 0x005E_ED0F_70C3);
        let stream = (0..4096)
            .map(|_| (rng.next() % vocab as u64) as i32)
            .collect();
        // Any fixed rule id -> target is learnable by a lookup-like model;
        // this one is a permutation whenever gcd(a, vocab) = 1.
        Task {
            stream,
            a: 2 * (vocab / 3) + 1,
            b: 7 % vocab.max(1),
            vocab,
        }
    }

    /// Batch `step`: `tokens` ids from the stream and their targets.
    fn batch(&self, step: usize, tokens: usize) -> (Vec<i32>, Vec<i32>) {
        let n = self.stream.len();
        let start = (step * tokens) % n;
        let ids: Vec<i32> = (0..tokens).map(|i| self.stream[(start + i) % n]).collect();
        let targets = ids
            .iter()
            .map(|&id| ((id as usize * self.a + self.b) % self.vocab) as i32)
            .collect();
        (ids, targets)
    }
}

/// One training step; returns the loss (read back to the host).
fn train_step(
    model: &mut MlpLanguageModel,
    opt: &mut Opt,
    ids: &[i32],
    targets: &[i32],
) -> wgpu_tp::Result<f32> {
    let loss = model.loss(ids, targets)?;
    loss.backward()?;
    opt.step(model)?;
    model.zero_grad();
    Ok(loss.to_host()?[0])
}

enum Opt {
    Sgd(Sgd),
    AdamW(AdamW),
}

impl Opt {
    fn step(&mut self, model: &mut MlpLanguageModel) -> wgpu_tp::Result<()> {
        match self {
            Opt::Sgd(o) => o.step(model),
            Opt::AdamW(o) => o.step(model),
        }
    }
}

fn run(args: &Args) -> wgpu_tp::Result<bool> {
    let started = Instant::now();
    let lr = args.lr.unwrap_or(match args.optimizer {
        Optimizer::Sgd => 1.0,
        Optimizer::Adamw => 0.01,
    });
    let cfg = MlpLmConfig {
        vocab: args.vocab,
        hidden: args.hidden,
        ffn: args.ffn,
    };
    let mesh = common::build_mesh(
        args.ranks,
        common::layout(args.shared_device, args.device_per_rank),
        args.mpi,
    )?;
    // With --mpi every process runs this; only process 0 reports.
    common::set_quiet(mesh.process_index() != 0);
    let serial_mesh = common::build_mesh(1, None, false)?;
    say!("wgpu-tp quickstart");
    say!("  adapter   {}", mesh.adapter_summary());
    say!(
        "  mesh      {} ranks, {:?} transport",
        mesh.size(),
        mesh.transport()
    );
    say!(
        "  model     vocab {} · hidden {} · ffn {} (embedding → column → GELU → row → vocab head → CE)",
        cfg.vocab,
        cfg.hidden,
        cfg.ffn
    );
    say!(
        "  training  {} steps of {} tokens, {:?} lr {}, seed {}",
        args.steps,
        args.tokens,
        args.optimizer,
        lr,
        args.seed
    );

    let mut model = MlpLanguageModel::new(&mesh, cfg, args.seed)?;
    let serial = MlpLanguageModel::new(&serial_mesh, cfg, args.seed)?;
    let task = Task::new(args.vocab, args.seed);

    // ---- step 0: parity of the loss and every gradient with the 1-rank model ----
    // The serial model runs first: it compiles each kernel once, and on
    // software adapters the driver's shader cache then serves the P devices,
    // which would otherwise all compile the same kernels at once.
    let (ids, targets) = task.batch(0, args.tokens);
    let loss = serial.loss(&ids, &targets)?;
    let loss_1 = loss.to_host()?[0];
    loss.backward()?;
    serial_mesh.synchronize()?;
    let loss = model.loss(&ids, &targets)?;
    let loss_p = loss.to_host()?[0];
    loss.backward()?;
    say!(
        "\nstep-0 parity, P = {} vs P = 1 (tolerance {PARITY_TOL:.0e}):",
        mesh.size()
    );
    let loss_err = common::rel_err(&[loss_p], &[loss_1]);
    say!("  loss                {loss_p:.6} vs {loss_1:.6}  rel {loss_err:.2e}");
    let mut worst = loss_err;
    for ((name, p), (sname, s)) in model
        .named_parameters()
        .into_iter()
        .zip(serial.named_parameters())
    {
        assert_eq!(
            name, sname,
            "both models list their parameters in one order"
        );
        let (g, gs) = (p.master_grad()?, s.master_grad()?);
        let e = match (g, gs) {
            (Some(g), Some(gs)) => common::rel_err(&g, &gs),
            _ => f64::INFINITY,
        };
        worst = worst.max(e);
        say!(
            "  grad {name:<15} {:<12} rel {e:.2e}",
            format!("{:?}", p.shape())
        );
    }
    let parity_ok = worst <= PARITY_TOL;
    say!(
        "  max relative error  {worst:.2e}  {}",
        if parity_ok { "PASS" } else { "FAIL" }
    );
    drop(serial);

    // ---- training ----
    let mut opt = match args.optimizer {
        Optimizer::Sgd => Opt::Sgd(Sgd::new(lr).with_momentum(0.9)),
        Optimizer::Adamw => Opt::AdamW(AdamW::new(lr)),
    };
    // Step 0's gradients are already accumulated: finish that step.
    opt.step(&mut model)?;
    model.zero_grad();
    let mut losses = vec![loss_p];
    let bar = common::progress(args.steps);
    bar.set_message(format!("{loss_p:.4}"));
    bar.inc(1);
    let mut timed = Duration::ZERO;
    let mut timed_steps = 0u32;
    let mut comm = None;
    let mut trace = None;
    let before_training = started.elapsed();
    let training = Instant::now();
    for step in 1..args.steps {
        let (ids, targets) = task.batch(step, args.tokens);
        if step == 1 {
            mesh.reset_comm_stats();
        }
        let traced = args.trace.is_some() && step + 1 == args.steps;
        if traced {
            mesh.start_trace()?;
        }
        let t0 = Instant::now();
        let loss = train_step(&mut model, &mut opt, &ids, &targets)?;
        let dt = t0.elapsed();
        if traced {
            trace = Some(mesh.stop_trace()?);
        }
        if step == 1 {
            comm = Some(mesh.comm_stats());
        } else if !traced {
            // Step 1 may still build pipelines (the optimiser's first update
            // after step 0 did too); time the steady state.
            timed += dt;
            timed_steps += 1;
        }
        losses.push(loss);
        bar.set_message(format!("{loss:.4}"));
        bar.inc(1);
    }
    let training = training.elapsed();
    bar.finish_and_clear();

    say!("\nloss curve ({} steps):", losses.len());
    let every = losses.len().div_ceil(10).max(1);
    let mut row = String::new();
    for (i, l) in losses.iter().enumerate() {
        if i % every == 0 || i + 1 == losses.len() {
            row.push_str(&format!("  {i:>4}: {l:.4}"));
        }
    }
    say!("{row}");
    let fell = common::report_loss(&losses, args.vocab, 3, 0.5);

    say!(
        "\nbefore training: {:.2} s (meshes, step-0 parity; mostly shader compilation on first use)",
        before_training.as_secs_f64()
    );
    say!(
        "training: {} steps in {:.2} s",
        args.steps - 1,
        training.as_secs_f64()
    );
    if timed_steps > 0 {
        say!(
            "time per step: {:.2} ms (mean of {timed_steps} steps: forward + backward + optimiser + loss readback)",
            timed.as_secs_f64() * 1e3 / timed_steps as f64
        );
    }
    // Pipelines are built on first use (inside step 0 and step 1 above). CPU
    // drivers (lavapipe, llvmpipe) JIT a pipeline at its first dispatch, so
    // there the build time is small and the compile sits in "before training".
    for (name, m) in [("parallel", &mesh), ("serial", &serial_mesh)] {
        let devices = m.devices();
        let built: u64 = devices.iter().map(|d| d.pipelines_built()).sum();
        let time: Duration = devices.iter().map(|d| d.pipeline_build_time()).sum();
        say!(
            "pipelines ({name} mesh, {} device{}): {built} built in {:.2} s",
            devices.len(),
            if devices.len() == 1 { "" } else { "s" },
            time.as_secs_f64()
        );
    }
    if let Some(stats) = comm {
        say!("communication in one training step (P = {}):", mesh.size());
        common::print_comm(&stats);
    }
    if args.trace.is_some() && trace.is_none() {
        say!("\nno step traced: --trace needs --steps of at least 2");
    }
    if let (Some(trace), Some(path)) = (&trace, &args.trace) {
        trace.write_chrome_json(path)?;
        let kernels = trace.kernels().count();
        say!(
            "\ntrace of step {} written to {} (open it in https://ui.perfetto.dev):",
            args.steps - 1,
            path.display()
        );
        say!(
            "  {kernels} kernels and {} collective spans over {} ranks; step {:.2} ms, kernels {:.2} ms summed over ranks",
            trace.host_spans().count(),
            trace.tracks().len(),
            trace.span().as_secs_f64() * 1e3,
            trace.kernel_time().as_secs_f64() * 1e3
        );
        say!("  top kernels by total time:");
        for k in trace.top_kernels(5) {
            say!(
                "  {:<32} {:>4} calls  {:>8.3} ms  {:>5.1} %",
                k.name,
                k.calls,
                k.total.as_secs_f64() * 1e3,
                k.share * 100.0
            );
        }
    }
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
    if args.ranks == 0 || args.tokens == 0 || args.vocab == 0 || args.steps == 0 {
        eprintln!("--ranks, --tokens, --vocab and --steps must be at least 1");
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
