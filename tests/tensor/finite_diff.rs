//! Central finite differences in f64, to check an operation's VJP (what the
//! tape runs backward) against the derivative of its forward maths.

use crate::util::rel_err;

/// `∂f/∂x_i ≈ (f(x + h·e_i) − f(x − h·e_i)) / 2h` for every `i`.
pub fn central_differences(x: &[f64], h: f64, f: impl Fn(&[f64]) -> f64) -> Vec<f64> {
    let mut x = x.to_vec();
    (0..x.len())
        .map(|i| {
            let xi = x[i];
            x[i] = xi + h;
            let up = f(&x);
            x[i] = xi - h;
            let down = f(&x);
            x[i] = xi;
            (up - down) / (2.0 * h)
        })
        .collect()
}

/// `Σ a_i·b_i` in f64: the scalar whose gradient is a VJP with `a` as `dy`.
pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The tape's gradient (computed in f32) within 1e-4 norm-wise of the
/// finite differences.
#[track_caller]
pub fn assert_fd_close(what: &str, tape: &[f32], fd: &[f64]) {
    let e = rel_err(tape, fd);
    assert!(
        e <= 1e-4,
        "{what}: VJP vs finite differences, relative error {e:.3e}"
    );
}
