//! f64 reference maths on row-major host data: the rules of `docs/MATH.md`
//! written out plainly, with no parallelism. Inputs are f32 or f64 (`Into<f64>`)
//! so chained references keep f64 intermediates.

use wgpu_tp::shard::{outer_dim_inner, split_range};

/// `a [m,k] · b [k,n]` with optional transposes (a is `[k,m]` when `ta`, b is `[n,k]` when `tb`).
pub fn gemm<A: Copy + Into<f64>, B: Copy + Into<f64>>(
    a: &[A],
    b: &[B],
    m: usize,
    n: usize,
    k: usize,
    ta: bool,
    tb: bool,
) -> Vec<f64> {
    let mut c = vec![0.0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = 0.0f64;
            for l in 0..k {
                let av: f64 = if ta { a[l * m + i] } else { a[i * k + l] }.into();
                let bv: f64 = if tb { b[j * k + l] } else { b[l * n + j] }.into();
                s += av * bv;
            }
            c[i * n + j] = s;
        }
    }
    c
}

/// `y = x Wᵀ + b` for `x [t, in]`, `W [out, in]`.
pub fn linear<X: Copy + Into<f64>, W: Copy + Into<f64>>(
    x: &[X],
    w: &[W],
    b: Option<&[W]>,
    t: usize,
    inp: usize,
    out: usize,
) -> Vec<f64> {
    let mut y = gemm(x, w, t, out, inp, false, true);
    if let Some(b) = b {
        for i in 0..t {
            for j in 0..out {
                y[i * out + j] += b[j].into();
            }
        }
    }
    y
}

/// A linear layer's output and gradients for upstream gradient `dy`.
pub struct LinearGrads {
    /// `x Wᵀ + b`, `[t, out]`.
    pub y: Vec<f64>,
    /// `dy W`, `[t, in]`.
    pub dx: Vec<f64>,
    /// `dyᵀ x`, `[out, in]`.
    pub dw: Vec<f64>,
    /// Column sums of `dy`, `[out]`.
    pub db: Vec<f64>,
}

impl LinearGrads {
    /// Widen a layer's host results `[y, dx, dW, db]` (to compare two runs).
    pub fn from_host(r: &[Vec<f32>; 4]) -> LinearGrads {
        LinearGrads {
            y: widen(&r[0]),
            dx: widen(&r[1]),
            dw: widen(&r[2]),
            db: widen(&r[3]),
        }
    }
}

/// [`linear`] forward and backward in one: `x [t, in]`, `W [out, in]`, `b [out]`, `dy [t, out]`.
pub fn linear_grads(
    x: &[f32],
    w: &[f32],
    b: &[f32],
    dy: &[f32],
    (t, inp, out): (usize, usize, usize),
) -> LinearGrads {
    LinearGrads {
        y: linear(x, w, Some(b), t, inp, out),
        dx: gemm(dy, w, t, inp, out, false, false),
        dw: gemm(dy, x, out, inp, t, true, false),
        db: sum_rows(dy, t, out),
    }
}

/// Column sums of `x [m, n]`.
pub fn sum_rows<T: Copy + Into<f64>>(x: &[T], m: usize, n: usize) -> Vec<f64> {
    let mut s = vec![0.0; n];
    for i in 0..m {
        for j in 0..n {
            s[j] += x[i * n + j].into();
        }
    }
    s
}

/// f32 → f64.
pub fn widen(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| v as f64).collect()
}

const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
const GELU_C: f64 = 0.044715;

/// GELU, tanh approximation (as the kernel).
pub fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + GELU_C * x * x * x)).tanh())
}

/// d gelu / dx.
pub fn gelu_grad(x: f64) -> f64 {
    let t = (SQRT_2_OVER_PI * (x + GELU_C * x * x * x)).tanh();
    let du = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_C * x * x);
    0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du
}

/// Embedding lookup on the shard of `rows` table rows starting at global row
/// `start` (`table [rows, dim]`): owned ids give their row, others zeros.
pub fn embedding_lookup(
    table: &[f32],
    rows: usize,
    dim: usize,
    ids: &[i32],
    start: i64,
) -> Vec<f64> {
    let mut out = vec![0.0; ids.len() * dim];
    for (i, &id) in ids.iter().enumerate() {
        let r = id as i64 - start;
        if (0..rows as i64).contains(&r) {
            for c in 0..dim {
                out[i * dim + c] = table[r as usize * dim + c] as f64;
            }
        }
    }
    out
}

/// The table gradient of [`embedding_lookup`]: each owned id's row of `dout`
/// (`[ids, dim]`) scatter-added onto `acc` (zeros when `None`); ids equal to
/// `padding` contribute nothing.
pub fn embedding_backward(
    ids: &[i32],
    dout: &[f32],
    (rows, dim): (usize, usize),
    start: i64,
    acc: Option<&[f32]>,
    padding: Option<usize>,
) -> Vec<f64> {
    let mut out: Vec<f64> = match acc {
        Some(a) => widen(a),
        None => vec![0.0; rows * dim],
    };
    for (i, &id) in ids.iter().enumerate() {
        if padding.is_some_and(|p| p as i64 == id as i64) {
            continue;
        }
        let r = id as i64 - start;
        if (0..rows as i64).contains(&r) {
            for c in 0..dim {
                out[r as usize * dim + c] += dout[i * dim + c] as f64;
            }
        }
    }
    out
}

/// [`cross_entropy`]'s per-row loss and its gradient.
pub struct CrossEntropy {
    /// `[rows]`, zero on ignored rows.
    pub loss: Vec<f64>,
    /// `[rows, v]`, already times the row's scale.
    pub grad: Vec<f64>,
}

