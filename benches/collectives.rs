//! Collective bandwidth, reported the way nccl-tests does, against a baseline
//! measured in the same run.
//!
//! For all-gather, all-reduce and reduce-scatter on 4 and 8 ranks, on a
//! host-staged simulated mesh (each rank its own wgpu device) and on a
//! shared-device mesh (all ranks on one device), at 64 KiB ... 64 MiB:
//!
//! - `bytes` is the per-rank message size: the tensor each rank holds for
//!   all-reduce, the gathered output for all-gather, the input for
//!   reduce-scatter;
//! - time is one call plus `Mesh::synchronize` (so every upload / copy has
//!   landed), best of N after a warm-up;
//! - algbw = bytes / time; busbw = algbw × 2(P−1)/P (all-reduce),
//!   × (P−1)/P (all-gather, reduce-scatter).
//!
//! Baseline (`raw`): device → host → device between two ranks of a host-staged
//! mesh with reused buffers: copy to a MAP_READ staging buffer, map, wait,
//! then either `write_buffer` into the other device or a copy into a reused
//! MAP_WRITE staging buffer and an on-device copy, submit, wait; the faster. Every line prints
//! busbw / raw at the same size; shared-device lines also print the ratio to
//! host-staged busbw at the same size and world size.
//!
//! `cargo bench --bench collectives` (all); a first argument filters cases by
//! substring (e.g. `cargo bench --bench collectives -- all_reduce`).
//! `WGPU_TP_BENCH_MAX_MIB` caps the largest size (default 64).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use wgpu_tp::comm::{self, ReduceOp};
use wgpu_tp::{DeviceLayout, LocalTensor, Mesh, MeshBuilder};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;
const SIZES: &[usize] = &[64 * KIB, 256 * KIB, MIB, 4 * MIB, 16 * MIB, 64 * MIB];

/// Best (minimum) time of at least `min_reps` runs of `f`, and more while the
/// total stays under `budget`, after one warm-up run.
fn best_of(min_reps: usize, budget: Duration, mut f: impl FnMut()) -> Duration {
    f();
    let start = Instant::now();
    let mut best = Duration::MAX;
    let mut reps = 0;
    while reps < min_reps || (start.elapsed() < budget && reps < 50) {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed());
        reps += 1;
    }
    best
}

fn gbps(bytes: usize, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64() / 1e9
}

fn reps_for(bytes: usize) -> usize {
    if bytes >= 16 * MIB { 3 } else { 5 }
}

fn budget_for(bytes: usize) -> Duration {
    if bytes >= 16 * MIB {
        Duration::from_millis(300)
    } else {
        Duration::from_millis(200)
    }
}

/// Raw device → host → device bandwidth between ranks 0 and 1 of `mesh`
/// (distinct devices) with reused buffers, in GB/s: the better of two ways
/// to do the upload half (wgpu's `write_buffer`, which stages through memory
/// wgpu allocates, and a reused MAP_WRITE staging buffer plus a copy), so the
/// baseline is the fastest plain round trip this machine offers.
fn raw_dhd(mesh: &Mesh, bytes: usize) -> f64 {
    let (g0, g1) = (mesh.ranks()[0].device(), mesh.ranks()[1].device());
    let (d0, d1) = (g0.wgpu_device(), g1.wgpu_device());
    let size = bytes as u64;
    let buffer = |d: &wgpu::Device, label, usage| {
        d.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage,
            mapped_at_creation: false,
        })
    };
    use wgpu::BufferUsages as U;
    let src = d0.create_buffer(&wgpu::BufferDescriptor {
        label: Some("raw src"),
        size,
        usage: U::STORAGE | U::COPY_SRC,
        mapped_at_creation: true,
    });
    src.slice(..)
        .get_mapped_range_mut()
        .expect("mapped at creation")
        .slice(..)
        .fill(0x3f);
    src.unmap();
    let down = buffer(d0, "raw staging down", U::MAP_READ | U::COPY_DST);
    let up = buffer(d1, "raw staging up", U::MAP_WRITE | U::COPY_SRC);
    let dst = buffer(d1, "raw dst", U::STORAGE | U::COPY_DST);
    let wait = |d: &wgpu::Device| d.poll(wgpu::PollType::wait_indefinitely()).unwrap();
    let round_trip = |mapped_upload: bool| {
        let mut enc = d0.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(&src, 0, &down, 0, Some(size));
        g0.wgpu_queue().submit([enc.finish()]);
        down.slice(..)
            .map_async(wgpu::MapMode::Read, |r| r.unwrap());
        if mapped_upload {
            up.slice(..).map_async(wgpu::MapMode::Write, |r| r.unwrap());
            wait(d1);
        }
        wait(d0);
        {
            let view = down.slice(..).get_mapped_range().unwrap();
            if mapped_upload {
                up.slice(..)
                    .get_mapped_range_mut()
                    .unwrap()
                    .slice(..)
                    .copy_from_slice(&view);
            } else {
                g1.wgpu_queue().write_buffer(&dst, 0, &view);
            }
        }
        down.unmap();
        if mapped_upload {
            up.unmap();
            let mut enc = d1.create_command_encoder(&Default::default());
            enc.copy_buffer_to_buffer(&up, 0, &dst, 0, Some(size));
            g1.wgpu_queue().submit([enc.finish()]);
        } else {
            g1.wgpu_queue().submit([]);
        }
        wait(d1);
    };
    // Many repetitions: it is cheap, and every ratio below divides by it.
    let reps = 2 * reps_for(bytes);
    let written = best_of(reps, budget_for(bytes) / 2, || round_trip(false));
    let mapped = best_of(reps, budget_for(bytes) / 2, || round_trip(true));
    gbps(bytes, written.min(mapped))
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Op {
    AllGather,
    AllReduce,
    ReduceScatter,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::AllGather => "all_gather",
            Op::AllReduce => "all_reduce",
            Op::ReduceScatter => "reduce_scatter",
        }
    }

    /// busbw / algbw (nccl-tests).
    fn bus_factor(self, p: usize) -> f64 {
        let p = p as f64;
        match self {
            Op::AllReduce => 2.0 * (p - 1.0) / p,
            Op::AllGather | Op::ReduceScatter => (p - 1.0) / p,
        }
    }
}

