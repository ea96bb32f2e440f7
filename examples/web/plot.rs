//! The loss curve on the page's `<canvas id="plot">`.

use wasm_bindgen::JsCast;
use web_sys::{CanvasRenderingContext2d, HtmlCanvasElement};

use crate::page::{Fail, Page};

/// A round tick spacing giving about `n` ticks over `span`.
fn tick(span: f64, n: f64) -> f64 {
    let raw = span / n;
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|&t| t >= raw)
        .unwrap_or(10.0 * p)
}

/// Draw the loss curve (and its 10-step mean) over `steps` on the canvas.
pub fn plot(page: &Page, losses: &[f32], steps: usize, ln_vocab: f64) -> Result<(), Fail> {
    let canvas: HtmlCanvasElement = page
        .el("plot")?
        .dyn_into()
        .map_err(|_| "#plot is not a canvas")?;
    let dpr = web_sys::window()
        .map_or(1.0, |w| w.device_pixel_ratio())
        .max(1.0);
    let (w, h) = (
        canvas.client_width().max(300) as f64,
        canvas.client_height().max(200) as f64,
    );
    canvas.set_width((w * dpr) as u32);
    canvas.set_height((h * dpr) as u32);
    let ctx: CanvasRenderingContext2d = canvas
        .get_context("2d")?
        .ok_or("no 2d context")?
        .dyn_into()
        .map_err(|_| "not a 2d context")?;
    ctx.set_transform(dpr, 0.0, 0.0, dpr, 0.0, 0.0)?;
    ctx.clear_rect(0.0, 0.0, w, h);
    let (l, r, t, b) = (58.0, w - 16.0, 14.0, h - 44.0);
    let hi = losses.iter().map(|&v| v as f64).fold(ln_vocab, f64::max);
    let lo = losses.iter().map(|&v| v as f64).fold(ln_vocab, f64::min);
    let dy = tick(hi - lo, 5.0);
    let (y0, y1) = (
        ((lo / dy).floor() - 1.0).max(0.0) * dy,
        (hi / dy).ceil() * dy,
    );
    let x_max = (steps.max(2) - 1) as f64;
    let px = |s: f64| l + (r - l) * s / x_max;
    let py = |v: f64| b - (b - t) * (v - y0) / (y1 - y0);
    ctx.set_font("12px system-ui, sans-serif");
    ctx.set_line_width(1.0);
    // Grid and tick labels.
    ctx.set_text_align("right");
    ctx.set_text_baseline("middle");
    let mut v = y0;
    while v <= y1 + 1e-9 {
        ctx.set_stroke_style_str("#e5e7eb");
        ctx.begin_path();
        ctx.move_to(l, py(v));
        ctx.line_to(r, py(v));
        ctx.stroke();
        ctx.set_fill_style_str("#4b5563");
        ctx.fill_text(&format!("{v:.1}"), l - 6.0, py(v))?;
        v += dy;
    }
    ctx.set_text_align("center");
    ctx.set_text_baseline("top");
    let dx = tick(x_max, 6.0).max(1.0);
    let mut s = 0.0;
    while s <= x_max + 1e-9 {
        ctx.set_stroke_style_str("#e5e7eb");
        ctx.begin_path();
        ctx.move_to(px(s), t);
        ctx.line_to(px(s), b);
        ctx.stroke();
        ctx.fill_text(&format!("{s}"), px(s), b + 6.0)?;
        s += dx;
    }
    // Axes and their titles.
    ctx.set_stroke_style_str("#374151");
    ctx.begin_path();
    ctx.move_to(l, t);
    ctx.line_to(l, b);
    ctx.line_to(r, b);
    ctx.stroke();
    ctx.set_fill_style_str("#111827");
    ctx.fill_text("training step", (l + r) / 2.0, b + 24.0)?;
    ctx.save();
    ctx.translate(16.0, (t + b) / 2.0)?;
    ctx.rotate(-std::f64::consts::FRAC_PI_2)?;
    ctx.fill_text("cross-entropy loss (nats)", 0.0, -4.0)?;
    ctx.restore();
    // ln(vocab): the loss of a uniform guess.
    ctx.set_stroke_style_str("#9ca3af");
    ctx.set_line_dash(&js_sys::Array::of2(&6.into(), &4.into()))?;
    ctx.begin_path();
    ctx.move_to(l, py(ln_vocab));
    ctx.line_to(r, py(ln_vocab));
    ctx.stroke();
    ctx.set_line_dash(&js_sys::Array::new())?;
    ctx.set_fill_style_str("#6b7280");
    ctx.set_text_align("right");
    ctx.set_text_baseline("bottom");
    ctx.fill_text(
        &format!("ln(vocab) = {ln_vocab:.2}: a uniform guess"),
        r - 4.0,
        py(ln_vocab) - 3.0,
    )?;
    // The losses, then their running mean.
    let mean: Vec<f64> = (0..losses.len())
        .map(|i| {
            let w = &losses[i.saturating_sub(9)..=i];
            w.iter().map(|&v| v as f64).sum::<f64>() / w.len() as f64
        })
        .collect();
    let raw: Vec<f64> = losses.iter().map(|&v| v as f64).collect();
    for (series, colour, width) in [(&raw, "#93c5fd", 1.5), (&mean, "#1d4ed8", 2.5)] {
        ctx.set_stroke_style_str(colour);
        ctx.set_line_width(width);
        ctx.begin_path();
        for (i, &v) in series.iter().enumerate() {
            if i == 0 {
                ctx.move_to(px(0.0), py(v))
            } else {
                ctx.line_to(px(i as f64), py(v))
            }
        }
        ctx.stroke();
    }
    // Legend.
    ctx.set_text_align("left");
    ctx.set_text_baseline("middle");
    for (i, (label, colour)) in [
        ("loss per step", "#93c5fd"),
        ("mean of the last 10 steps", "#1d4ed8"),
    ]
    .iter()
    .enumerate()
    {
        let y = b - 32.0 + 18.0 * i as f64;
        ctx.set_fill_style_str(colour);
        ctx.fill_rect(l + 14.0, y - 2.0, 18.0, 4.0);
        ctx.set_fill_style_str("#111827");
        ctx.fill_text(label, l + 38.0, y)?;
    }
    Ok(())
}
