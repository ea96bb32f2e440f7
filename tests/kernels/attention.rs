//! Causal softmax attention kernels (forward, backward, cached decoding)
//! against an f64 reference on ragged sizes, on the poisoned test meshes (an
//! unwritten output element reads NaN and fails the finiteness check).

use crate::util::{Rng, assert_close, mesh, rel_err};
use wgpu_tp::kernels::{self, AttentionShape};
use wgpu_tp::{Error, LocalTensor, Rank};

/// f64 reference of one rank's attention.
pub(super) struct Reference {
    /// `[B·T, H·D]`.
    pub out: Vec<f64>,
    /// `[B, H, T, T]`.
    pub probs: Vec<f64>,
}

/// Index of element `e` of head `h`'s block `blk` (0 q, 1 k, 2 v) at token `t`
/// of sequence `b` in the fused `[B·T, 3·H·D]` layout.
pub(super) fn at(s: &AttentionShape, blk: usize, b: usize, h: usize, t: usize, e: usize) -> usize {
    let hd = s.heads * s.head_dim;
    (b * s.seq + t) * 3 * hd + blk * hd + h * s.head_dim + e
}

fn reference(qkv: &[f64], s: &AttentionShape) -> Reference {
    reference_masked(qkv, s, None)
}

/// [`reference`] with probability dropout: `mask` `[B, H, T, T]` holds
/// `m/(1 − p)` (0 or the keep scale); `out = (P ⊙ mask) v`, `probs` stays `P`.
pub(super) fn reference_masked(qkv: &[f64], s: &AttentionShape, mask: Option<&[f64]>) -> Reference {
    let (bs, t_len, hs, d) = (s.batch, s.seq, s.heads, s.head_dim);
    let hd = hs * d;
    let scale = 1.0 / (d as f64).sqrt();
    let mut out = vec![0.0; bs * t_len * hd];
    let mut probs = vec![0.0; bs * hs * t_len * t_len];
    for b in 0..bs {
        for h in 0..hs {
            for i in 0..t_len {
                let row = &mut probs[((b * hs + h) * t_len + i) * t_len..][..t_len];
                for j in 0..=i {
                    row[j] = (0..d)
                        .map(|e| qkv[at(s, 0, b, h, i, e)] * qkv[at(s, 1, b, h, j, e)])
                        .sum::<f64>()
                        * scale;
                }
                let m = row[..=i].iter().copied().fold(f64::MIN, f64::max);
                let sum: f64 = row[..=i].iter().map(|x| (x - m).exp()).sum();
                for x in &mut row[..=i] {
                    *x = (*x - m).exp() / sum;
                }
                let base = ((b * hs + h) * t_len + i) * t_len;
                let m = |j: usize| mask.map_or(1.0, |m| m[base + j]);
                for e in 0..d {
                    out[(b * t_len + i) * hd + h * d + e] = (0..=i)
                        .map(|j| row[j] * m(j) * qkv[at(s, 2, b, h, j, e)])
                        .sum();
                }
            }
        }
    }
    Reference { out, probs }
}

/// f64 gradient w.r.t. the fused input, from the reference probabilities.
fn reference_backward(qkv: &[f64], probs: &[f64], d_out: &[f64], s: &AttentionShape) -> Vec<f64> {
    reference_backward_masked(qkv, probs, d_out, s, None)
}

/// [`reference_backward`] under the dropout `mask` of [`reference_masked`]:
/// `dV = (P ⊙ mask)ᵀ dO`, `dP = (dO vᵀ) ⊙ mask`.
pub(super) fn reference_backward_masked(
    qkv: &[f64],
    probs: &[f64],
    d_out: &[f64],
    s: &AttentionShape,
    mask: Option<&[f64]>,
) -> Vec<f64> {
    let (bs, t_len, hs, d) = (s.batch, s.seq, s.heads, s.head_dim);
    let hd = hs * d;
    let scale = 1.0 / (d as f64).sqrt();
    let mut g = vec![0.0; qkv.len()];
    for b in 0..bs {
        for h in 0..hs {
            let p = |i: usize, j: usize| probs[((b * hs + h) * t_len + i) * t_len + j];
            let m = |i: usize, j: usize| {
                mask.map_or(1.0, |m| m[((b * hs + h) * t_len + i) * t_len + j])
            };
            let go = |i: usize, e: usize| d_out[(b * t_len + i) * hd + h * d + e];
            for i in 0..t_len {
                let dp: Vec<f64> = (0..=i)
                    .map(|j| {
                        m(i, j)
                            * (0..d)
                                .map(|e| go(i, e) * qkv[at(s, 2, b, h, j, e)])
                                .sum::<f64>()
                    })
                    .collect();
                let dot: f64 = (0..=i).map(|j| p(i, j) * dp[j]).sum();
                for j in 0..=i {
                    let ds = p(i, j) * (dp[j] - dot);
                    for e in 0..d {
                        g[at(s, 0, b, h, i, e)] += ds * qkv[at(s, 1, b, h, j, e)] * scale;
                        g[at(s, 1, b, h, j, e)] += ds * qkv[at(s, 0, b, h, i, e)] * scale;
                        g[at(s, 2, b, h, j, e)] += p(i, j) * m(i, j) * go(i, e);
                    }
                }
            }
        }
    }
    g
}

