//! Helpers the examples share: parity errors, a loss sparkline, byte sizes,
//! and the environment set-up every example wants.

#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, Ordering};

static QUIET: AtomicBool = AtomicBool::new(false);

/// Silence [`say!`] in this process: with `--mpi` every process runs the
/// example, and only process 0 reports.
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// Whether [`say!`] is silenced.
pub fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// `println!` unless this process was silenced with [`set_quiet`].
macro_rules! say {
    ($($t:tt)*) => {
        if !$crate::common::quiet() {
            println!($($t)*);
        }
    };
}
#[allow(unused_imports)]
pub(crate) use say;

/// Norm-wise relative error of `got` against `want` (infinite on a length
/// mismatch or a non-finite value).
pub fn rel_err(got: &[f32], want: &[f32]) -> f64 {
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

/// A one-line chart of `values`.
pub fn sparkline(values: &[f32]) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let lo = values.iter().copied().fold(f32::INFINITY, f32::min);
    let hi = values.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    values
        .iter()
        .map(|&v| {
            let t = if hi > lo { (v - lo) / (hi - lo) } else { 0.0 };
            BARS[((t * 7.0).round() as usize).min(7)]
        })
        .collect()
}

/// `b` bytes as B / KiB / MiB.
pub fn human_bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 20 => format!("{:.2} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

/// Give Vulkan loaders the `XDG_RUNTIME_DIR` they warn without. Call first
/// thing in `main`, before any thread starts.
pub fn quiet_vulkan_loader() {
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        let dir = std::env::temp_dir().join("wgpu-tp-xdg");
        let _ = std::fs::create_dir_all(&dir);
        // SAFETY: called before any other thread exists.
        unsafe { std::env::set_var("XDG_RUNTIME_DIR", dir) };
    }
}

/// The layout the flags `--shared-device` and `--device-per-rank` ask for
/// (neither: the adapter's default, `DeviceLayout::default_for`).
pub fn layout(shared: bool, per_rank: bool) -> Option<wgpu_tp::DeviceLayout> {
    match (shared, per_rank) {
        (true, _) => Some(wgpu_tp::DeviceLayout::SharedDevice),
        (false, true) => Some(wgpu_tp::DeviceLayout::Simulated),
        (false, false) => None,
    }
}

/// The mesh an example runs on: `ranks` simulated ranks laid out as
/// `layout` says (else the adapter's default), or one rank per MPI process
/// with `mpi`.
pub fn build_mesh(
    ranks: usize,
    layout: Option<wgpu_tp::DeviceLayout>,
    mpi: bool,
) -> wgpu_tp::Result<wgpu_tp::Mesh> {
    let b = wgpu_tp::MeshBuilder::new().ranks(ranks);
    match (mpi, layout) {
        (true, _) => b.mpi().build(),
        (false, Some(l)) => b.layout(l).build(),
        (false, None) => b.build(),
    }
}

/// A progress bar over `steps`, hidden where [`say!`] is silenced.
pub fn progress(steps: usize) -> indicatif::ProgressBar {
    if quiet() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(steps as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "  {bar:30} {pos:>4}/{len} steps  loss {msg}  [{elapsed}]",
        )
        .expect("a valid template"),
    );
    bar
}

/// Print what each collective moved in `stats`.
pub fn print_comm(stats: &wgpu_tp::CommStats) {
    if stats.is_empty() {
        say!("  none (one rank)");
    }
    for (kind, c) in stats {
        say!(
            "  {:<14} {:>3} calls  {:>10} total ({} per call)",
            format!("{kind:?}"),
            c.calls,
            human_bytes(c.bytes),
            human_bytes(c.bytes / c.calls.max(1))
        );
    }
}

/// Prints the sparkline and the loss summary: the first loss, the mean of
/// the last `tail`, and whether it fell below `ratio` × the first (PASS) or
/// not (FAIL). Returns whether it fell.
pub fn report_loss(losses: &[f32], vocab: usize, tail: usize, ratio: f32) -> bool {
    say!("  {}", sparkline(losses));
    let Some(&first) = losses.first() else {
        return false;
    };
    let tail = &losses[losses.len().saturating_sub(tail)..];
    let last = tail.iter().sum::<f32>() / tail.len() as f32;
    let fell = losses.len() > 1 && last < ratio * first;
    say!(
        "  ln(vocab) = {:.4}; loss {first:.4} → {last:.4} (mean of the last {}): {}",
        (vocab as f32).ln(),
        tail.len(),
        if fell {
            format!("fell below {ratio}× the first, PASS")
        } else {
            format!("did not fall below {ratio}× the first, FAIL")
        }
    );
    fell
}

/// The tiny GPT-2 shipped with the crate (`examples/data/tiny-gpt2`, written
/// by `examples/train_tiny.rs`), found from the manifest so it works from any
/// working directory.
pub fn shipped_model_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data/tiny-gpt2")
}

/// SplitMix64, to pick training windows.
pub struct Windows(pub u64);

impl Windows {
    /// A draw in `0..below`.
    pub fn next(&mut self, below: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % below as u64) as usize
    }

    /// `batch` random windows of `seq + 1` tokens: inputs and next-token targets.
    pub fn batch(&mut self, data: &[i32], batch: usize, seq: usize) -> (Vec<i32>, Vec<i32>) {
        let (mut ids, mut targets) = (Vec::new(), Vec::new());
        for _ in 0..batch {
            let at = self.next(data.len() - seq - 1);
            ids.extend_from_slice(&data[at..at + seq]);
            targets.extend_from_slice(&data[at + 1..at + seq + 1]);
        }
        (ids, targets)
    }
}

/// `steps` training steps at a cosine learning rate (from `peak` down to a
/// tenth of it), printing the loss every 50 steps and the last; `step(lr)`
/// runs one step at that rate and returns its loss.
pub fn train_cosine(
    steps: usize,
    peak: f32,
    mut step: impl FnMut(f32) -> wgpu_tp::Result<f32>,
) -> wgpu_tp::Result<Vec<f32>> {
    let t0 = std::time::Instant::now();
    let mut losses = Vec::with_capacity(steps);
    for s in 0..steps {
        let t = s as f32 / steps.max(1) as f32;
        let lr = peak * (0.1 + 0.9 * 0.5 * (1.0 + (std::f32::consts::PI * t).cos()));
        losses.push(step(lr)?);
        if s % 50 == 0 || s + 1 == steps {
            println!(
                "  step {s:>4}  loss {:.3}  ({:.0} ms/step)",
                losses[s],
                t0.elapsed().as_secs_f64() * 1e3 / (s + 1) as f64
            );
        }
    }
    Ok(losses)
}

/// [`report_loss`] of a training run's losses, as means over at most 60
/// buckets (one sparkline line), against half the first loss.
pub fn report_curve(losses: &[f32], vocab: usize) -> bool {
    let bucket = losses.len().div_ceil(60).max(1);
    let means: Vec<f32> = losses
        .chunks(bucket)
        .map(|c| c.iter().sum::<f32>() / c.len() as f32)
        .collect();
    println!("loss curve (means of {bucket} steps):");
    report_loss(&means, vocab, 2, 0.5)
}
