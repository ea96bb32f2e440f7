//! Collectives over MPI (feature `mpi`), reported as nccl-tests does, against
//! MPI's own `MPI_Allreduce` / `MPI_Allgather` and the raw host copy measured
//! in the same run, plus an α–β fit per collective and a GPT step.
//!
//! - `bytes` is the per-rank message (the tensor each rank holds for
//!   all-reduce, the gathered output for all-gather, the input for
//!   reduce-scatter); time is one call plus `Mesh::synchronize`, the slowest
//!   rank's, best of N after a warm-up, every repetition started together
//!   (a barrier);
//! - algbw = bytes / time; busbw = algbw × 2(P−1)/P (all-reduce), ×(P−1)/P
//!   (all-gather, reduce-scatter);
//! - `mpi` lines are MPI's own collective on host buffers of the same size
//!   (no device), `memcpy` a host copy of that size (the floor of any staged
//!   transport), `stage` this rank's device → host → device round trip;
//! - `fit`: time = α + β · bytes per collective through the smallest and
//!   the largest size (the model `netns.sh` projects from);
//! - `gpt`: a small GPT's training step (forward, backward, AdamW) and what
//!   it communicates per step, for the projection; at np = 2 also the same
//!   step data-parallel (`small-dp`: axes dp 2 × tp 1, each rank the whole
//!   model and half the batch, gradients averaged over dp) and pipelined
//!   (`small-pp`: pp 2 × tp 1, each rank one stage, two micro-batches 1F1B).
//!   Every layout runs as `CausalLm::stage`s (one stage when pp = 1).
//!
//! `cargo bench --features mpi --bench mpi_collectives` launches itself under
//! `mpirun` at np = 2 and 4 on this host. Under `mpirun` it runs as one rank
//! (`benches/netns.sh` does that across two network namespaces).
//! `WGPU_TP_BENCH_MAX_MIB` caps the largest size (default 16).

mod layouts;
mod project;

use std::process::Command;
use std::time::{Duration, Instant};

use mpi::collective::{CommunicatorCollectives, SystemOperation};
use mpi::topology::SimpleCommunicator;
use wgpu_tp::comm::{self, ReduceOp};
use wgpu_tp::models::{CausalLm, Gpt2Config, LoadOptions};
use wgpu_tp::nn::{AdamW, DataParallel, Params, Pipeline};
use wgpu_tp::{Collective, LocalTensor, Mesh, MeshBuilder};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