pub(super) fn widen(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| v as f64).collect()
}

pub(super) fn up(r: &Rank, shape: &[usize], v: &[f32]) -> LocalTensor {
    r.upload(shape, v).unwrap()
}

/// Forward and backward of `s` on rank `r` against f64; probabilities above
/// the diagonal must be exactly 0 and every row must sum to 1.
fn check(r: &Rank, s: AttentionShape, rng: &mut Rng, amp: f32, tol: f64) {
    let what = format!("{s:?}");
    let [rows, w] = s.qkv_shape();
    let qkv: Vec<f32> = rng.vec(rows * w).iter().map(|x| amp * x).collect();
    let d_out = rng.vec(rows * s.heads * s.head_dim);
    let tq = up(r, &[rows, w], &qkv);
    let got = kernels::attention_forward(&tq, s).unwrap();
    assert_eq!(got.out.shape(), s.out_shape(), "{what}");
    assert_eq!(got.probs.shape(), s.probs_shape(), "{what}");
    let want = reference(&widen(&qkv), &s);
    let probs = got.probs.to_vec().unwrap();
    let t = s.seq;
    for (row, p) in probs.chunks(t.max(1)).enumerate() {
        let i = row % t;
        assert!(
            p[i + 1..].iter().all(|&x| x == 0.0),
            "{what}: masked probabilities of row {row} not exactly 0: {p:?}"
        );
        let sum: f64 = p.iter().map(|&x| x as f64).sum();
        assert!((sum - 1.0).abs() < 1e-5, "{what}: row {row} sums to {sum}");
    }
    assert_close(&format!("{what} probs"), &probs, &want.probs, tol);
    assert_close(
        &format!("{what} out"),
        &got.out.to_vec().unwrap(),
        &want.out,
        tol,
    );
    let td = up(r, &s.out_shape(), &d_out);
    let g = kernels::attention_backward(&tq, &got.probs, &td, s).unwrap();
    assert_eq!(g.shape(), s.qkv_shape(), "{what}");
    let want_g = reference_backward(&widen(&qkv), &want.probs, &widen(&d_out), &s);
    assert_close(&format!("{what} d_qkv"), &g.to_vec().unwrap(), &want_g, tol);
}

#[test]
fn forward_and_backward_match_f64_on_ragged_sizes() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("attention");
    for b in [1, 2] {
        // 8 and 20 with d = 8: the vec4 entries (from 16 queries, operands
        // in textures on CPU adapters).
        for t in [1, 7, 8, 13, 17, 20] {
            for d in [1, 3, 8] {
                for h in [0, 1, 3] {
                    check(r, AttentionShape::new(b, t, h, d), &mut rng, 2.0, 1e-5);
                }
            }
        }
    }
}

/// Scores past f32's exp range (|S| beyond 88 in some rows) need the row max
/// subtracted: probabilities stay finite, rows near one-hot. f32 rounding of
/// scores this large moves P by ~|S|·2⁻²⁴ relatively, hence the tolerance.
#[test]
fn large_scores_stay_finite_and_correct() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("attention_large");
    for (b, t, h, d) in [(2, 13, 3, 8), (1, 17, 1, 3)] {
        check(r, AttentionShape::new(b, t, h, d), &mut rng, 10.0, 1e-4);
    }
}

/// `Σ out ⊙ G` for the reference forward at `qkv`.
fn loss(qkv: &[f64], g: &[f64], s: &AttentionShape) -> f64 {
    reference(qkv, s)
        .out
        .iter()
        .zip(g)
        .map(|(o, g)| o * g)
        .sum()
}

