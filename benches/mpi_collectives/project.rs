//! `--project label=file ...`: fit-based step-time model from saved runs of
//! this bench (`benches/netns.sh` writes them), checked against the
//! rate-limited runs, then projected to GPT-2 124M and a 1.3B configuration
//! at P = 2, 4, 8 over 10 and 100 Gbit/s links, and every (dp, tp) layout
//! of GPT-2, the 1.3B and Llama-3-8B's size on 2 to 16 hosts (`layouts`).
//!
//! Model: a collective of per-rank message n costs α + β·n (fitted per run
//! over the sizes); a step costs its compute plus Σ calls·(α + β·n) over
//! what it communicated. Compute is the step measured on the unlimited link
//! less that model's communication there. Across hosts each collective adds
//! two link latencies (our collectives are two rounds of messages posted at
//! once) and its bytes over the link: 2(P−1)/P·n for all-reduce, (P−1)/P·n
//! for all-gather and reduce-scatter.

use std::collections::BTreeMap;

/// α (s) and β (s/B) per collective.
pub(super) type Fits = BTreeMap<String, (f64, f64)>;

/// (collective, calls, per-rank bytes per call) of one step.
pub(super) type Comm = Vec<(String, f64, f64)>;

#[derive(Default)]
pub(super) struct Run {
    pub(super) fits: Fits,
    /// Step seconds, and (collective, calls, per-rank bytes), per GPT.
    pub(super) gpts: BTreeMap<String, (f64, Comm)>,
}

fn num(word: Option<&str>) -> f64 {
    word.and_then(|w| w.trim_end_matches(':').parse().ok())
        .unwrap_or(f64::NAN)
}

fn parse(text: &str) -> Run {
    let mut run = Run::default();
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["fit", op, _p, "alpha", a, "us", "beta", b, ..] => {
                run.fits
                    .insert(op.to_string(), (num(Some(a)) * 1e-6, num(Some(b)) * 1e-9));
            }
            ["gpt", name, "step", .., ms, "ms"] => {
                run.gpts.entry(name.to_string()).or_default().0 = num(Some(ms)) * 1e-3;
            }
            ["gpt", name, "comm", kind, "calls", c, "per_rank_bytes", b] => {
                let e = run.gpts.entry(name.to_string()).or_default();
                e.1.push((kind.to_string(), num(Some(c)), num(Some(b))));
            }
            _ => {}
        }
    }
    run
}

/// The fit a collective kind is costed with. A point-to-point send of n
/// bytes is costed as the P = 2 all-gather of 2n (each rank then moves n
/// through staging and the link), see [`message`].
pub(super) fn fit_for<'a>(fits: &'a Fits, kind: &str) -> Option<&'a (f64, f64)> {
    let op = match kind {
        "AllGather" | "Send" => "all_gather",
        "ReduceScatter" => "reduce_scatter",
        _ => "all_reduce",
    };
    fits.get(op)
}

pub(super) fn comm_time(fits: &Fits, comm: &[(String, f64, f64)]) -> f64 {
    comm.iter()
        .map(|(k, calls, n)| {
            fit_for(fits, k).map_or(0.0, |(a, b)| calls * (a + b * message(k, *n)))
        })
        .sum()
}

/// The message a fit is read at for `n` bytes of collective `kind`.
pub(super) fn message(kind: &str, n: f64) -> f64 {
    if kind == "Send" { 2.0 * n } else { n }
}

/// Bytes over the link per byte of per-rank message, at world size p (the
/// fits are at P = 2, where these are 1 and 1/2).
pub(super) fn link_factor(kind: &str, p: f64) -> f64 {
    match kind {
        "AllReduce" => 2.0 * (p - 1.0) / p,
        "Send" => 1.0,
        _ => (p - 1.0) / p,
    }
}

