//! Grouped-query causal attention kernels on separate q, k, v
//! (`attention_forward_gqa`, `attention_backward_gqa`,
//! `attention_decode_gqa`) against an f64 reference written from the
//! [`HeadGroups`] contract: query head `h` reads key/value head
//! `(q_start + h)/group − kv_start`, and query position `past + i` sees key
//! position `j` iff `j ≤ past + i` and (window `w > 0`) `past + i < j + w`.
//! Groups 1 (multi-head), 2, 3 and multi-query, head widths 1, 3, 5, 6, 12,
//! odd sequence lengths, windows 0, 1, 3, = seq and > seq (huge ones: equal
//! to no window, or refused, never wrapped); one rank's subset
//! of the query heads (as a tensor-parallel rank holds them, none included)
//! whose `dK`, `dV` summed over the ranks are the whole gradient; cached
//! decoding with `past > 0` equal to the full forward's rows; bad operands
//! are errors. All on the poisoned test meshes.

use crate::util::{Rng, assert_close, mesh, rel_err};
use wgpu_tp::kernels::{self, AttentionShape, HeadGroups};
use wgpu_tp::shard::split_range;
use wgpu_tp::{DType, Error, LocalTensor, Rank};

/// One rank's problem in the kernels' terms: `batch` sequences of `t` new
/// query positions after `past` earlier ones, `h` query heads of width `d`.
#[derive(Clone, Copy, Debug)]
struct Problem {
    b: usize,
    t: usize,
    past: usize,
    h: usize,
    d: usize,
    g: HeadGroups,
}

impl Problem {
    /// Key positions per sequence.
    fn tk(&self) -> usize {
        self.past + self.t
    }

    /// The key/value head (of the k, v tensors) local query head `h` reads.
    fn kvh(&self, h: usize) -> usize {
        (self.g.q_start + h) / self.g.group - self.g.kv_start
    }

    /// Whether query `i` (position `past + i`) sees key position `j`.
    fn sees(&self, i: usize, j: usize) -> bool {
        let qi = self.past + i;
        j <= qi && (self.g.window == 0 || qi < j + self.g.window)
    }

    fn q_at(&self, b: usize, i: usize, h: usize, e: usize) -> usize {
        (b * self.t + i) * self.h * self.d + h * self.d + e
    }

    fn kv_at(&self, b: usize, j: usize, kh: usize, e: usize) -> usize {
        (b * self.tk() + j) * self.g.kv_heads * self.d + kh * self.d + e
    }

    fn p_at(&self, b: usize, h: usize, i: usize, j: usize) -> usize {
        ((b * self.h + h) * self.t + i) * self.tk() + j
    }

    fn shape(&self) -> AttentionShape {
        AttentionShape::new(self.b, self.t, self.h, self.d)
    }
}

/// f64 forward: `(out [B·T, H·D], probs [B, H, T, past + T])` of q `[B·T,
/// H·D]` and k, v `[B·(past + T), KV·D]`.
fn forward(p: &Problem, q: &[f64], k: &[f64], v: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let (tk, d) = (p.tk(), p.d);
    let scale = 1.0 / (d as f64).sqrt();
    let mut out = vec![0.0; p.b * p.t * p.h * d];
    let mut probs = vec![0.0; p.b * p.h * p.t * tk];
    for b in 0..p.b {
        for h in 0..p.h {
            let kh = p.kvh(h);
            for i in 0..p.t {
                let seen: Vec<usize> = (0..tk).filter(|&j| p.sees(i, j)).collect();
                let s: Vec<f64> = seen
                    .iter()
                    .map(|&j| {
                        (0..d)
                            .map(|e| q[p.q_at(b, i, h, e)] * k[p.kv_at(b, j, kh, e)])
                            .sum::<f64>()
                            * scale
                    })
                    .collect();
                let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = s.iter().map(|x| (x - m).exp()).sum();
                for (&j, sj) in seen.iter().zip(&s) {
                    let pj = (sj - m).exp() / z;
                    probs[p.p_at(b, h, i, j)] = pj;
                    for e in 0..d {
                        out[p.q_at(b, i, h, e)] += pj * v[p.kv_at(b, j, kh, e)];
                    }
                }
            }
        }
    }
    (out, probs)
}