/// The backward is the gradient of the forward: the f64 reference backward
/// equals central differences of the f64 forward, and the GPU backward's
/// directional derivatives equal central differences of the GPU forward.
#[test]
fn backward_is_the_gradient_of_forward() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("attention_gradcheck");
    let s = AttentionShape::new(2, 5, 2, 3);
    let [rows, w] = s.qkv_shape();
    let qkv = rng.vec(rows * w);
    let g = rng.vec(rows * s.heads * s.head_dim);
    let (x, gw) = (widen(&qkv), widen(&g));

    // f64: every partial derivative by central differences.
    let want = reference_backward(&x, &reference(&x, &s).probs, &gw, &s);
    let h = 1e-6;
    let fd: Vec<f64> = (0..x.len())
        .map(|k| {
            let (mut xp, mut xm) = (x.clone(), x.clone());
            xp[k] += h;
            xm[k] -= h;
            (loss(&xp, &gw, &s) - loss(&xm, &gw, &s)) / (2.0 * h)
        })
        .collect();
    let e = rel_err(&want.iter().map(|&v| v as f32).collect::<Vec<_>>(), &fd);
    assert!(
        e < 1e-6,
        "reference backward vs finite differences: {e:.3e}"
    );

    // GPU, f32: directional derivatives along random directions.
    let tq = up(r, &[rows, w], &qkv);
    let tg = up(r, &s.out_shape(), &g);
    let fwd = kernels::attention_forward(&tq, s).unwrap();
    let grad = kernels::attention_backward(&tq, &fwd.probs, &tg, s)
        .unwrap()
        .to_vec()
        .unwrap();
    let gpu_loss = |v: &[f32]| -> f64 {
        let out = kernels::attention_forward(&up(r, &[rows, w], v), s)
            .unwrap()
            .out
            .to_vec()
            .unwrap();
        out.iter().zip(&g).map(|(&o, &g)| o as f64 * g as f64).sum()
    };
    let eps = 1e-2f32;
    for _ in 0..3 {
        let u = rng.vec(qkv.len());
        let plus: Vec<f32> = qkv.iter().zip(&u).map(|(x, u)| x + eps * u).collect();
        let minus: Vec<f32> = qkv.iter().zip(&u).map(|(x, u)| x - eps * u).collect();
        let fd = (gpu_loss(&plus) - gpu_loss(&minus)) / (2.0 * eps as f64);
        let an: f64 = grad
            .iter()
            .zip(&u)
            .map(|(&a, &u)| a as f64 * u as f64)
            .sum();
        assert!(
            (fd - an).abs() <= 2e-3 * an.abs().max(1.0),
            "directional derivative: finite differences {fd}, backward {an}"
        );
    }
}

/// Rows `start..start + len` of every sequence of a fused `[B·T, w]` tensor.
fn token_rows(x: &[f32], b: usize, t: usize, w: usize, start: usize, len: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(b * len * w);
    for s in 0..b {
        out.extend_from_slice(&x[(s * t + start) * w..(s * t + start + len) * w]);
    }
    out
}

