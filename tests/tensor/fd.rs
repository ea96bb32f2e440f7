//! The finite-difference check every VJP test uses: an operation's forward
//! written on the host in f64, central differences of `L = Σ dy·y` with
//! respect to every input entry, against the gradients the tape leaves in
//! the inputs (tracked leaves) after `y.backward_with(dy)`.

use crate::util::{Rng, rel_err};
use wgpu_tp::{DTensor, Mesh, Placement, Result};

/// Norm-wise relative error allowed between the tape's f32 gradient and
/// the f64 central differences (the GPU computes in f32).
pub const FD_TOL: f64 = 1e-4;

/// One input of the operation under test: its shape, placement and values.
pub struct Input {
    pub shape: Vec<usize>,
    pub placement: Placement,
    pub values: Vec<f32>,
}

impl Input {
    /// Random values of `shape`, to be placed `placement`.
    pub fn new(rng: &mut Rng, shape: &[usize], placement: Placement) -> Input {
        let n = shape.iter().product();
        Input {
            shape: shape.to_vec(),
            placement,
            values: rng.vec(n),
        }
    }
}

/// `∂f/∂x_i ≈ (f(x + h·e_i) − f(x − h·e_i)) / 2h` for every `i`, in f64:
/// the one primitive every check here is built on.
pub fn central_differences(x: &[f64], h: f64, f: impl Fn(&[f64]) -> f64) -> Vec<f64> {
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

/// The step for `x`: `10⁻³·max(1, max|x_i|)`.
fn step(x: &[f64]) -> f64 {
    1e-3 * x.iter().fold(1.0f64, |m, v| m.max(v.abs()))
}

/// `∂(Σ dy·f(v))/∂v` for every entry of every input.
pub fn central_all(
    f: &dyn Fn(&[Vec<f64>]) -> Vec<f64>,
    inputs: &[Vec<f64>],
    dy: &[f64],
) -> Vec<Vec<f64>> {
    (0..inputs.len())
        .map(|i| {
            central_differences(&inputs[i], step(&inputs[i]), |xi| {
                let mut v = inputs.to_vec();
                v[i] = xi.to_vec();
                dot(dy, &f(&v))
            })
        })
        .collect()
}

/// Runs `op` on the inputs made tracked leaves, checks its output against
/// `host` (f64), runs backward with a random `dy` (placed like the output,
/// `Replicate` for a `Partial` one) and checks every input's gradient
/// against central differences of `host`, and that it is placed like the
/// input. Returns the output.
pub fn check_vjp(
    what: &str,
    m: &Mesh,
    rng: &mut Rng,
    inputs: &[Input],
    op: &dyn Fn(&[DTensor]) -> Result<DTensor>,
    host: &dyn Fn(&[Vec<f64>]) -> Vec<f64>,
) -> DTensor {
    let xs: Vec<DTensor> = inputs
        .iter()
        .map(|i| {
            DTensor::from_host(m, &i.shape, &i.values, i.placement)
                .unwrap()
                .requires_grad()
        })
        .collect();
    let y = op(&xs).unwrap();
    let wide: Vec<Vec<f64>> = inputs
        .iter()
        .map(|i| i.values.iter().map(|&v| f64::from(v)).collect())
        .collect();
    let want_y = host(&wide);
    let got_y = y.to_host().unwrap();
    let e = rel_err(&got_y, &want_y);
    assert!(e <= 1e-5, "{what}: forward relative error {e:.3e}");
    let dy = rng.vec(want_y.len());
    let dy_place = match y.placement() {
        Placement::Partial(_) => Placement::Replicate,
        p => p,
    };
    let dyd = DTensor::from_host(m, y.shape(), &dy, dy_place).unwrap();
    y.backward_with(&dyd).unwrap();
    let dy64: Vec<f64> = dy.iter().map(|&v| f64::from(v)).collect();
    let want = central_all(host, &wide, &dy64);
    for (i, (x, want)) in xs.iter().zip(&want).enumerate() {
        let g = x
            .grad()
            .unwrap_or_else(|| panic!("{what}: input {i} got no gradient"));
        assert_eq!(g.placement(), x.placement(), "{what}: input {i}'s gradient");
        assert_eq!(g.shape(), x.shape(), "{what}: input {i}'s gradient");
        let e = rel_err(&g.to_host().unwrap(), want);
        assert!(
            e <= FD_TOL,
            "{what}: input {i}'s gradient vs finite differences: relative error {e:.3e}"
        );
    }
    y
}

/// `x [t, k] · wᵀ` (`w [n, k]`) or `x · w` (`w [k, n]`), plus an optional
/// bias `[n]` on every row, in f64.
pub fn product(
    x: &[f64],
    w: &[f64],
    bias: Option<&[f64]>,
    (t, k, n): (usize, usize, usize),
    transpose_w: bool,
) -> Vec<f64> {
    let mut y = vec![0.0; t * n];
    for i in 0..t {
        for j in 0..n {
            let mut s = bias.map_or(0.0, |b| b[j]);
            for l in 0..k {
                let wv = if transpose_w {
                    w[j * k + l]
                } else {
                    w[l * n + j]
                };
                s += x[i * k + l] * wv;
            }
            y[i * n + j] = s;
        }
    }
    y
}

/// `y [t, n] + bias [n]` on every row, in f64.
pub fn add_row(y: &[f64], bias: &[f64]) -> Vec<f64> {
    let n = bias.len();
    y.iter().enumerate().map(|(i, v)| v + bias[i % n]).collect()
}

/// `∂f/∂x` by central differences with the default step.
pub fn central(f: impl Fn(&[f64]) -> f64, x: &[f64]) -> Vec<f64> {
    central_differences(x, step(x), f)
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