/// f64 backward from the reference probabilities: `[dq, dk, dv]`, `dk` and
/// `dv` summed over the query heads that read each key/value head.
fn backward(p: &Problem, [q, k, v]: [&[f64]; 3], probs: &[f64], d_out: &[f64]) -> [Vec<f64>; 3] {
    let (tk, d) = (p.tk(), p.d);
    let scale = 1.0 / (d as f64).sqrt();
    let (mut dq, mut dk, mut dv) = (vec![0.0; q.len()], vec![0.0; k.len()], vec![0.0; v.len()]);
    for b in 0..p.b {
        for h in 0..p.h {
            let kh = p.kvh(h);
            for i in 0..p.t {
                let pr = |j: usize| probs[p.p_at(b, h, i, j)];
                let dp: Vec<f64> = (0..tk)
                    .map(|j| {
                        (0..d)
                            .map(|e| d_out[p.q_at(b, i, h, e)] * v[p.kv_at(b, j, kh, e)])
                            .sum()
                    })
                    .collect();
                let dot: f64 = (0..tk).map(|j| pr(j) * dp[j]).sum();
                for j in 0..tk {
                    let ds = pr(j) * (dp[j] - dot) * scale;
                    for e in 0..d {
                        dq[p.q_at(b, i, h, e)] += ds * k[p.kv_at(b, j, kh, e)];
                        dk[p.kv_at(b, j, kh, e)] += ds * q[p.q_at(b, i, h, e)];
                        dv[p.kv_at(b, j, kh, e)] += pr(j) * d_out[p.q_at(b, i, h, e)];
                    }
                }
            }
        }
    }
    [dq, dk, dv]
}

fn widen(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| v as f64).collect()
}

fn up(r: &Rank, shape: &[usize], v: &[f32]) -> LocalTensor {
    r.upload(shape, v).unwrap()
}

/// Columns `cols` of a row-major `[rows, w]` matrix.
fn columns<T: Copy>(x: &[T], w: usize, cols: std::ops::Range<usize>) -> Vec<T> {
    x.chunks(w.max(1))
        .flat_map(|row| row[cols.clone()].to_vec())
        .collect()
}

/// Multi-head attention over all `heads` when `group` is 1; otherwise
/// `heads / group` key/value heads, the window `window`.
fn groups(heads: usize, kv_heads: usize, window: usize) -> HeadGroups {
    HeadGroups {
        group: heads / kv_heads,
        q_start: 0,
        kv_start: 0,
        kv_heads,
        window,
        softcap: 0.0,
    }
}

/// Forward and backward of `p` on `r` with random q, k, v, dO against f64:
/// probabilities exactly 0 where masked and rows summing to 1.
fn check(r: &Rank, p: Problem, rng: &mut Rng) {
    let what = format!("{p:?}");
    let (rows, kvw) = (p.b * p.t, p.g.kv_heads * p.d);
    let (q, k, v) = (
        rng.vec(rows * p.h * p.d),
        rng.vec(rows * kvw),
        rng.vec(rows * kvw),
    );
    let d_out = rng.vec(rows * p.h * p.d);
    let (tq, tk, tv) = (
        up(r, &[rows, p.h * p.d], &q),
        up(r, &[rows, kvw], &k),
        up(r, &[rows, kvw], &v),
    );
    let s = p.shape();
    let got = kernels::attention_forward_gqa(&tq, &tk, &tv, s, p.g, None).unwrap();
    assert_eq!(got.out.shape(), s.out_shape(), "{what}");
    assert_eq!(got.probs.shape(), s.probs_shape(), "{what}");
    let (q64, k64, v64) = (widen(&q), widen(&k), widen(&v));
    let (want_out, want_probs) = forward(&p, &q64, &k64, &v64);
    let probs = got.probs.to_vec().unwrap();
    for (n, row) in probs.chunks(p.t).enumerate() {
        let i = n % p.t;
        for (j, &x) in row.iter().enumerate() {
            if !p.sees(i, j) {
                assert_eq!(x, 0.0, "{what}: masked probability ({i}, {j}) of row {n}");
            }
        }
        let sum: f64 = row.iter().map(|&x| x as f64).sum();
        assert!((sum - 1.0).abs() < 1e-5, "{what}: row {n} sums to {sum}");
    }
    assert_close(&format!("{what}: probs"), &probs, &want_probs, 1e-5);
    let out = got.out.to_vec().unwrap();
    assert_close(&format!("{what}: out"), &out, &want_out, 1e-5);

    let td = up(r, &s.out_shape(), &d_out);
    let grads =
        kernels::attention_backward_gqa(&tq, &tk, &tv, &got.probs, &td, s, p.g, None).unwrap();
    let want = backward(&p, [&q64, &k64, &v64], &want_probs, &widen(&d_out));
    for ((name, g), (w, t)) in ["dq", "dk", "dv"]
        .iter()
        .zip(&grads)
        .zip(want.iter().zip([&tq, &tk, &tv]))
    {
        assert_eq!(g.shape(), t.shape(), "{what}: {name}");
        assert_close(&format!("{what}: {name}"), &g.to_vec().unwrap(), w, 1e-5);
    }
}