/// Decoding in chunks with a cache gives the rows of the full forward, and
/// the cache holds exactly the keys and values of the positions so far.
#[test]
fn cached_decoding_equals_full_recomputation() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("attention_decode");
    let cases: &[(usize, usize, usize, &[usize])] = &[
        (2, 3, 4, &[4, 1, 1, 3, 2]),
        (1, 1, 1, &[1, 1, 1, 1, 1]),
        (2, 2, 3, &[0, 6, 0, 1]),
        (2, 0, 3, &[2, 2]),
    ];
    for &(b, h, d, chunks) in cases {
        let t: usize = chunks.iter().sum();
        let full = AttentionShape::new(b, t, h, d);
        let [rows, w] = full.qkv_shape();
        let hd = h * d;
        let qkv = rng.vec(rows * w);
        let want = reference(&widen(&qkv), &full);
        let whole = kernels::attention_forward(&up(r, &[rows, w], &qkv), full)
            .unwrap()
            .out
            .to_vec()
            .unwrap();
        let mut cache: Option<LocalTensor> = None;
        let mut pos = 0;
        let (mut all_got, mut all_want, mut all_whole) = (Vec::new(), Vec::new(), Vec::new());
        for &c in chunks {
            let s = AttentionShape::new(b, c, h, d);
            let part = token_rows(&qkv, b, t, w, pos, c);
            let dec =
                kernels::attention_decode(&up(r, &[b * c, w], &part), cache.as_ref(), s).unwrap();
            assert_eq!(dec.out.shape(), s.out_shape());
            assert_eq!(dec.cache.shape(), s.cache_shape(pos + c));
            let got = dec.out.to_vec().unwrap();
            let what = format!("decode b={b} h={h} d={d} positions {pos}..{}", pos + c);
            let rows_of = |x: &[f64]| -> Vec<f64> {
                let mut o = Vec::new();
                for s in 0..b {
                    o.extend_from_slice(&x[(s * t + pos) * hd..(s * t + pos + c) * hd]);
                }
                o
            };
            // Element-wise (with its absolute floor) per chunk; the norm-wise
            // bounds over the whole decoded output below, since a chunk can be
            // a single element (b = h = d = 1), where a norm-wise check has no floor.
            for (i, (g, w)) in got.iter().zip(rows_of(&want.out)).enumerate() {
                let diff = (*g as f64 - w).abs();
                assert!(
                    diff <= 1e-4 + 1e-3 * w.abs(),
                    "{what}: element {i}: got {g}, want {w}"
                );
            }
            all_got.extend_from_slice(&got);
            all_want.extend(rows_of(&want.out));
            all_whole.extend(rows_of(&widen(&whole)));
            pos += c;
            cache = Some(dec.cache);
        }
        let what = format!("decode b={b} h={h} d={d}, all chunks");
        assert_close(&what, &all_got, &all_want, 1e-5);
        let e = rel_err(&all_got, &all_whole);
        assert!(
            e <= 1e-6,
            "{what}: differs from the full forward by {e:.3e}"
        );
        // The cache: [T, 2, B, H, D], positions outermost, keys then values.
        let got = cache.unwrap().to_vec().unwrap();
        let mut want_cache = Vec::new();
        for tt in 0..t {
            for blk in 1..3 {
                for sb in 0..b {
                    for hh in 0..h {
                        for e in 0..d {
                            want_cache.push(qkv[at(&full, blk, sb, hh, tt, e)]);
                        }
                    }
                }
            }
        }
        assert_eq!(got, want_cache, "cache b={b} h={h} d={d}");
    }
}

#[test]
fn no_heads_gives_empty_tensors() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let s = AttentionShape::new(2, 5, 0, 4);
    let qkv = up(r, &[10, 0], &[]);
    let fwd = kernels::attention_forward(&qkv, s).unwrap();
    assert_eq!(fwd.out.shape(), [10, 0]);
    assert_eq!(fwd.probs.shape(), [2, 0, 5, 5]);
    let d_out = up(r, &[10, 0], &[]);
    let g = kernels::attention_backward(&qkv, &fwd.probs, &d_out, s).unwrap();
    assert_eq!(g.shape(), [10, 0]);
    let dec = kernels::attention_decode(&qkv, None, s).unwrap();
    assert_eq!(dec.out.shape(), [10, 0]);
    assert_eq!(dec.cache.shape(), [5, 2, 2, 0, 4]);
}

