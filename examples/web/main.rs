//! The browser demo (see examples/web/README.md): the `gpt` example's
//! character-level GPT on four tensor-parallel ranks that share the page's
//! one WebGPU device. It checks step 0 (loss and every gradient) against one
//! rank, trains with AdamW while plotting the loss, shows what one training
//! step communicates, and streams a sampled continuation into the page. Every
//! readback is `async`; `index.html` calls [`run`], which sets
//! `document.body.dataset.done` to `"1"` at the end, or to `"error"` with the
//! message on the page. `page.rs` holds the DOM side, `plot.rs` the canvas.
#![cfg(target_arch = "wasm32")]

use wasm_bindgen::prelude::*;
use web_time::Instant;
use wgpu_tp::MeshBuilder;
use wgpu_tp::models::{CausalLm, Gpt2Config};
use wgpu_tp::nn::{AdamW, Params, Sampling};

use page::{Fail, Page, comm_rows, esc, human_bytes, url_param, yield_to_browser};

const TEXT: &str = include_str!("../data/genesis_kjv.txt");
const RANKS: usize = 4;
const LAYERS: usize = 2;
const HIDDEN: usize = 64;
const HEADS: usize = 4;
/// Characters per training sequence, and sequences per step.
const SEQ: usize = 64;
const BATCH: usize = 8;
/// Training steps and learning rate (the page's `?steps=N&lr=X` overrides them).
const STEPS: usize = 80;
const LR: f32 = 3e-3;
const SEED: u64 = 0;
const PARITY_TOL: f64 = 1e-4;
const PROMPT: &str = "And God said";
const SAMPLE_LEN: usize = 200;
const SAMPLING: Sampling = Sampling::TopK {
    k: 10,
    temperature: 0.8,
    seed: SEED,
};

macro_rules! log {
    ($($t:tt)*) => { web_sys::console::log_1(&format!($($t)*).into()) };
}

mod page;
mod plot;

/// Norm-wise relative error of `got` against `want` (infinite on a length
/// mismatch or a non-finite value).
fn rel_err(got: &[f32], want: &[f32]) -> f64 {
    if got.len() != want.len() || got.iter().any(|v| !v.is_finite()) {
        return f64::INFINITY;
    }
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (g, w) in got.iter().zip(want) {
        let d = *g as f64 - *w as f64;
        num += d * d;
        den += (*w as f64) * (*w as f64);
    }
    num.sqrt() / den.sqrt().max(1e-30)
}

/// Characters ↔ ids (the sorted distinct characters of the text).
struct Vocab(Vec<char>);

impl Vocab {
    fn new(text: &str) -> Vocab {
        let mut chars: Vec<char> = text.chars().collect();
        chars.sort_unstable();
        chars.dedup();
        Vocab(chars)
    }

    fn encode(&self, text: &str) -> Vec<i32> {
        text.chars()
            .filter_map(|c| self.0.binary_search(&c).ok())
            .map(|i| i as i32)
            .collect()
    }
}

/// SplitMix64, to pick training windows (as `examples/common`).
struct Windows(u64);

impl Windows {
    fn next(&mut self, below: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % below as u64) as usize
    }

    /// `batch` random windows of `seq + 1` tokens: inputs and next-token targets.
    fn batch(&mut self, data: &[i32], batch: usize, seq: usize) -> (Vec<i32>, Vec<i32>) {
        let (mut ids, mut targets) = (Vec::new(), Vec::new());
        for _ in 0..batch {
            let at = self.next(data.len() - seq - 1);
            ids.extend_from_slice(&data[at..at + seq]);
            targets.extend_from_slice(&data[at + 1..at + seq + 1]);
        }
        (ids, targets)
    }
}