#[test]
fn gqa_forward_and_backward_match_f64_for_every_group_and_window() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("gqa_kernels");
    // (batch, seq, heads, kv_heads, head_dim, window)
    let cases = [
        (2, 7, 3, 3, 6, 0),   // multi-head, head_dim 6
        (1, 13, 4, 2, 6, 3),  // group 2, window 3
        (2, 7, 6, 2, 3, 1),   // group 3, window 1 (each query sees itself)
        (1, 17, 3, 1, 12, 0), // multi-query, head_dim 12
        (2, 5, 4, 1, 5, 5),   // multi-query, window = seq
        (1, 7, 6, 3, 4, 100), // group 2, window > seq
        (2, 1, 2, 1, 6, 1),   // one token
        (1, 13, 2, 2, 1, 3),  // head_dim 1
        (1, 8, 4, 2, 8, 3),   // the vec4 entries, group 2, window 3
        (2, 20, 6, 2, 4, 0),  // the vec4 entries (textures on CPU adapters)
    ];
    for (b, t, h, kv, d, w) in cases {
        let p = Problem {
            b,
            t,
            past: 0,
            h,
            d,
            g: groups(h, kv, w),
        };
        check(r, p, &mut rng);
    }
}

/// A window of `seq` or more masks nothing the causal mask does not: the
/// same numbers as no window.
#[test]
fn a_window_past_the_sequence_is_plain_causal_attention() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("gqa_wide_window");
    let (b, t, h, kv, d) = (2, 7, 4, 2, 6);
    let (q, k, v) = (
        rng.vec(b * t * h * d),
        rng.vec(b * t * kv * d),
        rng.vec(b * t * kv * d),
    );
    let s = AttentionShape::new(b, t, h, d);
    let run = |w: usize| {
        kernels::attention_forward_gqa(
            &up(r, &[b * t, h * d], &q),
            &up(r, &[b * t, kv * d], &k),
            &up(r, &[b * t, kv * d], &v),
            s,
            groups(h, kv, w),
            None,
        )
        .map(|a| a.out.to_vec().unwrap())
    };
    let plain = widen(&run(0).unwrap());
    // Windows of the sequence's length or more must give these numbers; the
    // shader's positions are u32, so a huge one may instead be refused, but
    // never wrap into another mask.
    let windows = [
        t,
        t + 1,
        1000,
        1 << 31,
        u32::MAX as usize,
        (1 << 32) + 1,
        usize::MAX,
    ];
    let bad: Vec<String> = windows
        .into_iter()
        .filter_map(|w| match run(w) {
            Ok(out) => {
                let e = rel_err(&out, &plain);
                (e > 1e-6).then(|| format!("window {w} differs from none by {e:.3e}"))
            }
            Err(e) if w >= 1 << 31 => {
                eprintln!("window {w} refused: {e}");
                None
            }
            Err(e) => Some(format!("window {w}: {e}")),
        })
        .collect();
    assert!(bad.is_empty(), "{bad:#?}");
}

