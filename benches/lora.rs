//! LoRA fine-tuning at real size, beside PyTorch + peft in the same run:
//! SmolLM2-135M's shape (vocab 49152, width 576, 30 layers, 9 / 3 heads,
//! ffn 1536, tied; random weights), LoRA r = 16 (alpha 32) on all seven
//! projections, batch 2 × 512 tokens, AdamW: the step time (best and
//! median of N after one untimed step) and the process's peak RSS, with
//! and without activation recomputation, at P = 1 and 4 simulated ranks;
//! full fine-tuning of the same model at P = 1; and the inferena protocol
//! (float32, input ids 0..127: a forward of 128 tokens, a one-token
//! forward, a full training step at sequence 128).
//!
//! Each configuration runs in its own process (this binary again, or
//! `benches/peers/torch_lora.py`), so each peak RSS is its own. PyTorch
//! runs eager, f32, with as many threads as this machine has cores.
//!
//! `cargo bench --bench lora`; `WGPU_TP_BENCH_STEPS` N (default 2),
//! `WGPU_TP_LORA_CASES=lora1,lora1r,...` a subset, `WGPU_TP_LORA_LAYERS`
//! the depth (quick runs).

use std::process::Command;
use std::time::{Duration, Instant};

use wgpu_tp::models::{CausalLm, LlamaConfig};
use wgpu_tp::nn::{AdamW, LoraConfig, Params};
use wgpu_tp::{Mesh, MeshBuilder};

const TARGETS: [&str; 7] = [
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
];

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn smollm2() -> LlamaConfig {
    let mut c = LlamaConfig::new(49152, 576, 1536, env_usize("WGPU_TP_LORA_LAYERS", 30), 9, 3);
    c.rope.theta = 100000.0;
    c.max_position_embeddings = 2048;
    c.rope.max_position_embeddings = 2048;
    c
}

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb: f64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0.0);
    kb / 1024.0
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Best and median of `times`.
fn best_median(mut times: Vec<f64>) -> (f64, f64) {
    times.sort_by(f64::total_cmp);
    (times[0], times[times.len() / 2])
}

/// Token ids drawn from a fixed generator, next-token targets.
fn batch(rows: usize, seq: usize) -> (Vec<i32>, Vec<i32>) {
    let mut s = 0x2545_f491_4f6c_dd1du64;
    let ids: Vec<i32> = (0..rows * seq)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % 49152) as i32
        })
        .collect();
    let targets = (0..rows * seq)
        .map(|i| ids[(i / seq) * seq + (i % seq + 1) % seq])
        .collect();
    (ids, targets)
}

/// One configuration, in this process: prints `RESULT a b rss`.
fn case(name: &str) -> wgpu_tp::Result<()> {
    let steps = env_usize("WGPU_TP_BENCH_STEPS", 2);
    let (ranks, lora, recompute, rows, seq) = match name {
        "lora1" => (1, true, false, 2, 512),
        "lora1r" => (1, true, true, 2, 512),
        "lora4" => (4, true, false, 2, 512),
        "lora4r" => (4, true, true, 2, 512),
        "full1" => (1, false, false, 2, 512),
        "inferena" => (1, false, false, 1, 128),
        other => panic!("unknown case {other}"),
    };
    let mesh: Mesh = MeshBuilder::new().ranks(ranks).build()?;
    let mut model = CausalLm::new(&mesh, smollm2(), 0)?;
    if lora {
        model.add_lora(&LoraConfig::new(16, 32.0, &TARGETS))?;
    }
    model.set_recompute(recompute);
    let mut opt = AdamW::new(1e-4);
    if name == "inferena" {
        let ids: Vec<i32> = (0..128).collect();
        let mut fwd = Vec::new();
        let mut one = Vec::new();
        for _ in 0..=steps {
            let t = Instant::now();
            wgpu_tp::no_grad(|| model.logits(&ids, 128))?.to_host()?;
            fwd.push(ms(t.elapsed()));
            let t = Instant::now();
            wgpu_tp::no_grad(|| model.logits(&ids[..1], 1))?.to_host()?;
            one.push(ms(t.elapsed()));
        }
        let targets: Vec<i32> = (1..129).collect();
        let mut train = Vec::new();
        for _ in 0..=steps {
            let t = Instant::now();
            model.loss(&ids, &targets, 128)?.backward()?;
            opt.step(&mut model)?;
            model.zero_grad();
            mesh.synchronize()?;
            train.push(ms(t.elapsed()));
        }
        let (f, o, s) = (
            best_median(fwd[1..].to_vec()),
            best_median(one[1..].to_vec()),
            best_median(train[1..].to_vec()),
        );
        println!(
            "RESULT {:.0} {:.0} {:.1} {:.1} {:.0} {:.0} {:.0}",
            f.0,
            f.1,
            o.0,
            o.1,
            s.0,
            s.1,
            peak_rss_mib()
        );
        return Ok(());
    }
    let (ids, targets) = batch(rows, seq);
    let mut times = Vec::new();
    let mut last = 0.0;
    for _ in 0..=steps {
        let t = Instant::now();
        let loss = model.loss(&ids, &targets, seq)?;
        loss.backward()?;
        opt.step(&mut model)?;
        model.zero_grad();
        last = loss.to_host()?[0];
        mesh.synchronize()?;
        times.push(ms(t.elapsed()));
    }
    let (best, median) = best_median(times[1..].to_vec());
    println!(
        "RESULT {best:.0} {median:.0} {:.0} {last:.4}",
        peak_rss_mib()
    );
    Ok(())
}