/// Time one collective of message size `bytes` on `mesh`; returns seconds.
fn time_collective(mesh: &Mesh, op: Op, bytes: usize) -> Duration {
    let p = mesh.size();
    let words = bytes / 4;
    // [P, words / P] for gathers and scatters, so every shard is equal.
    let cols = words / p;
    let shards: Vec<LocalTensor> = mesh
        .ranks()
        .iter()
        .enumerate()
        .map(|(r, rank)| {
            let n = match op {
                Op::AllGather => cols,
                Op::AllReduce | Op::ReduceScatter => words,
            };
            let data: Vec<f32> = (0..n).map(|i| ((i + r) % 7) as f32).collect();
            let shape = match op {
                Op::AllGather => vec![1, cols],
                Op::AllReduce => vec![words],
                Op::ReduceScatter => vec![p, cols],
            };
            rank.upload(&shape, &data).unwrap()
        })
        .collect();
    mesh.synchronize().unwrap();
    let t = best_of(reps_for(bytes), budget_for(bytes), || {
        let out = match op {
            Op::AllGather => comm::all_gather(mesh, &shards, 0),
            Op::AllReduce => comm::all_reduce(mesh, &shards, ReduceOp::Sum),
            Op::ReduceScatter => comm::reduce_scatter(mesh, &shards, 0, ReduceOp::Sum),
        }
        .unwrap();
        mesh.synchronize().unwrap();
        drop(out);
    });
    drop(shards);
    for g in mesh.devices() {
        g.trim_pool();
    }
    t
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn label(bytes: usize) -> String {
    if bytes >= MIB {
        format!("{}M", bytes / MIB)
    } else {
        format!("{}K", bytes / KIB)
    }
}

fn main() {
    // cargo bench passes `--bench`; anything else not starting with '-' filters.
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let max = std::env::var("WGPU_TP_BENCH_MAX_MIB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(64)
        * MIB;
    let sizes: Vec<usize> = SIZES.iter().copied().filter(|&s| s <= max).collect();
    let wanted = |case: &str| filter.as_ref().is_none_or(|f| case.contains(f.as_str()));

    // A device per rank, named: ranks share one by default.
    let host = |p: usize| {
        MeshBuilder::new()
            .ranks(p)
            .layout(DeviceLayout::Simulated)
            .build()
            .expect("an adapter")
    };
    let (host8, host4) = (host(8), host(4));
    let shared8 = MeshBuilder::new()
        .ranks(8)
        .shared_device()
        .build()
        .expect("an adapter");
    let shared4 = MeshBuilder::new()
        .ranks(4)
        .shared_device()
        .build()
        .expect("an adapter");
    println!("adapter: {}", host4.adapter_summary());
    println!("load at start: {}", load());

    // Baseline first, at every size (on the 4-rank mesh; ranks 0 -> 1).
    let mut raw = HashMap::new();
    println!("\n# baseline: raw device -> host -> device (rank 0 -> rank 1, reused buffers)");
    println!("{:>6} {:>10} {:>10}", "size", "time_us", "GB/s");
    for &s in &sizes {
        let bw = raw_dhd(&host4, s);
        raw.insert(s, bw);
        println!("{:>6} {:>10.1} {:>10.3}", label(s), s as f64 / bw / 1e3, bw);
    }

    println!(
        "\n# {:<14} {:>8} {:>2} {:>6} {:>10} {:>8} {:>8} {:>8} {:>9} {:>9}",
        "collective", "mesh", "P", "size", "time_us", "algbw", "busbw", "raw", "bus/raw", "vs_host"
    );
    let mut host_bus: HashMap<(Op, usize, usize), f64> = HashMap::new();
    for op in [Op::AllGather, Op::AllReduce, Op::ReduceScatter] {
        for (kind, mesh) in [
            ("host", &host4),
            ("host", &host8),
            ("shared", &shared4),
            ("shared", &shared8),
        ] {
            let p = mesh.size();
            for &s in &sizes {
                let case = format!("{} {kind} {p} {}", op.name(), label(s));
                if !wanted(&case) {
                    continue;
                }
                let t = time_collective(mesh, op, s);
                let alg = gbps(s, t);
                let bus = alg * op.bus_factor(p);
                let vs_host = if kind == "host" {
                    host_bus.insert((op, p, s), bus);
                    "-".to_string()
                } else {
                    host_bus
                        .get(&(op, p, s))
                        .map_or("-".into(), |h| format!("{:.2}x", bus / h))
                };
                println!(
                    "  {:<14} {:>8} {:>2} {:>6} {:>10.1} {:>8.3} {:>8.3} {:>8.3} {:>8.2}x {:>9}",
                    op.name(),
                    kind,
                    p,
                    label(s),
                    t.as_secs_f64() * 1e6,
                    alg,
                    bus,
                    raw[&s],
                    bus / raw[&s],
                    vs_host
                );
            }
        }
    }
    println!("\nload at end: {}", load());
}
