//! The standard training step, timed on P = 1, 2 and 4 simulated ranks
//! (host-staged: each rank its own wgpu device) and on P = 4 sharing one
//! device, against P = 1 measured in the same run.
//!
//! Step: tokens 512, hidden 512, ffn 2048, vocab 4096 —
//! `MlpLanguageModel` forward (vocab-parallel embedding → column → GELU → row
//! → vocab-parallel head → cross-entropy) + backward + SGD step + zero-grad,
//! then `Mesh::synchronize` so the whole step has run. Pipelines compile in
//! the warm-up steps; the figure is the best and the median of N steps.
//!
//! Also prints, per configuration, the split of one step into forward /
//! backward / optimiser (each followed by a synchronize, so these add up to
//! more than the pipelined step), the collectives per step and how many
//! CPUs the process kept busy (on a CPU adapter: whether the step is
//! compute-bound); then, per configuration, the top kernels by total time
//! in one traced step (device timestamps where the adapter has them, see
//! `Mesh::start_trace`).
//!
//! `cargo bench --bench step`; `WGPU_TP_BENCH_STEPS` sets N (default 6).

use std::time::{Duration, Instant};

use wgpu_tp::nn::{MlpLanguageModel, MlpLmConfig, Params, Sgd};
use wgpu_tp::{DeviceLayout, Mesh, MeshBuilder, Trace};

const TOKENS: usize = 512;
const CFG: MlpLmConfig = MlpLmConfig {
    vocab: 4096,
    hidden: 512,
    ffn: 2048,
};

struct Case {
    name: &'static str,
    mesh: Mesh,
}

struct Timing {
    best: Duration,
    median: Duration,
    forward: Duration,
    backward: Duration,
    optim: Duration,
    calls_per_step: u64,
    bytes_per_step: u64,
    allocs_per_step: f64,
    /// Process CPU time over wall time in the timed steps (all threads,
    /// the driver's workers included); `None` off Linux.
    cores_busy: Option<f64>,
    /// One more step, traced.
    trace: Trace,
}

/// Kernels printed per configuration.
const TOP_KERNELS: usize = 8;

fn data() -> (Vec<i32>, Vec<i32>) {
    // A fixed LCG so every configuration sees the same batch.
    let mut s: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 33) % CFG.vocab as u64) as i32
    };
    let ids: Vec<i32> = (0..TOKENS).map(|_| next()).collect();
    let targets: Vec<i32> = (0..TOKENS).map(|_| next()).collect();
    (ids, targets)
}

fn step(mesh: &Mesh, model: &mut MlpLanguageModel, opt: &mut Sgd, ids: &[i32], tg: &[i32]) {
    let loss = model.loss(ids, tg).unwrap();
    loss.backward().unwrap();
    opt.step(model).unwrap();
    model.zero_grad();
    drop(loss);
    mesh.synchronize().unwrap();
}

fn allocations(mesh: &Mesh) -> u64 {
    mesh.devices().iter().map(|g| g.buffers_allocated()).sum()
}

fn time_case(mesh: &Mesh, steps: usize) -> Timing {
    let (ids, tg) = data();
    let mut model = MlpLanguageModel::new(mesh, CFG, 7).unwrap();
    let mut opt = Sgd::new(0.05);
    // Warm-up: pipeline compiles, pool fills.
    for _ in 0..2 {
        step(mesh, &mut model, &mut opt, &ids, &tg);
    }
    mesh.reset_comm_stats();
    let allocs0 = allocations(mesh);
    let mut times = Vec::with_capacity(steps);
    let cpu0 = process_cpu_time();
    for _ in 0..steps {
        let t = Instant::now();
        step(mesh, &mut model, &mut opt, &ids, &tg);
        times.push(t.elapsed());
    }
    let wall: Duration = times.iter().sum();
    let cores_busy = cpu0
        .zip(process_cpu_time())
        .map(|(a, b)| (b - a).as_secs_f64() / wall.as_secs_f64());
    let allocs = allocations(mesh) - allocs0;
    let stats = mesh.comm_stats();
    let calls: u64 = stats.values().map(|c| c.calls).sum();
    let bytes: u64 = stats.values().map(|c| c.bytes).sum();
    times.sort();

    // One step in pieces, each synchronised (best of 2).
    let mut pieces = [Duration::MAX; 3];
    for _ in 0..2 {
        let t = Instant::now();
        let loss = model.loss(&ids, &tg).unwrap();
        mesh.synchronize().unwrap();
        let f = t.elapsed();
        let t = Instant::now();
        loss.backward().unwrap();
        mesh.synchronize().unwrap();
        let b = t.elapsed();
        let t = Instant::now();
        opt.step(&mut model).unwrap();
        model.zero_grad();
        mesh.synchronize().unwrap();
        let o = t.elapsed();
        drop(loss);
        pieces[0] = pieces[0].min(f);
        pieces[1] = pieces[1].min(b);
        pieces[2] = pieces[2].min(o);
    }
    mesh.start_trace().unwrap();
    step(mesh, &mut model, &mut opt, &ids, &tg);
    let trace = mesh.stop_trace().unwrap();
    Timing {
        best: times[0],
        median: times[times.len() / 2],
        forward: pieces[0],
        backward: pieces[1],
        optim: pieces[2],
        calls_per_step: calls / steps as u64,
        bytes_per_step: bytes / steps as u64,
        allocs_per_step: allocs as f64 / steps as f64,
        cores_busy,
        trace,
    }
}

