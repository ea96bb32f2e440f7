//! The best (pp, dp, tp) layout of GPT-2, a 1.3B and Llama-3-8B's size on
//! 2 to 16 hosts of one GPU each, from the GPT-2 P = 2 run here (the same
//! α–β model as `project.rs`, docs/MATH.md §17–18).
//!
//! Per step of 2 × 256 tokens with AdamW, on `hosts` = pp·dp·tp ranks:
//! - compute: the GPT-2 step's compute at P = 2 scaled by parameters,
//!   split over every rank, times the 1F1B bubble (M + pp − 1)/M with
//!   M = 2/dp micro-batches (the batch has 2 sequences);
//! - tp: GPT-2's measured collectives scaled by depth/pp and width, each
//!   carrying the micro-batch's share, M per stage, times the bubble;
//! - pp: 2(M + pp − 1) boundary sends on the critical path, plus the tied
//!   table's gradient between the first and last stage;
//! - dp: 4 bytes per parameter shard per step (params / (tp·pp)) in 25 MiB
//!   buckets, one all-reduce each.

use super::project::{Run, comm_time, fit_for, link_factor, message};

/// A model: its name, layers, width, parameters and vocabulary.
struct Shape {
    name: &'static str,
    layers: f64,
    hidden: f64,
    params: f64,
    vocab: f64,
}

const SHAPES: [Shape; 3] = [
    Shape {
        name: "gpt2",
        layers: 12.0,
        hidden: 768.0,
        params: 12.0 * 12.0 * 768.0 * 768.0 + 50257.0 * 768.0,
        vocab: 50257.0,
    },
    Shape {
        name: "1.3B",
        layers: 24.0,
        hidden: 2048.0,
        params: 1.311e9,
        vocab: 50257.0,
    },
    Shape {
        name: "llama3-8b",
        layers: 32.0,
        hidden: 4096.0,
        params: 8.03e9,
        vocab: 128256.0,
    },
];

/// The (pp, dp, tp) layouts of `hosts` ranks, powers of two, where the
/// model's layers split into pp stages and the 2-sequence batch into dp.
fn candidates(hosts: usize, layers: usize) -> Vec<(usize, usize, usize)> {
    let pows = |n: usize| (0..).map(|i| 1usize << i).take_while(move |&x| x <= n);
    let mut out = Vec::new();
    for pp in pows(hosts).filter(|&pp| pp <= layers) {
        for dp in pows(hosts / pp).filter(|&dp| dp <= 2) {
            out.push((pp, dp, hosts / (pp * dp)));
        }
    }
    out
}

/// The table from this machine's compute and collective fits; with
/// `WGPU_TP_PROJECT_GPU_STEP_S` (GPT-2's step in seconds on one GPU) a
/// second one for hosts of that GPU, whose per-call and per-byte host costs
/// are taken as PCIe-class (20 µs, 25 GB/s) instead of this machine's CPU
/// staging.
pub fn layouts(base: &Run) {
    table(base, None);
    if let Some(s) = std::env::var("WGPU_TP_PROJECT_GPU_STEP_S")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
    {
        table(base, Some(s));
    }
}

fn table(base: &Run, gpu_step: Option<f64>) {
    let Some((step2, comm2)) = base.gpts.get("gpt2") else {
        return;
    };
    let compute2 = match gpu_step {
        Some(s) => s / 2.0,
        None => step2 - comm_time(&base.fits, comm2),
    };
    let fit = |k: &str| match gpu_step {
        Some(_) => (20e-6, 1.0 / 25e9),
        None => fit_for(&base.fits, k).copied().unwrap_or((0.0, 0.0)),
    };
    match gpu_step {
        None => println!(
            "\n## best (pp, dp, tp) layout per case, 2 × 256 tokens a step (M = 2/dp micro-batches), this machine's compute"
        ),
        Some(s) => println!(
            "\n## the same on hosts of one GPU: GPT-2's step {:.1} ms on one, host costs 20 us + 25 GB/s",
            s * 1e3
        ),
    }
    println!(
        "{:<10} {:>5} {:>5} {:>10} {:>14} {:>10} {:>7}",
        "model", "hosts", "link", "TP-only s", "best", "best s", "vs TP"
    );
    for m in &SHAPES {
        let work = m.params / SHAPES[0].params;
        for hosts in [2usize, 4, 8, 16] {
            for (link, gbit, alpha) in [("10G", 10.0, 50e-6), ("100G", 100.0, 10e-6)] {
                let wire = |k: &str, n: f64, ranks: f64| {
                    let (a, b) = fit(k);
                    a + 2.0 * alpha
                        + b * message(k, n)
                        + link_factor(k, ranks) * n * 8.0 / (gbit * 1e9)
                };
                let time = |(pp, dp, tp): (usize, usize, usize)| -> f64 {
                    let (pp, dp, tp) = (pp as f64, dp as f64, tp as f64);
                    let micro = 2.0 / dp;
                    let bubble = (micro + pp - 1.0) / micro;
                    let compute = compute2 * work * 2.0 / hosts as f64 * bubble;
                    let tp_comm: f64 = if tp > 1.0 {
                        let per_stage: f64 = comm2
                            .iter()
                            .map(|(k, c, nb)| {
                                let calls = c * m.layers / 12.0 / pp * micro;
                                calls * wire(k, nb * m.hidden / 768.0 / (dp * micro), tp)
                            })
                            .sum();
                        per_stage * bubble
                    } else {
                        0.0
                    };
                    let pp_comm = if pp > 1.0 {
                        // Replicated over tp (no sequence parallelism): every
                        // tp rank sends the whole activation.
                        let act = 2.0 * 256.0 * m.hidden * 4.0 / (dp * micro);
                        let tied = m.vocab * m.hidden * 4.0 / tp;
                        2.0 * (micro + pp - 1.0) * wire("Send", act, 2.0) + wire("Send", tied, 2.0)
                    } else {
                        0.0
                    };
                    let dp_comm = if dp > 1.0 {
                        let grad = 4.0 * m.params / (tp * pp);
                        let calls = (grad / (25.0 * 1024.0 * 1024.0)).ceil();
                        calls * wire("AllReduce", grad / calls, dp)
                    } else {
                        0.0
                    };
                    compute + tp_comm + pp_comm + dp_comm
                };
                let tp_only = time((1, 1, hosts));
                let (best, t) = candidates(hosts, m.layers as usize)
                    .into_iter()
                    .map(|l| (l, time(l)))
                    .min_by(|a, b| a.1.total_cmp(&b.1))
                    .unwrap_or(((1, 1, hosts), tp_only));
                println!(
                    "{:<10} {hosts:>5} {link:>5} {tp_only:>10.2} {:>14} {t:>10.2} {:>6.1}×",
                    m.name,
                    format!("pp{}×dp{}×tp{}", best.0, best.1, best.2),
                    tp_only / t
                );
            }
        }
    }
}