/// Each tensor-parallel rank's share of the query heads (`q_start`, its
/// count, none on some ranks when heads < P), reading either every
/// key/value head or only those its heads use (`kv_start > 0`): the
/// outputs are the whole forward's columns, and `dK`, `dV` summed over the
/// ranks are the whole gradient.
#[test]
fn rank_subsets_of_query_heads_sum_to_the_whole_gradient() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("gqa_rank_subsets");
    let (b, t, d, w) = (2, 5, 3, 3);
    // (heads, kv_heads, world sizes)
    let cases: [(usize, usize, &[usize]); 3] = [(6, 2, &[2, 4]), (3, 1, &[4, 8]), (3, 3, &[2, 4])];
    for (heads, kv, ps) in cases {
        let rows = b * t;
        let (hd, kvd) = (heads * d, kv * d);
        let (q, k, v) = (rng.vec(rows * hd), rng.vec(rows * kvd), rng.vec(rows * kvd));
        let d_out = rng.vec(rows * hd);
        let whole = Problem {
            b,
            t,
            past: 0,
            h: heads,
            d,
            g: groups(heads, kv, w),
        };
        let (q64, k64, v64) = (widen(&q), widen(&k), widen(&v));
        let (want_out, want_probs) = forward(&whole, &q64, &k64, &v64);
        let [want_dq, want_dk, want_dv] =
            backward(&whole, [&q64, &k64, &v64], &want_probs, &widen(&d_out));
        let group = heads / kv;
        for &world in ps {
            for minimal_kv in [false, true] {
                let what = format!("heads {heads} kv {kv} P={world} minimal kv {minimal_kv}");
                let (mut out, mut dq) = (vec![0.0f32; rows * hd], vec![0.0f32; rows * hd]);
                let (mut dk, mut dv) = (vec![0.0f64; rows * kvd], vec![0.0f64; rows * kvd]);
                for rank in 0..world {
                    let hs = split_range(heads, world, rank);
                    let (kv_start, kv_heads) = if minimal_kv && !hs.is_empty() {
                        let first = hs.start / group;
                        (first, (hs.end - 1) / group - first + 1)
                    } else {
                        (0, kv)
                    };
                    let kv_cols = kv_start * d..(kv_start + kv_heads) * d;
                    let g = HeadGroups {
                        group,
                        q_start: hs.start,
                        kv_start,
                        kv_heads,
                        window: w,
                        softcap: 0.0,
                    };
                    let s = AttentionShape::new(b, t, hs.len(), d);
                    let q_cols = hs.start * d..hs.end * d;
                    let tq = up(r, &s.out_shape(), &columns(&q, hd, q_cols.clone()));
                    let tk = up(
                        r,
                        &[rows, kv_cols.len()],
                        &columns(&k, kvd, kv_cols.clone()),
                    );
                    let tv = up(
                        r,
                        &[rows, kv_cols.len()],
                        &columns(&v, kvd, kv_cols.clone()),
                    );
                    let td = up(r, &s.out_shape(), &columns(&d_out, hd, q_cols.clone()));
                    let a = kernels::attention_forward_gqa(&tq, &tk, &tv, s, g, None).unwrap();
                    let [gq, gk, gv] =
                        kernels::attention_backward_gqa(&tq, &tk, &tv, &a.probs, &td, s, g, None)
                            .unwrap();
                    assert_eq!(gk.shape(), tk.shape(), "{what}: rank {rank} dk");
                    let (o, gq) = (a.out.to_vec().unwrap(), gq.to_vec().unwrap());
                    let (gk, gv) = (gk.to_vec().unwrap(), gv.to_vec().unwrap());
                    if hs.is_empty() {
                        assert!(o.is_empty() && gq.is_empty(), "{what}: rank {rank}");
                        assert!(
                            gk.iter().chain(&gv).all(|&x| x == 0.0),
                            "{what}: rank {rank} holds no query head, its dk, dv must be 0"
                        );
                    }
                    let n = hs.len() * d;
                    for row in 0..rows {
                        for c in 0..n {
                            out[row * hd + q_cols.start + c] = o[row * n + c];
                            dq[row * hd + q_cols.start + c] = gq[row * n + c];
                        }
                        for c in 0..kv_cols.len() {
                            dk[row * kvd + kv_cols.start + c] += gk[row * kv_cols.len() + c] as f64;
                            dv[row * kvd + kv_cols.start + c] += gv[row * kv_cols.len() + c] as f64;
                        }
                    }
                }
                assert_close(&format!("{what}: out"), &out, &want_out, 1e-5);
                assert_close(&format!("{what}: dq"), &dq, &want_dq, 1e-5);
                let narrow = |x: Vec<f64>| x.iter().map(|&v| v as f32).collect::<Vec<_>>();
                assert_close(&format!("{what}: Σ dk"), &narrow(dk), &want_dk, 1e-5);
                assert_close(&format!("{what}: Σ dv"), &narrow(dv), &want_dv, 1e-5);
            }
        }
    }
}

/// Rows `start..start + len` of every sequence of a `[B·T, w]` tensor.
fn token_rows<T: Copy>(
    x: &[T],
    (b, t, w): (usize, usize, usize),
    start: usize,
    len: usize,
) -> Vec<T> {
    (0..b)
        .flat_map(|s| x[(s * t + start) * w..(s * t + start + len) * w].to_vec())
        .collect()
}