pub fn run(args: &[String]) {
    let runs: Vec<(String, Run)> = args
        .iter()
        .filter_map(|a| a.split_once('='))
        .map(|(label, path)| {
            let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
            (label.to_string(), parse(&text))
        })
        .collect();
    let Some((_, base)) = runs.iter().find(|(l, _)| l == "unlimited") else {
        eprintln!("--project needs unlimited=FILE (the run without a rate limit)");
        return;
    };
    println!("## α–β fits (per-rank message n; t = α + β·n)");
    for (label, r) in &runs {
        for (op, (a, b)) in &r.fits {
            println!(
                "{label:<10} {op:<15} α {:>8.1} us  β {:>7.3} ns/B  ({:.3} GB/s)",
                a * 1e6,
                b * 1e9,
                1e-9 / b.max(1e-30)
            );
        }
    }
    println!("\n## the link model: β on a rate-limited link = β unlimited + link bytes / rate");
    for (label, r) in runs.iter().filter(|(l, _)| l != "unlimited") {
        let Some(rate) = bits_per_second(label) else {
            continue;
        };
        for (op, kind) in [
            ("all_reduce", "AllReduce"),
            ("all_gather", "AllGather"),
            ("reduce_scatter", "ReduceScatter"),
        ] {
            let (Some((_, b0)), Some((_, b))) = (base.fits.get(op), r.fits.get(op)) else {
                continue;
            };
            let want = b0 + link_factor(kind, 2.0) * 8.0 / rate;
            println!(
                "{label:<8} {op:<15} β measured {:>8.3} ns/B  model {:>8.3} ns/B  ({:+.1} %)",
                b * 1e9,
                want * 1e9,
                (want - b) / b * 100.0
            );
        }
    }
    println!("\n## model vs measured step (compute from the unlimited run)");
    let mut worst: f64 = 0.0;
    for (name, (step, comm)) in &base.gpts {
        let compute = step - comm_time(&base.fits, comm);
        println!(
            "{name}: step {:.1} ms unlimited, compute {:.1} ms",
            step * 1e3,
            compute * 1e3
        );
        for (label, r) in runs.iter().filter(|(l, _)| l != "unlimited") {
            let Some((measured, _)) = r.gpts.get(name) else {
                continue;
            };
            let predicted = compute + comm_time(&r.fits, comm);
            let err = (predicted - measured) / measured;
            worst = worst.max(err.abs());
            println!(
                "  {label:<8} measured {:>9.1} ms  predicted {:>9.1} ms  ({:+.1} %) {}",
                measured * 1e3,
                predicted * 1e3,
                err * 100.0,
                if err.abs() <= 0.25 {
                    "within 25 %"
                } else {
                    "OFF by more than 25 %"
                }
            );
        }
    }
    println!("worst model error {:.1} %", worst * 100.0);
    project(base);
    super::layouts::layouts(base);
}

/// "100mbit", "1gbit", "10gbit" (tc's spelling) in bits per second.
fn bits_per_second(label: &str) -> Option<f64> {
    let (n, scale) = if let Some(n) = label.strip_suffix("gbit") {
        (n, 1e9)
    } else {
        (label.strip_suffix("mbit")?, 1e6)
    };
    n.parse::<f64>().ok().map(|v| v * scale)
}

/// GPT-2 124M (measured here at P = 2) and a 1.3B configuration.
fn project(base: &Run) {
    let Some((step2, comm2)) = base.gpts.get("gpt2") else {
        println!("\n(no gpt2 run: set WGPU_TP_BENCH_GPT2=1 for the projection)");
        return;
    };
    let compute2 = step2 - comm_time(&base.fits, comm2);
    // 6·N·tokens with N = 12·L·H² + V·H: GPT-2 124M 123.5M, the 1.3B 1311M.
    let n = |l: f64, h: f64| 12.0 * l * h * h + 50257.0 * h;
    let flops_ratio = n(24.0, 2048.0) / n(12.0, 768.0);
    println!(
        "\n## projected step, 2 × 256 tokens, AdamW (per-rank compute from GPT-2 at P = 2 here: {:.2} s)",
        compute2
    );
    println!(
        "assumptions: compute splits evenly over P; the 1.3B (24 layers, hidden 2048) costs {flops_ratio:.1}× the FLOPs,"
    );
    println!(
        "  twice the collectives, each {:.2}× the bytes; host staging and software costs per call and per byte",
        2048.0 / 768.0
    );
    println!(
        "  as fitted on the unlimited link; link α 50 us at 10 Gbit/s (TCP), 10 us at 100 Gbit/s (RDMA class)"
    );
    println!(
        "{:<8} {:>2} {:>9} {:>10} {:>10} {:>10} {:>6}",
        "model", "P", "link", "compute s", "comm s", "step s", "comm %"
    );
    for (model, work, calls, bytes) in [
        ("gpt2", 1.0, 1.0, 1.0),
        ("1.3B", flops_ratio, 2.0, 2048.0 / 768.0),
    ] {
        for p in [2.0f64, 4.0, 8.0] {
            for (link, gbit, alpha) in [("10G", 10.0, 50e-6), ("100G", 100.0, 10e-6)] {
                let compute = compute2 * work * 2.0 / p;
                let comm: f64 = comm2
                    .iter()
                    .map(|(k, c, nb)| {
                        let (a, b) = fit_for(&base.fits, k).copied().unwrap_or((0.0, 0.0));
                        let nb = nb * bytes;
                        c * calls
                            * (a + 2.0 * alpha
                                + b * nb
                                + link_factor(k, p) * nb * 8.0 / (gbit * 1e9))
                    })
                    .sum();
                let step = compute + comm;
                println!(
                    "{model:<8} {p:>2} {link:>9} {compute:>10.2} {comm:>10.2} {step:>10.2} {:>6.0}",
                    100.0 * comm / step
                );
            }
        }
    }
}