/// Run `cmd`, return the numbers of its `RESULT` line.
fn result(mut cmd: Command, what: &str) -> Option<Vec<f64>> {
    let out = cmd.output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with("RESULT"));
    if line.is_none() {
        eprintln!(
            "{what}: no result\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    line.map(|l| {
        l.split_whitespace()
            .skip(1)
            .filter_map(|v| v.parse().ok())
            .collect()
    })
}

fn main() {
    if let Ok(name) = std::env::var("WGPU_TP_LORA_CASE") {
        if let Err(e) = case(&name) {
            eprintln!("{name}: {e}");
            std::process::exit(1);
        }
        return;
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let all = "lora1,lora1r,lora4,lora4r,full1,inferena";
    let cases = std::env::var("WGPU_TP_LORA_CASES").unwrap_or(all.into());
    let exe = std::env::current_exe().expect("this bench");
    let peer = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/peers/torch_lora.py");
    let steps = env_usize("WGPU_TP_BENCH_STEPS", 2).to_string();
    let layers = env_usize("WGPU_TP_LORA_LAYERS", 30).to_string();
    println!(
        "SmolLM2-135M shape ({layers} layers), LoRA r 16 on 7 projections, 2 x 512 tokens, AdamW; {threads} threads"
    );
    println!(
        "{:<10} {:>22} {:>22} {:>9} {:>22}",
        "case",
        "wgpu-tp best/median ms",
        "torch best/median ms",
        "ratio",
        "peak RSS ours/torch MiB"
    );
    for name in cases.split(',') {
        let started = Instant::now();
        let mut ours = Command::new(&exe);
        ours.env("WGPU_TP_LORA_CASE", name);
        let mut theirs = Command::new("python3");
        theirs.args([
            peer,
            name,
            "--steps",
            &steps,
            "--threads",
            &threads.to_string(),
            "--layers",
            &layers,
        ]);
        let (Some(a), b) = (result(ours, name), result(theirs, name)) else {
            continue;
        };
        let b = b.unwrap_or_default();
        if name == "inferena" {
            for (i, what) in ["forward 128", "one token", "train step 128"]
                .iter()
                .enumerate()
            {
                let (ab, am) = (a[2 * i], a[2 * i + 1]);
                let (bb, bm) = (
                    b.get(2 * i).copied().unwrap_or(f64::NAN),
                    b.get(2 * i + 1).copied().unwrap_or(f64::NAN),
                );
                println!(
                    "{:<16} {:>10.1} / {:<9.1} {:>10.1} / {:<9.1} {:>8.2}x",
                    what,
                    ab,
                    am,
                    bb,
                    bm,
                    am / bm
                );
            }
            println!(
                "{:<16} peak RSS {:.0} / {:.0} MiB",
                "inferena",
                a[6],
                b.get(6).copied().unwrap_or(f64::NAN)
            );
        } else {
            let (bb, bm, br) = (
                b.first().copied().unwrap_or(f64::NAN),
                b.get(1).copied().unwrap_or(f64::NAN),
                b.get(2).copied().unwrap_or(f64::NAN),
            );
            println!(
                "{:<10} {:>10.0} / {:<9.0} {:>10.0} / {:<9.0} {:>8.2}x {:>10.0} / {:<8.0} ({:.2}x)  loss {:.4}  [{:.0} s]",
                name,
                a[0],
                a[1],
                bb,
                bm,
                a[1] / bm,
                a[2],
                br,
                a[2] / br,
                a[3],
                started.elapsed().as_secs_f64()
            );
        }
    }
}