/// Decoding in chunks (so `past > 0`) gives the matching rows of the whole
/// forward, the window counted from the absolute positions, and a cache
/// holding exactly the keys and values so far.
#[test]
fn gqa_decoding_with_a_past_equals_the_whole_forward_rows() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("gqa_decode");
    let chunks = [3, 1, 2, 1];
    let t: usize = chunks.iter().sum();
    // (batch, heads on this rank, q_start, total heads, kv_heads, kv_start, head_dim, window)
    let cases = [
        (2, 4, 0, 4, 2, 0, 6, 0),
        (1, 4, 0, 4, 2, 0, 6, 3),
        (2, 3, 0, 3, 1, 0, 5, 1),
        (1, 2, 3, 6, 1, 1, 6, 2), // query heads 3..5 of 6 reading kv head 1 of 2
        (1, 3, 0, 3, 3, 0, 12, 100),
    ];
    for (b, h, q_start, heads, kv, kv_start, d, w) in cases {
        // kv_start + kv is every key/value head in these cases.
        let g = HeadGroups {
            group: heads / (kv_start + kv),
            q_start,
            kv_start,
            kv_heads: kv,
            window: w,
            softcap: 0.0,
        };
        let (hd, kvd) = (h * d, kv * d);
        let (q, k, v) = (
            rng.vec(b * t * hd),
            rng.vec(b * t * kvd),
            rng.vec(b * t * kvd),
        );
        let whole = Problem {
            b,
            t,
            past: 0,
            h,
            d,
            g,
        };
        let (want, _) = forward(&whole, &widen(&q), &widen(&k), &widen(&v));
        let full = kernels::attention_forward_gqa(
            &up(r, &[b * t, hd], &q),
            &up(r, &[b * t, kvd], &k),
            &up(r, &[b * t, kvd], &v),
            whole.shape(),
            g,
            None,
        )
        .unwrap()
        .out
        .to_vec()
        .unwrap();
        let mut cache: Option<LocalTensor> = None;
        let mut past = 0;
        let (mut got_all, mut want_all, mut full_all) = (vec![], vec![], vec![]);
        for c in chunks {
            let what = format!("{whole:?}: positions {past}..{}", past + c);
            let s = AttentionShape::new(b, c, h, d);
            let dec = kernels::attention_decode_gqa(
                &up(r, &[b * c, hd], &token_rows(&q, (b, t, hd), past, c)),
                &up(r, &[b * c, kvd], &token_rows(&k, (b, t, kvd), past, c)),
                &up(r, &[b * c, kvd], &token_rows(&v, (b, t, kvd), past, c)),
                cache.as_ref(),
                s,
                g,
            )
            .unwrap();
            assert_eq!(dec.out.shape(), s.out_shape(), "{what}");
            assert_eq!(dec.cache.shape(), [past + c, 2, b, kv, d], "{what}");
            let got = dec.out.to_vec().unwrap();
            let want_rows = token_rows(&want, (b, t, hd), past, c);
            // Element-wise per chunk, norm-wise over all chunks below.
            for (i, (g, w)) in got.iter().zip(&want_rows).enumerate() {
                let diff = (*g as f64 - w).abs();
                assert!(
                    diff <= 1e-4 + 1e-3 * w.abs(),
                    "{what}: element {i}: got {g}, want {w}"
                );
            }
            got_all.extend_from_slice(&got);
            want_all.extend(want_rows);
            full_all.extend(widen(&token_rows(&full, (b, t, hd), past, c)));
            cache = Some(dec.cache);
            past += c;
        }
        let what = format!("{whole:?}: all chunks");
        assert_close(&what, &got_all, &want_all, 1e-5);
        let e = rel_err(&got_all, &full_all);
        assert!(
            e <= 1e-6,
            "{what}: differs from the whole forward by {e:.3e}"
        );
        // [T, 2, B, KV, D]: positions outermost, keys then values.
        let mut want_cache = Vec::new();
        for tt in 0..t {
            for x in [&k, &v] {
                for sb in 0..b {
                    for kh in 0..kv {
                        let row = (sb * t + tt) * kvd + kh * d;
                        want_cache.extend_from_slice(&x[row..row + d]);
                    }
                }
            }
        }
        assert_eq!(
            cache.unwrap().to_vec().unwrap(),
            want_cache,
            "{what}: cache"
        );
    }
}