async fn demo(page: &Page) -> Result<bool, Fail> {
    let started = Instant::now();
    let steps = url_param("steps")
        .filter(|&n: &usize| n >= 2)
        .unwrap_or(STEPS);
    let lr = url_param("lr").filter(|&v: &f32| v > 0.0).unwrap_or(LR);
    let vocab = Vocab::new(TEXT);
    let data = vocab.encode(TEXT);
    let prompt = vocab.encode(PROMPT);
    let cfg = Gpt2Config::new(
        vocab.0.len(),
        SEQ.max(prompt.len() + SAMPLE_LEN),
        HIDDEN,
        HEADS,
        LAYERS,
    );
    let ln_vocab = (cfg.vocab_size as f64).ln();
    let mut windows = Windows(SEED);
    let (ids, targets) = windows.batch(&data, BATCH, SEQ);

    // Step 0 on one rank: the reference for the parity check.
    page.status("Requesting a WebGPU device for the one-rank reference…")?;
    let serial_mesh = MeshBuilder::new().ranks(1).build_async().await?;
    let adapter = serial_mesh.adapter_summary();
    // Browsers often withhold the adapter's name (index.html adds what they do tell).
    let adapter = match adapter.trim() {
        a if a.starts_with('(') => format!("WebGPU adapter {a}"),
        a => a.to_string(),
    };
    page.text("adapter", &adapter)?;
    let serial = CausalLm::new(&serial_mesh, cfg.clone(), SEED)?;
    page.status("Step 0 on one rank (the first run compiles the shaders)…")?;
    let loss = serial.loss(&ids, &targets, SEQ)?;
    loss.backward()?;
    let loss_1 = loss.to_host_async().await?[0];

    page.status("Building the 4-rank mesh…")?;
    let mesh = MeshBuilder::new().ranks(RANKS).build_async().await?;
    let mut model = CausalLm::new(&mesh, cfg.clone(), SEED)?;
    let n_params: usize = model
        .named_parameters()
        .iter()
        .map(|(_, p)| p.shape().iter().product::<usize>())
        .sum();
    page.text(
        "mesh",
        &format!(
            "{} ranks sharing one WebGPU device ({:?} layout): collectives are copies on the GPU",
            mesh.size(),
            mesh.layout()
        ),
    )?;
    page.text("model", &format!("{LAYERS} layers · hidden {HIDDEN} · {HEADS} heads · vocab {} · context {} · {n_params} parameters", cfg.vocab_size, cfg.n_positions))?;
    page.text("data", &format!("Genesis 1–11 (KJV), {} characters; {steps} steps of {BATCH} × {SEQ} characters, AdamW lr {lr}", data.len()))?;
    page.status("Step 0 on four ranks, then every gradient against one rank…")?;
    let loss = model.loss(&ids, &targets, SEQ)?;
    loss.backward()?;
    let loss_p = loss.to_host_async().await?[0];
    let mut worst = rel_err(&[loss_p], &[loss_1]);
    let mut rows =
        format!("<tr><td>loss</td><td>{loss_p:.6} vs {loss_1:.6}</td><td>{worst:.2e}</td></tr>");
    let reference = serial.named_parameters();
    for (i, (name, p)) in model.named_parameters().into_iter().enumerate() {
        let e = match (
            p.master_grad_async().await?,
            reference[i].1.master_grad_async().await?,
        ) {
            (Some(g), Some(gs)) => rel_err(&g, &gs),
            _ => f64::INFINITY,
        };
        worst = worst.max(e);
        rows += &format!(
            "<tr><td>grad {}</td><td>{:?}</td><td>{e:.2e}</td></tr>",
            esc(&name),
            p.shape()
        );
    }
    drop(reference);
    drop(serial);
    drop(serial_mesh);
    let parity_ok = worst <= PARITY_TOL;
    page.html("parity-table", &rows)?;
    page.html(
        "parity-verdict",
        &format!(
            "Loss {loss_p:.6} (P = 4) vs {loss_1:.6} (P = 1); worst relative error over the loss and all {} gradients: <b>{worst:.2e}</b> (tolerance {PARITY_TOL:.0e}) <span class={}>{}</span>",
            model.named_parameters().len(),
            if parity_ok { "pass" } else { "fail" },
            if parity_ok { "PASS" } else { "FAIL" }
        ),
    )?;
    log!(
        "parity: worst {worst:.2e} {}",
        if parity_ok { "PASS" } else { "FAIL" }
    );

    let mut opt = AdamW::new(lr);
    opt.step(&mut model)?;
    model.zero_grad();
    let mut losses = vec![loss_p];
    plot::plot(page, &losses, steps, ln_vocab)?;
    let mut step_ms = Vec::new();
    for step in 1..steps {
        page.status(&format!("Training: step {}/{steps}…", step + 1))?;
        yield_to_browser().await;
        let (ids, targets) = windows.batch(&data, BATCH, SEQ);
        let t0 = Instant::now();
        mesh.reset_comm_stats();
        let loss = model.loss(&ids, &targets, SEQ)?;
        loss.backward()?;
        opt.step(&mut model)?;
        model.zero_grad();
        let loss = loss.to_host_async().await?[0];
        step_ms.push(t0.elapsed().as_secs_f64() * 1e3);
        if step == 1 {
            page.html("comm-table", &comm_rows(&mesh.comm_stats()))?;
        }
        losses.push(loss);
        plot::plot(page, &losses, steps, ln_vocab)?;
        let mean_ms = step_ms.iter().sum::<f64>() / step_ms.len() as f64;
        page.text(
            "train-stats",
            &format!(
                "step {}/{steps} · loss {loss:.4} · {mean_ms:.0} ms per step",
                step + 1
            ),
        )?;
    }
    let tail = &losses[losses.len().saturating_sub(5)..];
    let last = tail.iter().sum::<f32>() / tail.len() as f32;
    let fell = last < 0.8 * losses[0];
    // The first step after step 0 compiles nothing new, but keep it out of the mean anyway.
    let warm = &step_ms[step_ms.len().min(1)..];
    let ms = warm.iter().sum::<f64>() / warm.len().max(1) as f64;
    page.html(
        "train-stats",
        &format!(
            "{steps} steps · loss {:.4} → {last:.4} (mean of the last 5) <span class={}>{}</span> · <b>{ms:.0} ms per step</b> (forward + backward + AdamW + loss readback, P = {RANKS})",
            losses[0],
            if fell { "pass" } else { "fail" },
            if fell { "fell" } else { "did not fall below 0.8× the first" }
        ),
    )?;
    log!(
        "training: {steps} steps, loss {:.4} -> {last:.4}, {ms:.1} ms/step",
        losses[0]
    );

    page.status("Sampling with the key/value cache…")?;
    mesh.reset_comm_stats();
    let mut text = String::new();
    let t0 = Instant::now();
    model
        .generate_with_async(&prompt, SAMPLE_LEN, SAMPLING, |tok| {
            text.push(vocab.0[tok as usize]);
            let _ = page.text("sample-out", &text);
            Ok(())
        })
        .await?;
    let gen_ms = t0.elapsed().as_secs_f64() * 1e3 / SAMPLE_LEN as f64;
    let dec = mesh.comm_stats();
    let (calls, bytes) = dec
        .values()
        .fold((0, 0), |(c, b), v| (c + v.calls, b + v.bytes));
    page.text(
        "sample-stats",
        &format!("{SAMPLE_LEN} characters, {gen_ms:.0} ms each ({SAMPLING:?}); decoding communicated {calls} collectives, {} in all", human_bytes(bytes)),
    )?;
    log!("sample: {PROMPT}{text}");
    let ok = parity_ok && fell;
    page.html(
        "summary",
        &format!(
            "<span class={}>{}</span> in {:.1} s",
            if ok { "pass" } else { "fail" },
            if ok { "PASS" } else { "FAIL" },
            started.elapsed().as_secs_f64()
        ),
    )?;
    Ok(ok)
}

/// Run the demo: called by index.html once the module is loaded.
#[wasm_bindgen]
pub async fn run() -> Result<(), JsValue> {
    std::panic::set_hook(Box::new(|info| {
        if let Ok(page) = Page::new() {
            page.fail(&format!("panic: {info}"));
        }
    }));
    let page = Page::new().map_err(|e| JsValue::from_str(&e.0))?;
    match demo(&page).await {
        Ok(ok) => {
            let _ = page.status("Done.");
            page.body_attr("data-verdict", if ok { "pass" } else { "fail" });
            page.body_attr("data-done", "1");
            Ok(())
        }
        Err(Fail(msg)) => {
            let hint = if msg.contains("no GPU adapter") {
                "\n\nThe browser offered no WebGPU adapter: see chrome://gpu (on Linux, Chrome \
                 needs --enable-unsafe-webgpu; headless Chromium also --enable-unsafe-swiftshader)."
            } else {
                ""
            };
            page.fail(&format!("error: {msg}{hint}"));
            Err(JsValue::from_str(&msg))
        }
    }
}
