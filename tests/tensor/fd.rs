//! Central finite differences in f64 of a host forward, and the check of a
//! tape gradient against them (the GPU runs f32: norm-wise 1e-4).

use crate::util::rel_err;

/// Norm-wise relative tolerance of a VJP against finite differences.
pub const FD_TOL: f64 = 1e-4;

/// `∂f/∂x` by central differences with `h = 1e-3·max(1, max |x|)`.
pub fn central(f: impl Fn(&[f64]) -> f64, x: &[f64]) -> Vec<f64> {
    let h = 1e-3 * x.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    let mut at = x.to_vec();
    (0..x.len())
        .map(|i| {
            at[i] = x[i] + h;
            let up = f(&at);
            at[i] = x[i] - h;
            let down = f(&at);
            at[i] = x[i];
            (up - down) / (2.0 * h)
        })
        .collect()
}

/// `Σ dy ⊙ y`: the scalar whose gradient is the VJP of `dy`.
pub fn dot(dy: &[f64], y: &[f64]) -> f64 {
    dy.iter().zip(y).map(|(a, b)| a * b).sum()
}

/// f32 → f64.
pub fn wide(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| v as f64).collect()
}

/// The tape's gradient within [`FD_TOL`] of the finite differences.
#[track_caller]
pub fn assert_fd(what: &str, got: &[f32], want: &[f64]) {
    let e = rel_err(got, want);
    assert!(
        e <= FD_TOL,
        "{what}: relative error {e:.3e} against finite differences"
    );
}