/// The f64 backward above is the gradient of the f64 forward (groups and a
/// window included): central differences of `Σ dO ⊙ out`.
#[test]
fn reference_backward_is_the_gradient_of_reference_forward() {
    let mut rng = Rng::fresh("gqa_reference_fd");
    let p = Problem {
        b: 2,
        t: 5,
        past: 0,
        h: 3,
        d: 3,
        g: HeadGroups {
            group: 3,
            q_start: 0,
            kv_start: 0,
            kv_heads: 1,
            window: 2,
            softcap: 0.0,
        },
    };
    let rows = p.b * p.t;
    let x = [
        widen(&rng.vec(rows * p.h * p.d)),
        widen(&rng.vec(rows * p.d)),
        widen(&rng.vec(rows * p.d)),
    ];
    let go = widen(&rng.vec(rows * p.h * p.d));
    let loss = |x: &[Vec<f64>; 3]| -> f64 {
        let (out, _) = forward(&p, &x[0], &x[1], &x[2]);
        out.iter().zip(&go).map(|(o, g)| o * g).sum()
    };
    let (_, probs) = forward(&p, &x[0], &x[1], &x[2]);
    let want = backward(&p, [&x[0], &x[1], &x[2]], &probs, &go);
    let h = 1e-6;
    for (n, want) in want.iter().enumerate() {
        let fd: Vec<f64> = (0..x[n].len())
            .map(|i| {
                let (mut up, mut down) = (x.clone(), x.clone());
                up[n][i] += h;
                down[n][i] -= h;
                (loss(&up) - loss(&down)) / (2.0 * h)
            })
            .collect();
        let got: Vec<f32> = want.iter().map(|&v| v as f32).collect();
        let e = rel_err(&got, &fd);
        assert!(
            e < 1e-6,
            "input {n}: reference backward vs finite differences {e:.3e}"
        );
    }
}