fn sizes() -> Vec<usize> {
    let max = std::env::var("WGPU_TP_BENCH_MAX_MIB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(16)
        * MIB;
    [4 * KIB, 64 * KIB, MIB, 4 * MIB, 16 * MIB, 64 * MIB]
        .into_iter()
        .filter(|&s| s <= max.max(4 * KIB))
        .collect()
}

/// The slowest rank's time of `f`, best of `reps` after a warm-up, each
/// repetition started after a barrier.
fn timed(world: &SimpleCommunicator, reps: usize, mut f: impl FnMut()) -> Duration {
    f();
    let mut best = f64::MAX;
    for _ in 0..reps {
        world.barrier();
        let t = Instant::now();
        f();
        let mine = t.elapsed().as_secs_f64();
        let mut slowest = 0.0f64;
        world.all_reduce_into(&mine, &mut slowest, SystemOperation::max());
        best = best.min(slowest);
    }
    Duration::from_secs_f64(best)
}

fn reps(bytes: usize) -> usize {
    if bytes >= 4 * MIB { 3 } else { 10 }
}

/// t = α + β·x through the smallest and the largest message: α is what a
/// tiny message costs, β what each byte adds at the sizes that matter
/// (a least-squares line bends to whichever end has more points, and a
/// link's bucket makes small messages faster than its rate).
fn fit(points: &[(f64, f64)]) -> (f64, f64) {
    let (Some(small), Some(large)) = (points.first(), points.last()) else {
        return (0.0, 0.0);
    };
    if large.0 <= small.0 {
        return (small.1, 0.0);
    }
    let beta = (large.1 - small.1) / (large.0 - small.0);
    (small.1 - beta * small.0, beta)
}

fn report(
    lead: bool,
    p: usize,
    op: &str,
    bytes: usize,
    t: Duration,
    bus_factor: f64,
    vs: &[(&str, f64)],
) -> f64 {
    let alg = bytes as f64 / t.as_secs_f64() / 1e9;
    let bus = alg * bus_factor;
    if lead {
        let ratios: Vec<String> = vs
            .iter()
            .map(|(n, b)| format!("{:.2}× {n}", bus / b))
            .collect();
        println!(
            "{op:<16} P={p} {:>9} B {:>10.1} us  algbw {alg:>7.3} GB/s  busbw {bus:>7.3} GB/s  {}",
            bytes,
            t.as_secs_f64() * 1e6,
            ratios.join("  ")
        );
    }
    bus
}

fn collectives(mesh: &Mesh, world: &SimpleCommunicator) -> wgpu_tp::Result<()> {
    let (p, lead) = (mesh.size(), mesh.process_index() == 0);
    let rank = &mesh.ranks()[0];
    let ring = 2.0 * (p - 1) as f64 / p as f64;
    let half = (p - 1) as f64 / p as f64;
    let mut fits: Vec<(&str, Vec<(f64, f64)>)> = vec![
        ("all_reduce", vec![]),
        ("all_gather", vec![]),
        ("reduce_scatter", vec![]),
        ("mpi_allreduce", vec![]),
    ];
    for bytes in sizes() {
        let n = bytes / 4;
        let r = reps(bytes);
        let host = vec![1.0f32; n];
        let mut out = vec![0.0f32; n];
        let t_copy = timed(world, r, || out.copy_from_slice(&host));
        let copy = report(lead, p, "memcpy", bytes, t_copy, 1.0, &[]);
        let x = rank.upload(&[n], &host)?;
        let t_stage = timed(world, r, || {
            let back = x.to_vec().expect("download");
            rank.upload(&[n], &back).expect("upload");
            mesh.synchronize().expect("sync");
        });
        let stage = report(lead, p, "stage", bytes, t_stage, 1.0, &[("memcpy", copy)]);
        let t_mpi = timed(world, r, || {
            world.all_reduce_into(&host[..], &mut out[..], SystemOperation::sum())
        });
        let mpi_bus = report(
            lead,
            p,
            "mpi_allreduce",
            bytes,
            t_mpi,
            ring,
            &[("memcpy", copy)],
        );
        let t = timed(world, r, || {
            comm::all_reduce(mesh, std::slice::from_ref(&x), ReduceOp::Sum).expect("all_reduce");
            mesh.synchronize().expect("sync");
        });
        report(
            lead,
            p,
            "all_reduce",
            bytes,
            t,
            ring,
            &[("mpi_allreduce", mpi_bus), ("stage", stage)],
        );
        fits[0].1.push((bytes as f64, t.as_secs_f64()));
        fits[3].1.push((bytes as f64, t_mpi.as_secs_f64()));
        // All-gather: `bytes` is the gathered output, each rank holds 1/P.
        let part: LocalTensor = rank.upload(&[n / p], &host[..n / p])?;
        let mut gathered = vec![0.0f32; (n / p) * p];
        let t_mpi_g = timed(world, r, || {
            world.all_gather_into(&host[..n / p], &mut gathered[..])
        });
        let mpi_g = report(
            lead,
            p,
            "mpi_allgather",
            bytes,
            t_mpi_g,
            half,
            &[("memcpy", copy)],
        );
        let t = timed(world, r, || {
            comm::all_gather(mesh, std::slice::from_ref(&part), 0).expect("all_gather");
            mesh.synchronize().expect("sync");
        });
        report(
            lead,
            p,
            "all_gather",
            bytes,
            t,
            half,
            &[("mpi_allgather", mpi_g), ("stage", stage)],
        );
        fits[1].1.push((bytes as f64, t.as_secs_f64()));
        let t = timed(world, r, || {
            comm::reduce_scatter(mesh, std::slice::from_ref(&x), 0, ReduceOp::Sum)
                .expect("reduce_scatter");
            mesh.synchronize().expect("sync");
        });
        report(
            lead,
            p,
            "reduce_scatter",
            bytes,
            t,
            half,
            &[("stage", stage)],
        );
        fits[2].1.push((bytes as f64, t.as_secs_f64()));
    }
    if lead {
        for (op, pts) in &fits {
            let (a, b) = fit(pts);
            println!(
                "fit {op:<14} P={p} alpha {:.1} us  beta {:.4} ns/B ({:.2} GB/s)",
                a * 1e6,
                b * 1e9,
                1.0 / b.max(1e-30) / 1e9
            );
        }
    }
    Ok(())
}

/// A GPT's step time (forward, backward, AdamW) and its communication per
/// step, per collective as (calls, per-rank bytes per call). With `dp`, the
/// ranks are data-parallel replicas instead (axes dp = P, tp = 1: each its
/// whole model and 1/P of the batch, gradients averaged over dp), named
/// `{name}-dp`; its communication is the dp axis's.
/// How a [`gpt_step`] lays the ranks out.
#[derive(Clone, Copy, PartialEq)]
enum Layout {
    /// Tensor parallelism over every rank.
    Tp,
    /// Data parallelism over every rank, each the whole model.
    Dp,
    /// One pipeline stage per rank, two micro-batches.
    Pp,
}

fn gpt_step(
    mesh: &Mesh,
    world: &SimpleCommunicator,
    name: &str,
    cfg: &Gpt2Config,
    (batch, seq): (usize, usize),
    reps: usize,
    layout: Layout,
) -> wgpu_tp::Result<()> {
    let (p, lead) = (mesh.size(), mesh.process_index() == 0);
    let along = |l| if layout == l { p } else { 1 };
    let axes = mesh.with_axes(&[
        ("pp", along(Layout::Pp)),
        ("dp", along(Layout::Dp)),
        ("tp", along(Layout::Tp)),
    ])?;
    let model_mesh = axes.axis("tp")?;
    let data_parallel = DataParallel::new(&axes, "dp")?;
    // Micro-batches only where there are stages: the tp and dp steps stay
    // one pass over the batch, as measured before.
    let micro = if layout == Layout::Pp { 2 } else { 1 };
    let pipeline = Pipeline::new(&axes, "pp", micro)?;
    let opts = LoadOptions::default();
    let mut stage = CausalLm::stage(&model_mesh, cfg.clone(), 0, &pipeline, opts)?;
    let vocab = cfg.vocab_size as u64;
    let tokens = |k: u64| -> Vec<i32> {
        (0..(batch * seq) as u64)
            .map(|i| ((i * 2654435761 + k) % vocab) as i32)
            .collect()
    };
    let (ids, targets) = (tokens(1), tokens(7));
    let dp_index = axes.coords()?[1];
    let rows = data_parallel.batch_rows(batch, dp_index)?;
    let span = rows.start * seq..rows.end * seq;
    let batches = [(&ids[span.clone()], &targets[span])];
    let mut opt = AdamW::new(1e-4);
    let mut step = || -> wgpu_tp::Result<()> {
        stage.zero_grad();
        pipeline.forward_backward(&mut [&mut stage], &batches, seq)?;
        data_parallel.average_gradients(&mut [&mut stage])?;
        opt.step(&mut stage)?;
        mesh.synchronize()
    };
    let (counted, name) = match layout {
        Layout::Tp => (model_mesh.clone(), name.to_string()),
        Layout::Dp => (axes.axis("dp")?, format!("{name}-dp")),
        Layout::Pp => (axes.axis("pp")?, format!("{name}-pp")),
    };
    step()?;
    counted.reset_comm_stats();
    step()?;
    let stats = counted.comm_stats();
    let t = timed(world, reps, || step().expect("step"));
    if lead {
        println!(
            "gpt {name} step P={p} ({batch} x {seq} tokens): {:.1} ms",
            t.as_secs_f64() * 1e3
        );
        for (kind, c) in &stats {
            // Per-rank message as the fits measure it; a send is one rank's
            // message (counted on its sender's process only).
            let per_rank = match kind {
                Collective::AllGather | Collective::Send => c.bytes,
                _ => c.bytes / p as u64,
            } / c.calls.max(1);
            println!(
                "gpt {name} comm {kind:?} calls {} per_rank_bytes {per_rank}",
                c.calls
            );
        }
    }
    Ok(())
}

fn launch() {
    for np in [2, 4] {
        let exe = std::env::current_exe().expect("own path");
        let status = Command::new("mpirun")
            .args([
                "-np",
                &np.to_string(),
                "--oversubscribe",
                "--mca",
                "pml",
                "ob1",
                "--mca",
                "btl",
                "self,vader",
            ])
            .args(["--mca", "btl_vader_single_copy_mechanism", "none"])
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("LP_NUM_THREADS", "1")
            .arg(exe)
            .status()
            .expect("mpirun (install openmpi-bin)");
        assert!(status.success(), "mpirun -np {np} failed");
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--project") {
        return project::run(&args[i + 1..]);
    }
    if std::env::var_os("OMPI_COMM_WORLD_SIZE").is_none() {
        return launch();
    }
    let mesh = MeshBuilder::new().mpi().build().expect("an MPI mesh");
    let world = SimpleCommunicator::world();
    if mesh.process_index() == 0 {
        println!(
            "# {} ranks, one per process; adapter {}",
            mesh.size(),
            mesh.adapter_summary()
        );
    }
    collectives(&mesh, &world).expect("collectives");
    let mut small = Gpt2Config::new(512, 128, 256, 8, 2);
    small.n_inner = Some(1024);
    gpt_step(&mesh, &world, "small", &small, (2, 128), 3, Layout::Tp).expect("gpt step");
    if mesh.size() == 2 {
        for layout in [Layout::Dp, Layout::Pp] {
            gpt_step(&mesh, &world, "small", &small, (2, 128), 3, layout).expect("gpt dp/pp step");
        }
    }
    if std::env::var_os("WGPU_TP_BENCH_GPT2").is_some() {
        // GPT-2 124M's shapes (random weights), 2 × 256 tokens as benches/gpt2.rs.
        let gpt2 = Gpt2Config::new(50257, 1024, 768, 12, 12);
        gpt_step(&mesh, &world, "gpt2", &gpt2, (2, 256), 1, Layout::Tp).expect("gpt2 step");
        if mesh.size() == 2 {
            for layout in [Layout::Dp, Layout::Pp] {
                gpt_step(&mesh, &world, "gpt2", &gpt2, (2, 256), 1, layout)
                    .expect("gpt2 dp/pp step");
            }
        }
    }
}
