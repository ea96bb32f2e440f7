//! The browser demo (see examples/web/README.md): the `gpt` example's
//! character-level GPT on four tensor-parallel ranks that share the page's
//! one WebGPU device. It checks step 0 (loss and every gradient) against one
//! rank, trains with AdamW while plotting the loss, shows what one training
//! step communicates, streams a sampled continuation into the page, then
//! quantizes the trained weights to llama.cpp's Q8_0 and Q4_0 blocks and
//! continues the prompt greedily with each beside f32. Every
//! readback is `async`; `index.html` calls [`run`], which sets
//! `document.body.dataset.done` to `"1"` at the end, or to `"error"` with the
//! message on the page. `page.rs` holds the DOM side, `plot.rs` the canvas.
#![cfg(target_arch = "wasm32")]

use wasm_bindgen::prelude::*;
use web_time::Instant;
use wgpu_tp::models::{CausalLm, Gpt2Config};
use wgpu_tp::nn::{AdamW, Params, Sampling};
use wgpu_tp::quant::QuantType;
use wgpu_tp::{DType, Mesh, MeshBuilder, no_grad};

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
/// The quantized formats the trained weights are kept in, and the greedy
/// characters each continues the prompt by.
const QUANTS: [QuantType; 2] = [QuantType::Q8_0, QuantType::Q4_0];
const GREEDY_LEN: usize = 80;
/// Q8_0's next-character logits stay within this relative error of f32's
/// (half an 8-bit step of each block's largest weight: about 0.6 %).
const Q8_TOL: f64 = 0.02;

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

/// A copy of `model`'s trained weights on `mesh`, kept in f32 or in `q`:
/// built in f32, given the trained values, then quantized on the host with
/// llama.cpp's reference quantizer (awaited: the f32 values are read back
/// first).
async fn copy_to(
    mesh: &Mesh,
    cfg: &Gpt2Config,
    model: &CausalLm,
    q: Option<QuantType>,
) -> Result<CausalLm, Fail> {
    let mut copy = CausalLm::new(mesh, cfg.clone(), SEED)?;
    for ((_, to), (_, from)) in copy
        .named_parameters_mut()
        .into_iter()
        .zip(model.named_parameters())
    {
        to.load_master(&from.master_async().await?)?;
    }
    if let Some(q) = q {
        copy.store_weights_as_async(DType::Quant(q)).await?;
    }
    Ok(copy)
}

/// The weight matrices' formats (`q8_0 × 10`) and their bytes, as one rank
/// holding the whole model would keep them.
fn weight_matrices(model: &CausalLm) -> (String, u64) {
    let mut kinds: Vec<(DType, usize)> = Vec::new();
    let mut bytes = 0;
    for (_, p) in model.named_parameters() {
        if p.shape().len() < 2 {
            continue;
        }
        let dtype = p.value.dtype();
        bytes += dtype.storage_bytes(p.shape()) as u64;
        match kinds.iter_mut().find(|(k, _)| *k == dtype) {
            Some((_, n)) => *n += 1,
            None => kinds.push((dtype, 1)),
        }
    }
    let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} × {n}")).collect();
    (kinds.join(", "), bytes)
}

/// The logits of the prompt's last position.
async fn next_logits(model: &CausalLm, prompt: &[i32]) -> Result<Vec<f32>, Fail> {
    let logits = no_grad(|| model.logits(prompt, prompt.len()))?;
    let all = logits.to_host_async().await?;
    let vocab = model.vocab_size();
    Ok(all[all.len() - vocab..].to_vec())
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

    // The trained weights in llama.cpp's blocks, dequantized inside the
    // products, beside f32: all three on four ranks of a device opened
    // with WebGPU's default limits (what every browser guarantees).
    page.status("Opening a 4-rank mesh at WebGPU's default limits…")?;
    let qmesh = MeshBuilder::new()
        .ranks(RANKS)
        .limits(wgpu::Limits::default())
        .build_async()
        .await?;
    page.status("Greedy decoding with the f32 weights…")?;
    let decode = |text: &[i32]| -> String { text.iter().map(|&t| vocab.0[t as usize]).collect() };
    let wide = copy_to(&qmesh, &cfg, &model, None).await?;
    let (f32_kinds, f32_bytes) = weight_matrices(&wide);
    let f32_next = next_logits(&wide, &prompt).await?;
    let t0 = Instant::now();
    let want = wide
        .generate_async(&prompt, GREEDY_LEN, Sampling::Greedy)
        .await?;
    let f32_ms = t0.elapsed().as_secs_f64() * 1e3 / GREEDY_LEN as f64;
    drop(wide);
    let mut rows = format!(
        "<tr><td>{f32_kinds}</td><td>{}</td><td>—</td><td>—</td><td>{f32_ms:.0}</td><td>{}</td></tr>",
        human_bytes(f32_bytes),
        esc(&decode(&want))
    );
    page.html("quant-table", &rows)?;
    let mut quant_ok = true;
    for q in QUANTS {
        page.status(&format!(
            "Quantizing the trained weights to {q} and decoding…"
        ))?;
        yield_to_browser().await;
        let quant = copy_to(&qmesh, &cfg, &model, Some(q)).await?;
        let (kinds, bytes) = weight_matrices(&quant);
        let e = rel_err(&next_logits(&quant, &prompt).await?, &f32_next);
        let t0 = Instant::now();
        let got = quant
            .generate_async(&prompt, GREEDY_LEN, Sampling::Greedy)
            .await?;
        let ms = t0.elapsed().as_secs_f64() * 1e3 / GREEDY_LEN as f64;
        let same = got.iter().zip(&want).take_while(|(a, b)| a == b).count();
        // Q8_0 is held to its rounding; every format must generate.
        let ok = got.len() == GREEDY_LEN && e.is_finite() && (q != QuantType::Q8_0 || e <= Q8_TOL);
        quant_ok &= ok;
        rows += &format!(
            "<tr><td>{kinds}</td><td>{}<br><span class=note>{:.1}× smaller</span></td><td>{e:.1e}{}</td><td>{same} of {GREEDY_LEN}</td><td>{ms:.0}</td><td>{}</td></tr>",
            human_bytes(bytes),
            f32_bytes as f64 / bytes as f64,
            if ok {
                ""
            } else {
                " <span class=fail>FAIL</span>"
            },
            esc(&decode(&got))
        );
        page.html("quant-table", &rows)?;
        log!(
            "{q}: {kinds}, {bytes} bytes, next-character logits {e:.2e} from f32's, {same}/{GREEDY_LEN} greedy characters as f32's, {ms:.1} ms/character: {PROMPT}{}",
            decode(&got)
        );
    }
    page.html(
        "quant-verdict",
        &format!(
            "Q8_0's next-character logits within {Q8_TOL} (relative) of f32's and every format generating {GREEDY_LEN} characters: <span class={}>{}</span>",
            if quant_ok { "pass" } else { "fail" },
            if quant_ok { "PASS" } else { "FAIL" }
        ),
    )?;
    let ok = parity_ok && fell && quant_ok;
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