#[test]
fn gqa_bad_inputs_are_errors_that_leave_the_mesh_usable() {
    let m = mesh(2);
    let (r0, r1) = (&m.ranks()[0], &m.ranks()[1]);
    let mut rng = Rng::fresh("gqa_errors");
    let (b, t, h, kv, d) = (2, 5, 4, 2, 3);
    let rows = b * t;
    let (q, k, v) = (
        rng.vec(rows * h * d),
        rng.vec(rows * kv * d),
        rng.vec(rows * kv * d),
    );
    let (tq, tk, tv) = (
        up(r0, &[rows, h * d], &q),
        up(r0, &[rows, kv * d], &k),
        up(r0, &[rows, kv * d], &v),
    );
    let s = AttentionShape::new(b, t, h, d);
    let g = groups(h, kv, 0);
    let fwd = |q: &LocalTensor, k: &LocalTensor, v: &LocalTensor, s, g| {
        kernels::attention_forward_gqa(q, k, v, s, g, None)
    };
    let shape_err = |res: Result<kernels::Attention, Error>, what: &str| {
        assert!(
            matches!(res, Err(Error::ShapeMismatch { .. })),
            "{what}: {res:?}"
        )
    };
    let invalid = |res: Result<kernels::Attention, Error>, what: &str| {
        assert!(
            matches!(res, Err(Error::InvalidArgument { .. })),
            "{what}: {res:?}"
        )
    };
    // q of the wrong width or rows; k, v of the wrong width or rows.
    let q_narrow = up(r0, &[rows, h * d - 1], &q[..rows * (h * d - 1)]);
    shape_err(fwd(&q_narrow, &tk, &tv, s, g), "q one column short");
    let q_short = up(r0, &[rows - 1, h * d], &q[..(rows - 1) * h * d]);
    shape_err(fwd(&q_short, &tk, &tv, s, g), "q one row short");
    let k_wide = up(r0, &[rows, (kv + 1) * d], &vec![0.5; rows * (kv + 1) * d]);
    shape_err(fwd(&tq, &k_wide, &tv, s, g), "k of 3 kv heads");
    shape_err(fwd(&tq, &tk, &k_wide, s, g), "v of 3 kv heads");
    let k_short = up(r0, &[rows - 2, kv * d], &k[..(rows - 2) * kv * d]);
    shape_err(fwd(&tq, &k_short, &tv, s, g), "k with fewer tokens");
    shape_err(fwd(&tq, &tk, &k_short, s, g), "v with fewer tokens");
    shape_err(fwd(&up(r0, &[rows * h * d], &q), &tk, &tv, s, g), "q 1-D");
    shape_err(
        fwd(
            &tq,
            &tk,
            &tv,
            AttentionShape::new(b, t, h + 1, d),
            HeadGroups { group: 3, ..g },
        ),
        "5 heads disagreeing with q's 4",
    );
    // Query heads reading key/value heads k, v do not hold.
    let more = HeadGroups { kv_heads: 1, ..g };
    let k1 = up(r0, &[rows, d], &k[..rows * d]);
    invalid(
        fwd(&tq, &k1, &k1, s, more),
        "4 query heads of group 2 need 2 kv heads",
    );
    let shifted = HeadGroups { q_start: 2, ..g };
    invalid(
        fwd(&tq, &tk, &tv, s, shifted),
        "query heads 2..6 need kv head 2",
    );
    let late = HeadGroups { kv_start: 1, ..g };
    invalid(
        fwd(&tq, &tk, &tv, s, late),
        "kv heads from 1 miss query head 0's",
    );
    invalid(
        fwd(&tq, &tk, &tv, s, HeadGroups { group: 0, ..g }),
        "group 0",
    );
    invalid(
        fwd(
            &up(r0, &[rows, 0], &[]),
            &up(r0, &[rows, 0], &[]),
            &up(r0, &[rows, 0], &[]),
            AttentionShape::new(b, t, h, 0),
            g,
        ),
        "head_dim 0",
    );
    // dtype and rank.
    let ints = r0
        .upload_i32(&[rows, kv * d], &vec![1; rows * kv * d])
        .unwrap();
    assert!(matches!(
        fwd(&tq, &ints, &tv, s, g),
        Err(Error::DTypeMismatch { .. })
    ));
    let k_r1 = up(r1, &[rows, kv * d], &k);
    assert!(matches!(
        fwd(&tq, &k_r1, &tv, s, g),
        Err(Error::RankMismatch { .. })
    ));
    // Windows are fine whatever their size.
    for w in [1, 3, t, t + 1, 1 << 20] {
        let a = fwd(&tq, &tk, &tv, s, HeadGroups { window: w, ..g });
        assert!(a.is_ok(), "window {w}: {a:?}");
    }

    // Backward: probabilities or dO of the wrong shape, rank or dtype.
    let a = fwd(&tq, &tk, &tv, s, g).unwrap();
    let d_out = rng.vec(rows * h * d);
    let td = up(r0, &[rows, h * d], &d_out);
    let bwd = |p: &LocalTensor, go: &LocalTensor| {
        kernels::attention_backward_gqa(&tq, &tk, &tv, p, go, s, g, None)
    };
    let flat = a.probs.reshape(&[b, h, t * t]).unwrap();
    assert!(matches!(bwd(&flat, &td), Err(Error::ShapeMismatch { .. })));
    assert!(matches!(
        bwd(&a.probs, &tq.reshape(&[rows * h * d]).unwrap()),
        Err(Error::ShapeMismatch { .. })
    ));
    let probs_r1 = r1.zeros(&s.probs_shape(), DType::F32).unwrap();
    assert!(matches!(
        bwd(&probs_r1, &td),
        Err(Error::RankMismatch { .. })
    ));
    let d_int = r0
        .upload_i32(&[rows, h * d], &vec![0; rows * h * d])
        .unwrap();
    assert!(matches!(
        bwd(&a.probs, &d_int),
        Err(Error::DTypeMismatch { .. })
    ));
    assert!(
        kernels::attention_backward_gqa(&tq, &k_wide, &tv, &a.probs, &td, s, g, None).is_err(),
        "backward with k of the wrong width"
    );

    // Decode: caches of the wrong kv heads, head width, batch, rank or dtype.
    let one = AttentionShape::new(b, 1, h, d);
    let (sq, sk) = (
        up(r0, &[b, h * d], &q[..b * h * d]),
        up(r0, &[b, kv * d], &k[..b * kv * d]),
    );
    let dec = |c: &LocalTensor| kernels::attention_decode_gqa(&sq, &sk, &sk, Some(c), one, g);
    let ok = r0.zeros(&[4, 2, b, kv, d], DType::F32).unwrap();
    assert!(dec(&ok).is_ok());
    for bad in [
        [4, 2, b, kv + 1, d],
        [4, 2, b, kv, d + 1],
        [4, 2, b + 1, kv, d],
        [4, 1, b, kv, d],
    ] {
        let c = r0.zeros(&bad, DType::F32).unwrap();
        assert!(
            matches!(dec(&c), Err(Error::ShapeMismatch { .. })),
            "cache {bad:?}"
        );
    }
    let c_r1 = r1.zeros(&[4, 2, b, kv, d], DType::F32).unwrap();
    assert!(matches!(dec(&c_r1), Err(Error::RankMismatch { .. })));
    let c_int = r0.zeros(&[4, 2, b, kv, d], DType::I32).unwrap();
    assert!(matches!(dec(&c_int), Err(Error::DTypeMismatch { .. })));
    assert!(
        kernels::attention_decode_gqa(&sq, &sk, &sk, None, one, HeadGroups { kv_heads: 1, ..g })
            .is_err(),
        "decode with too few kv heads"
    );

    // Still usable: rank 0's forward and backward are right.
    let p = Problem {
        b,
        t,
        past: 0,
        h,
        d,
        g,
    };
    let (q64, k64, v64) = (widen(&q), widen(&k), widen(&v));
    let (want_out, want_probs) = forward(&p, &q64, &k64, &v64);
    let a = fwd(&tq, &tk, &tv, s, g).unwrap();
    assert_close(
        "after errors: out",
        &a.out.to_vec().unwrap(),
        &want_out,
        1e-5,
    );
    let [_, gk, _] = bwd(&a.probs, &td).unwrap();
    let [_, want_dk, _] = backward(&p, [&q64, &k64, &v64], &want_probs, &widen(&d_out));
    assert_close("after errors: dk", &gk.to_vec().unwrap(), &want_dk, 1e-5);
}