fn print_top_kernels(name: &str, trace: &Trace) {
    println!(
        "\n{name}: top kernels of one traced step ({:.1} ms; kernels {:.1} ms summed over {} ranks)",
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

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// User + system CPU time of this process, all threads (Linux
/// `/proc/self/stat`, in clock ticks of 1/100 s).
fn process_cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i)?.parse::<u64>().ok();
    // utime and stime: fields 14 and 15 of the line; the first after ")" is field 3.
    Some(Duration::from_millis(10 * (ticks(11)? + ticks(12)?)))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let steps = std::env::var("WGPU_TP_BENCH_STEPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6usize)
        .max(1);
    let build = |p: usize, shared: bool| {
        let b = MeshBuilder::new().ranks(p);
        // Named either way: ranks share one device by default.
        let b = if shared {
            b.shared_device()
        } else {
            b.layout(DeviceLayout::Simulated)
        };
        b.build().expect("an adapter")
    };
    let cases = [
        Case {
            name: "P=1",
            mesh: build(1, false),
        },
        Case {
            name: "P=2 host",
            mesh: build(2, false),
        },
        Case {
            name: "P=4 host",
            mesh: build(4, false),
        },
        Case {
            name: "P=4 shared",
            mesh: build(4, true),
        },
    ];
    println!("adapter: {}", cases[0].mesh.adapter_summary());
    println!(
        "step: tokens {TOKENS}, hidden {}, ffn {}, vocab {}; forward + backward + SGD; {steps} timed steps",
        CFG.hidden, CFG.ffn, CFG.vocab
    );
    println!("load at start: {}", load());
    println!(
        "\n{:<11} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>10} {:>10} {:>8} {:>6}",
        "case",
        "best_ms",
        "median_ms",
        "vs_P=1",
        "fwd_ms",
        "bwd_ms",
        "opt_ms",
        "comm/step",
        "MB/step",
        "allocs",
        "cores"
    );
    let mut base = None;
    let mut traces = Vec::new();
    for c in &cases {
        let t = time_case(&c.mesh, steps);
        let base_ms = *base.get_or_insert(ms(t.median));
        println!(
            "{:<11} {:>9.1} {:>9.1} {:>7.2}x {:>8.1} {:>8.1} {:>8.1} {:>10} {:>10.2} {:>8.1} {:>6}",
            c.name,
            ms(t.best),
            ms(t.median),
            ms(t.median) / base_ms,
            ms(t.forward),
            ms(t.backward),
            ms(t.optim),
            t.calls_per_step,
            t.bytes_per_step as f64 / 1e6,
            t.allocs_per_step,
            t.cores_busy.map_or("?".into(), |c| format!("{c:.2}"))
        );
        traces.push((c.name, t.trace));
    }
    println!("\nvs_P=1 = median(P) / median(P=1) (target for P=4: <= 1.2)");
    println!(
        "cores = process CPU time / wall time over the timed steps, of {} CPUs (a step that keeps \
         every CPU busy is compute-bound: only faster kernels make it faster)",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    for (name, trace) in &traces {
        print_top_kernels(name, trace);
    }
    println!("load at end: {}", load());
}