#[test]
fn bad_inputs_are_errors_that_leave_the_mesh_usable() {
    let m = mesh(2);
    let (r0, r1) = (&m.ranks()[0], &m.ranks()[1]);
    let mut rng = Rng::fresh("attention_errors");
    let s = AttentionShape::new(2, 5, 2, 3);
    let [rows, w] = s.qkv_shape();
    let x = rng.vec(rows * w);
    let qkv = up(r0, &[rows, w], &x);
    let shape_err = |res: Result<kernels::Attention, Error>| {
        assert!(matches!(res, Err(Error::ShapeMismatch { .. })), "{res:?}")
    };
    // Wrong width, wrong rows, wrong rank of tensor.
    shape_err(kernels::attention_forward(
        &up(r0, &[rows, w - 1], &x[..rows * (w - 1)]),
        s,
    ));
    shape_err(kernels::attention_forward(
        &up(r0, &[rows - 1, w], &x[..(rows - 1) * w]),
        s,
    ));
    shape_err(kernels::attention_forward(&up(r0, &[rows * w], &x), s));
    shape_err(kernels::attention_forward(
        &qkv,
        AttentionShape::new(2, 5, 3, 3),
    ));
    let err = kernels::attention_forward(&qkv, AttentionShape::new(1, 5, 2, 3)).unwrap_err();
    assert!(err.to_string().contains("fused QKV"), "{err}");
    // dtype i32.
    let ints = r0.upload_i32(&[rows, w], &vec![1; rows * w]).unwrap();
    assert!(matches!(
        kernels::attention_forward(&ints, s),
        Err(Error::DTypeMismatch { .. })
    ));
    // head_dim 0 with heads.
    assert!(matches!(
        kernels::attention_forward(&up(r0, &[rows, 0], &[]), AttentionShape::new(2, 5, 2, 0)),
        Err(Error::InvalidArgument { .. })
    ));

    // Backward: operands of the wrong rank, shape or dtype.
    let fwd = kernels::attention_forward(&qkv, s).unwrap();
    let d_out = rng.vec(rows * 6);
    let td = up(r0, &[rows, 6], &d_out);
    let probs_r1 = r1.zeros(&s.probs_shape(), wgpu_tp::DType::F32).unwrap();
    let d_out_r1 = up(r1, &[rows, 6], &d_out);
    let bwd = |p: &LocalTensor, g: &LocalTensor| kernels::attention_backward(&qkv, p, g, s);
    assert!(matches!(
        bwd(&probs_r1, &td),
        Err(Error::RankMismatch { .. })
    ));
    assert!(matches!(
        bwd(&fwd.probs, &d_out_r1),
        Err(Error::RankMismatch { .. })
    ));
    let qkv_r1 = up(r1, &[rows, w], &x);
    assert!(matches!(
        kernels::attention_backward(&qkv_r1, &fwd.probs, &td, s),
        Err(Error::RankMismatch { .. })
    ));
    let short = fwd.probs.reshape(&[2, 2, 25]).unwrap();
    assert!(matches!(bwd(&short, &td), Err(Error::ShapeMismatch { .. })));
    assert!(matches!(
        bwd(&fwd.probs, &fwd.probs),
        Err(Error::ShapeMismatch { .. })
    ));
    let d_int = r0.upload_i32(&[rows, 6], &vec![0; rows * 6]).unwrap();
    assert!(matches!(
        bwd(&fwd.probs, &d_int),
        Err(Error::DTypeMismatch { .. })
    ));

    // Decode: a cache of the wrong shape, rank or dtype.
    let one = AttentionShape::new(2, 1, 2, 3);
    let step = up(r0, &[2, w], &x[..2 * w]);
    let dec = |c: &LocalTensor| kernels::attention_decode(&step, Some(c), one);
    let cache = r0.zeros(&[4, 2, 2, 2, 3], wgpu_tp::DType::F32).unwrap();
    assert!(dec(&cache).is_ok());
    let wrong = r0.zeros(&[4, 2, 2, 3, 3], wgpu_tp::DType::F32).unwrap();
    assert!(matches!(dec(&wrong), Err(Error::ShapeMismatch { .. })));
    let flat = r0.zeros(&[48], wgpu_tp::DType::F32).unwrap();
    assert!(matches!(dec(&flat), Err(Error::ShapeMismatch { .. })));
    let other = r1.zeros(&[4, 2, 2, 2, 3], wgpu_tp::DType::F32).unwrap();
    assert!(matches!(dec(&other), Err(Error::RankMismatch { .. })));
    let int_cache = r0.zeros(&[4, 2, 2, 2, 3], wgpu_tp::DType::I32).unwrap();
    assert!(matches!(dec(&int_cache), Err(Error::DTypeMismatch { .. })));

    // Still usable: the forward and backward on rank 0 are right.
    let want = reference(&widen(&x), &s);
    let fwd = kernels::attention_forward(&qkv, s).unwrap();
    assert_close("after errors", &fwd.out.to_vec().unwrap(), &want.out, 1e-5);
    let g = kernels::attention_backward(&qkv, &fwd.probs, &td, s).unwrap();
    let want_g = reference_backward(&widen(&x), &want.probs, &widen(&d_out), &s);
    assert_close("after errors", &g.to_vec().unwrap(), &want_g, 1e-5);
}

/// Probabilities past one storage binding are refused before any work.
#[test]
fn too_large_probabilities_are_refused() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let l = r.device().limits();
    let limit = l.max_storage_buffer_binding_size.min(l.max_buffer_size);
    // One head of width 1: [1, 1, T, T] probabilities of 4·T² bytes.
    let t = ((limit / 4) as f64).sqrt() as usize + 1;
    let s = AttentionShape::new(1, t, 1, 1);
    let qkv = r.zeros(&s.qkv_shape(), wgpu_tp::DType::F32).unwrap();
    let err = kernels::attention_forward(&qkv, s).unwrap_err();
    assert!(matches!(err, Error::TooLarge { .. }), "{err}");
    assert!(err.to_string().contains("probabilities"), "{err}");
    let err = kernels::attention_decode(&qkv, None, s).unwrap_err();
    assert!(matches!(err, Error::TooLarge { .. }), "{err}");
}