/// The cache grows in place (a step writes only its positions), yet a cache
/// decoded from twice (two continuations of one prompt) keeps both: each
/// branch equals the whole forward of its own sequence, and the first
/// branch's cache still holds its keys after the second was written.
#[test]
fn two_continuations_of_one_cache_stay_apart() {
    let mut rng = Rng::fresh("gqa_branches");
    let m = mesh(1);
    let r = &m.ranks()[0];
    let (h, kv, d) = (4, 2, 3);
    let g = groups(h, kv, 0);
    let (hd, kvd) = (h * d, kv * d);
    let prompt = 3;
    // Rows 0..3: the prompt; 3: branch A's token, 4: branch B's, 5: A's next.
    let (q, k, v) = (rng.vec(6 * hd), rng.vec(6 * kvd), rng.vec(6 * kvd));
    let rows = |x: &[f32], w: usize, idx: &[usize]| -> Vec<f32> {
        idx.iter()
            .flat_map(|&i| x[i * w..(i + 1) * w].to_vec())
            .collect()
    };
    let step = |idx: &[usize], cache: Option<&LocalTensor>| {
        let n = idx.len();
        kernels::attention_decode_gqa(
            &up(r, &[n, hd], &rows(&q, hd, idx)),
            &up(r, &[n, kvd], &rows(&k, kvd, idx)),
            &up(r, &[n, kvd], &rows(&v, kvd, idx)),
            cache,
            AttentionShape::new(1, n, h, d),
            g,
        )
        .unwrap()
    };
    let whole = |idx: &[usize]| {
        let n = idx.len();
        let a = kernels::attention_forward_gqa(
            &up(r, &[n, hd], &rows(&q, hd, idx)),
            &up(r, &[n, kvd], &rows(&k, kvd, idx)),
            &up(r, &[n, kvd], &rows(&v, kvd, idx)),
            AttentionShape::new(1, n, h, d),
            g,
            None,
        )
        .unwrap();
        let out = a.out.to_vec().unwrap();
        widen(&out[(n - 1) * hd..])
    };
    let p = step(&[0, 1, 2], None);
    let a = step(&[3], Some(&p.cache));
    let b = step(&[4], Some(&p.cache));
    let a2 = step(&[5], Some(&a.cache));
    let b2 = step(&[5], Some(&b.cache));
    for (what, got, seq) in [
        ("branch A", &a.out, vec![0, 1, 2, 3]),
        ("branch B", &b.out, vec![0, 1, 2, 4]),
        ("branch A, next", &a2.out, vec![0, 1, 2, 3, 5]),
        ("branch B, next", &b2.out, vec![0, 1, 2, 4, 5]),
    ] {
        let e = rel_err(&got.to_vec().unwrap(), &whole(&seq));
        assert!(
            e <= 1e-6,
            "{what}: differs from the whole forward by {e:.3e}"
        );
    }
    // Position `prompt` of A's cache holds A's key, not B's.
    let row = 2 * kvd;
    let cache_a = a.cache.to_vec().unwrap();
    assert_eq!(
        &cache_a[prompt * row..prompt * row + kvd],
        &k[3 * kvd..4 * kvd]
    );
    let cache_b = b.cache.to_vec().unwrap();
    assert_eq!(
        &cache_b[prompt * row..prompt * row + kvd],
        &k[4 * kvd..5 * kvd]
    );
}