/// Softmax cross-entropy of `z [rows, v]` whose first `k` columns are real
/// (the rest padding, ignored), with label smoothing `alpha` (uniform over
/// the `k` real classes) and rows whose target is `ignore` skipped. Returns
/// the per-row loss and the gradient `scale[row] · ∂loss/∂z` (zero in padding
/// columns and ignored rows). A target outside `0..k` contributes no target
/// logit.
pub fn cross_entropy(
    z: &[f32],
    (v, k): (usize, usize),
    targets: &[i32],
    alpha: f64,
    ignore: Option<i32>,
    scale: &[f64],
) -> CrossEntropy {
    let rows = targets.len();
    let mut loss = vec![0.0; rows];
    let mut grad = vec![0.0; rows * v];
    for r in 0..rows {
        let row = &z[r * v..r * v + k];
        let t = targets[r];
        if ignore == Some(t) {
            continue;
        }
        let m = row.iter().map(|&x| x as f64).fold(f64::MIN, f64::max);
        let s: f64 = row.iter().map(|&x| (x as f64 - m).exp()).sum();
        let lse = s.ln() + m;
        let zt = if (0..k as i32).contains(&t) {
            row[t as usize] as f64
        } else {
            0.0
        };
        let mean: f64 = row.iter().map(|&x| x as f64).sum::<f64>() / k as f64;
        loss[r] = (1.0 - alpha) * (lse - zt) + alpha * (lse - mean);
        for j in 0..k {
            let mut g = (row[j] as f64 - m).exp() / s - alpha / k as f64;
            if j as i32 == t {
                g -= 1.0 - alpha;
            }
            grad[r * v + j] = scale[r] * g;
        }
    }
    CrossEntropy { loss, grad }
}

/// One SGD step (PyTorch rule, dampening 0): `g += wd·p; buf = μ·buf + g
/// (buf = g at first, when `buf` is empty); p -= lr·buf`.
pub fn sgd(p: &mut [f64], buf: &mut Vec<f64>, g: &[f32], lr: f64, mu: f64, wd: f64) {
    let first = buf.is_empty();
    if first {
        buf.resize(p.len(), 0.0);
    }
    for i in 0..p.len() {
        let gi = g[i] as f64 + wd * p[i];
        let d = if mu != 0.0 {
            buf[i] = if first { gi } else { mu * buf[i] + gi };
            buf[i]
        } else {
            gi
        };
        p[i] -= lr * d;
    }
}

/// One AdamW step (PyTorch rule, decoupled decay) at step `t` (from 1), with
/// moments `m`, `v` and hyper-parameters `(β1, β2, ε, weight decay)`.
#[allow(clippy::too_many_arguments)]
pub fn adamw(
    p: &mut [f64],
    m: &mut [f64],
    v: &mut [f64],
    g: &[f32],
    t: i32,
    lr: f64,
    (b1, b2, eps, wd): (f64, f64, f64, f64),
) {
    for i in 0..p.len() {
        let gi = g[i] as f64;
        p[i] *= 1.0 - lr * wd;
        m[i] = b1 * m[i] + (1.0 - b1) * gi;
        v[i] = b2 * v[i] + (1.0 - b2) * gi * gi;
        let mh = m[i] / (1.0 - b1.powi(t));
        let vh = v[i] / (1.0 - b2.powi(t));
        p[i] -= lr * mh / (vh.sqrt() + eps);
    }
}

/// `shape` with `size` along `dim`.
pub fn with_dim(shape: &[usize], dim: usize, size: usize) -> Vec<usize> {
    let mut s = shape.to_vec();
    s[dim] = size;
    s
}

/// Elements `range` along `dim` of a row-major tensor of `shape`.
pub fn slice<T: Copy>(
    x: &[T],
    shape: &[usize],
    dim: usize,
    range: std::ops::Range<usize>,
) -> Vec<T> {
    let (outer, n, inner) = outer_dim_inner(shape, dim);
    let mut out = Vec::new();
    for o in 0..outer {
        for k in range.clone() {
            out.extend_from_slice(&x[(o * n + k) * inner..(o * n + k + 1) * inner]);
        }
    }
    out
}

/// All-to-all of `x` sharded along `d` over `p` ranks: rank j receives piece
/// j (along `e`) of every shard, concatenated along `d`. Returns each rank's
/// (shape, data).
pub fn all_to_all(
    x: &[f32],
    shape: &[usize],
    d: usize,
    e: usize,
    p: usize,
) -> Vec<(Vec<usize>, Vec<f32>)> {
    let shards: Vec<(Vec<usize>, Vec<f32>)> = (0..p)
        .map(|i| {
            let r = split_range(shape[d], p, i);
            (with_dim(shape, d, r.len()), slice(x, shape, d, r))
        })
        .collect();
    (0..p)
        .map(|j| {
            let pieces: Vec<(Vec<usize>, Vec<f32>)> = shards
                .iter()
                .map(|(s, v)| {
                    let r = split_range(s[e], p, j);
                    (with_dim(s, e, r.len()), slice(v, s, e, r))
                })
                .collect();
            let total: usize = pieces.iter().map(|(s, _)| s[d]).sum();
            let out_shape = with_dim(&pieces[0].0, d, total);
            let (outer, _, inner) = outer_dim_inner(&out_shape, d);
            let mut out = Vec::new();
            for o in 0..outer {
                for (s, v) in &pieces {
                    let run = s[d] * inner;
                    out.extend_from_slice(&v[o * run..(o + 1) * run]);
                }
            }
            (out_shape, out)
        })
        .collect()
}
