//! Softmax cross-entropy pieces (one vocab shard, padding columns included)
//! and the single-rank chain with its gradient, against f64.

use crate::util::reference::{self, widen};
use crate::util::{Rng, assert_close, mesh};
use wgpu_tp::kernels::{self, CrossEntropyOptions, VocabShard};
use wgpu_tp::{Error, LocalTensor, Rank};

const NEG_BIG: f64 = -3.4e38;

/// Valid local columns of a shard of `vr` columns.
fn valid_cols(shard: VocabShard, vr: usize) -> usize {
    shard.valid_vocab.saturating_sub(shard.start).min(vr)
}

fn owned(shard: VocabShard, vr: usize, t: i32) -> Option<usize> {
    let j = t as i64 - shard.start as i64;
    (0..valid_cols(shard, vr) as i64)
        .contains(&j)
        .then_some(j as usize)
}

/// The f64 reference loss and gradient with `k` valid columns of `v` (the
/// rest padding), scaled per row by `scale`.
fn f64_loss(
    z: &[f32],
    (v, k): (usize, usize),
    targets: &[i32],
    scale: &[f32],
    opts: &CrossEntropyOptions,
) -> reference::CrossEntropy {
    let alpha = opts.label_smoothing as f64;
    reference::cross_entropy(z, (v, k), targets, alpha, opts.ignore_index, &widen(scale))
}

fn up(r: &Rank, shape: &[usize], v: &[f32]) -> LocalTensor {
    r.upload(shape, v).unwrap()
}

#[test]
fn pieces_on_a_padded_shard_match_f64() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("ce_pieces");
    // (T, Vr, start, valid_vocab): padding inside the shard, a shard wholly in
    // padding, and one with no padding; widths off and on a multiple of 4
    // (the kernels' whole-vec4 rows), valid columns ending mid-vec4.
    for &(t_rows, vr, start, valid) in &[
        (7usize, 13usize, 5usize, 14usize),
        (13, 17, 34, 40),
        (17, 7, 21, 21),
        (5, 9, 9, 100),
        (7, 12, 5, 14),
        (6, 16, 0, 16),
        (3, 8, 8, 10),
    ] {
        let shard = VocabShard {
            start,
            valid_vocab: valid,
        };
        let vc = valid_cols(shard, vr);
        let mut z: Vec<f32> = rng.vec(t_rows * vr).iter().map(|x| 4.0 * x).collect();
        for row in 0..t_rows {
            for j in vc..vr {
                z[row * vr + j] = 1e3; // padding must not leak into anything
            }
        }
        let targets: Vec<i32> = (0..t_rows)
            .map(|_| rng.below(start + vr + 6) as i32 - 3)
            .collect();
        let tz = up(r, &[t_rows, vr], &z);
        let tt = r.upload_i32(&[t_rows], &targets).unwrap();

        let mut want_max = vec![NEG_BIG; t_rows];
        let mut want_sum = vec![0.0; t_rows];
        let mut want_tl = vec![0.0; t_rows];
        for row in 0..t_rows {
            for j in 0..vc {
                let x = z[row * vr + j] as f64;
                want_max[row] = want_max[row].max(x);
                want_sum[row] += x;
            }
            if let Some(j) = owned(shard, vr, targets[row]) {
                want_tl[row] = z[row * vr + j] as f64;
            }
        }
        let got_max = kernels::row_max(&tz, shard).unwrap().to_vec().unwrap();
        assert_close("row_max", &got_max, &want_max, 1e-6);
        let got = kernels::row_sum(&tz, shard).unwrap().to_vec().unwrap();
        assert_close("row_sum", &got, &want_sum, 1e-5);
        let got = kernels::target_logit(&tz, &tt, shard)
            .unwrap()
            .to_vec()
            .unwrap();
        assert_close("target_logit", &got, &want_tl, 1e-6);

        // A "global" max at or above the local one, as after the all-reduce.
        let gmax: Vec<f32> = want_max
            .iter()
            .map(|&x| {
                if x == NEG_BIG {
                    2.5
                } else {
                    x as f32 + rng.uniform(0.0, 2.0)
                }
            })
            .collect();
        let tm = up(r, &[t_rows], &gmax);
        let want: Vec<f64> = (0..t_rows)
            .map(|row| {
                (0..vc)
                    .map(|j| (z[row * vr + j] as f64 - gmax[row] as f64).exp())
                    .sum()
            })
            .collect();
        let got_s = kernels::row_sum_exp(&tz, &tm, shard).unwrap();
        assert_close("row_sum_exp", &got_s.to_vec().unwrap(), &want, 1e-5);

        // ce_grad on the shard, with smoothing and an ignored row.
        let opts = CrossEntropyOptions {
            ignore_index: Some(targets[0]),
            label_smoothing: 0.1,
        };
        let s_glob: Vec<f32> = want.iter().map(|&x| x as f32 + 1.5).collect();
        let scale = rng.vec(t_rows);
        let g = kernels::ce_grad(
            &tz,
            &tm,
            &up(r, &[t_rows], &s_glob),
            &tt,
            &up(r, &[t_rows], &scale),
            shard,
            &opts,
        )
        .unwrap();
        assert_eq!(g.shape(), &[t_rows, vr]);
        let mut want = vec![0.0; t_rows * vr];
        for row in 0..t_rows {
            if targets[row] == targets[0] {
                continue;
            }
            for j in 0..vc {
                let p = (z[row * vr + j] as f64 - gmax[row] as f64).exp() / s_glob[row] as f64;
                let hot = if owned(shard, vr, targets[row]) == Some(j) {
                    0.9
                } else {
                    0.0
                };
                want[row * vr + j] = scale[row] as f64 * (p - hot - 0.1 / valid as f64);
            }
        }
        assert_close("ce_grad", &g.to_vec().unwrap(), &want, 1e-5);
    }
}

#[test]
fn ce_loss_combines_reduced_pieces() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("ce_loss");
    let t_rows = 13;
    let k = 50;
    let max: Vec<f32> = rng.vec(t_rows).iter().map(|x| 10.0 * x).collect();
    let s: Vec<f32> = (0..t_rows).map(|_| rng.uniform(1.0, 40.0)).collect();
    let tl: Vec<f32> = max.iter().map(|&x| x - rng.uniform(0.0, 5.0)).collect();
    let zs: Vec<f32> = rng.vec(t_rows).iter().map(|x| 30.0 * x).collect();
    let targets: Vec<i32> = (0..t_rows).map(|i| (i as i32 * 7) % k as i32).collect();
    let (tm, ts, ttl, tzs) = (
        up(r, &[t_rows], &max),
        up(r, &[t_rows], &s),
        up(r, &[t_rows], &tl),
        up(r, &[t_rows], &zs),
    );
    let tt = r.upload_i32(&[t_rows], &targets).unwrap();
    for &(alpha, ignore) in &[(0.0f32, None), (0.2, Some(14)), (1.0, Some(0))] {
        let opts = CrossEntropyOptions {
            ignore_index: ignore,
            label_smoothing: alpha,
        };
        let got = kernels::ce_loss(&tm, &ts, &ttl, Some(&tzs), &tt, k, &opts)
            .unwrap()
            .to_vec()
            .unwrap();
        let a = alpha as f64;
        let want: Vec<f64> = (0..t_rows)
            .map(|i| {
                if ignore == Some(targets[i]) {
                    return 0.0;
                }
                let lse = (s[i] as f64).ln() + max[i] as f64;
                (1.0 - a) * (lse - tl[i] as f64) + a * (lse - zs[i] as f64 / k as f64)
            })
            .collect();
        assert_close("ce_loss", &got, &want, 1e-5);
    }
}

/// The vocab-parallel recipe on host-reduced pieces equals the one-rank loss:
/// a padded vocab (21 real of 24) split into 3 shards of 8 columns.
#[test]
fn sharded_pieces_reduce_to_full_loss() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("ce_sharded");
    let (t_rows, vr, p, k) = (7usize, 8usize, 3usize, 21usize);
    let v = vr * p;
    let z: Vec<f32> = rng.vec(t_rows * v).iter().map(|x| 5.0 * x).collect();
    let mut targets: Vec<i32> = (0..t_rows).map(|_| rng.below(k) as i32).collect();
    targets[1] = -100;
    let opts = CrossEntropyOptions {
        ignore_index: Some(-100),
        label_smoothing: 0.15,
    };
    let tt = r.upload_i32(&[t_rows], &targets).unwrap();
    let shards: Vec<(VocabShard, LocalTensor)> = (0..p)
        .map(|s| {
            let mut part = Vec::with_capacity(t_rows * vr);
            for row in 0..t_rows {
                part.extend_from_slice(&z[row * v + s * vr..row * v + (s + 1) * vr]);
            }
            let shard = VocabShard {
                start: s * vr,
                valid_vocab: k,
            };
            (shard, up(r, &[t_rows, vr], &part))
        })
        .collect();
    // Host "all-reduces" of the per-shard pieces.
    let reduce = |f: &dyn Fn(&VocabShard, &LocalTensor) -> Vec<f32>, max: bool| {
        let mut acc = vec![if max { f32::MIN } else { 0.0 }; t_rows];
        for (sh, tz) in &shards {
            for (a, x) in acc.iter_mut().zip(f(sh, tz)) {
                *a = if max { a.max(x) } else { *a + x };
            }
        }
        up(r, &[t_rows], &acc)
    };
    let gmax = reduce(
        &|sh, tz| kernels::row_max(tz, *sh).unwrap().to_vec().unwrap(),
        true,
    );
    let gsum = reduce(
        &|sh, tz| {
            kernels::row_sum_exp(tz, &gmax, *sh)
                .unwrap()
                .to_vec()
                .unwrap()
        },
        false,
    );
    let gtl = reduce(
        &|sh, tz| {
            kernels::target_logit(tz, &tt, *sh)
                .unwrap()
                .to_vec()
                .unwrap()
        },
        false,
    );
    let gzs = reduce(
        &|sh, tz| kernels::row_sum(tz, *sh).unwrap().to_vec().unwrap(),
        false,
    );
    let loss = kernels::ce_loss(&gmax, &gsum, &gtl, Some(&gzs), &tt, k, &opts).unwrap();
    let scale = vec![1.0f32 / 6.0; t_rows];
    let want = f64_loss(&z, (v, k), &targets, &scale, &opts);
    assert_close("sharded loss", &loss.to_vec().unwrap(), &want.loss, 1e-5);
    let tscale = up(r, &[t_rows], &scale);
    for (sh, tz) in &shards {
        let g = kernels::ce_grad(tz, &gmax, &gsum, &tt, &tscale, *sh, &opts)
            .unwrap()
            .to_vec()
            .unwrap();
        let mut w = Vec::new();
        for row in 0..t_rows {
            w.extend_from_slice(&want.grad[row * v + sh.start..row * v + sh.start + vr]);
        }
        assert_close("sharded grad", &g, &w, 1e-5);
    }
}

/// Loss and gradient of `z` (`[t_rows, v]`) against the f64 reference.
fn check_full(
    r: &Rank,
    z: &[f32],
    (t_rows, v): (usize, usize),
    targets: &[i32],
    scale: &[f32],
    opts: &CrossEntropyOptions,
    what: &str,
) {
    let tz = up(r, &[t_rows, v], z);
    let tt = r.upload_i32(&[t_rows], targets).unwrap();
    let out = kernels::cross_entropy(&tz, &tt, opts).unwrap();
    let g =
        kernels::cross_entropy_backward(&tz, &tt, &out, &up(r, &[t_rows], scale), opts).unwrap();
    let want = f64_loss(z, (v, v), targets, scale, opts);
    assert_close(what, &out.loss.to_vec().unwrap(), &want.loss, 1e-5);
    assert_close(what, &g.to_vec().unwrap(), &want.grad, 1e-5);
}

#[test]
fn full_cross_entropy_and_gradient_match_f64() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("cross_entropy");
    for &(t_rows, v) in &[(7usize, 17usize), (13, 32), (17, 300), (1, 1)] {
        let z: Vec<f32> = rng.vec(t_rows * v).iter().map(|x| 6.0 * x).collect();
        let mut targets: Vec<i32> = (0..t_rows).map(|_| rng.below(v) as i32).collect();
        targets[0] = -100;
        let n = targets.iter().filter(|&&t| t != -100).count().max(1);
        let scale: Vec<f32> = targets
            .iter()
            .map(|&t| if t == -100 { 0.0 } else { 1.0 / n as f32 })
            .collect();
        for (opts, what) in [
            (CrossEntropyOptions::default(), "plain"),
            (
                CrossEntropyOptions {
                    ignore_index: Some(-100),
                    label_smoothing: 0.0,
                },
                "ignore_index",
            ),
            (
                CrossEntropyOptions {
                    ignore_index: Some(-100),
                    label_smoothing: 0.1,
                },
                "label smoothing",
            ),
        ] {
            check_full(r, &z, (t_rows, v), &targets, &scale, &opts, what);
        }
        // An ignore_index that is a real class, with a non-zero scale on the
        // ignored rows: they still get zero loss and gradient.
        let opts = CrossEntropyOptions {
            ignore_index: Some(targets[t_rows - 1]),
            label_smoothing: 0.05,
        };
        check_full(
            r,
            &z,
            (t_rows, v),
            &targets,
            &rng.vec(t_rows),
            &opts,
            "ignore class",
        );
    }
}

#[test]
fn extreme_logits_stay_finite_and_correct() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("ce_extreme");
    let (t_rows, v) = (13, 37);
    let z: Vec<f32> = (0..t_rows * v)
        .map(|_| match rng.below(4) {
            0 => 1e4,
            1 => -1e4,
            _ => rng.uniform(-3.0, 3.0),
        })
        .collect();
    let targets: Vec<i32> = (0..t_rows).map(|_| rng.below(v) as i32).collect();
    let scale = rng.vec(t_rows);
    for alpha in [0.0, 0.1] {
        let opts = CrossEntropyOptions {
            ignore_index: None,
            label_smoothing: alpha,
        };
        check_full(r, &z, (t_rows, v), &targets, &scale, &opts, "extreme");
    }
}

#[test]
fn closed_form_arange_logits() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let v = 32;
    let t_rows = 32;
    let z: Vec<f32> = (0..t_rows).flat_map(|_| (0..v).map(|k| k as f32)).collect();
    let targets: Vec<i32> = (0..t_rows as i32).map(|i| (2 * i) % v as i32).collect();
    let tz = up(r, &[t_rows, v], &z);
    let tt = r.upload_i32(&[t_rows], &targets).unwrap();
    let out = kernels::cross_entropy(&tz, &tt, &CrossEntropyOptions::default()).unwrap();
    let lse = (0..v).map(|k| (k as f64).exp()).sum::<f64>().ln();
    let want: Vec<f64> = targets.iter().map(|&t| lse - t as f64).collect();
    assert_close("closed form", &out.loss.to_vec().unwrap(), &want, 1e-5);
}

#[test]
fn cross_entropy_errors_leave_mesh_usable() {
    let m = mesh(2);
    let (r0, r1) = (&m.ranks()[0], &m.ranks()[1]);
    let z = up(r0, &[2, 3], &[0.0, 1.0, 2.0, 2.0, 1.0, 0.0]);
    let t = r0.upload_i32(&[2], &[2, 0]).unwrap();
    let t_f32 = up(r0, &[2], &[2.0, 0.0]);
    let t_r1 = r1.upload_i32(&[2], &[2, 0]).unwrap();
    let t_short = r0.upload_i32(&[1], &[2]).unwrap();
    let o = CrossEntropyOptions::default();
    let sh = VocabShard::full(3);
    assert!(matches!(
        kernels::cross_entropy(&z, &t_f32, &o),
        Err(Error::DTypeMismatch { .. })
    ));
    assert!(matches!(
        kernels::cross_entropy(&z, &t_short, &o),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        kernels::cross_entropy(&z, &t_r1, &o),
        Err(Error::RankMismatch { .. })
    ));
    assert!(matches!(
        kernels::row_max(&z.reshape(&[6]).unwrap(), sh),
        Err(Error::ShapeMismatch { .. })
    ));
    let mx = kernels::row_max(&z, sh).unwrap();
    let mx_r1 = up(r1, &[2], &[2.0, 2.0]);
    assert!(matches!(
        kernels::row_sum_exp(&z, &mx_r1, sh),
        Err(Error::RankMismatch { .. })
    ));
    let se = kernels::row_sum_exp(&z, &mx, sh).unwrap();
    let smooth = CrossEntropyOptions {
        ignore_index: None,
        label_smoothing: 0.1,
    };
    assert!(matches!(
        kernels::ce_loss(&mx, &se, &mx, None, &t, 3, &smooth),
        Err(Error::InvalidArgument { .. })
    ));
    let bad = CrossEntropyOptions {
        ignore_index: None,
        label_smoothing: 1.5,
    };
    assert!(matches!(
        kernels::cross_entropy(&z, &t, &bad),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        kernels::ce_grad(&z, &mx, &se, &t, &t_f32.reshape(&[1, 2]).unwrap(), sh, &o),
        Err(Error::ShapeMismatch { .. })
    ));

    let out = kernels::cross_entropy(&z, &t, &o).unwrap();
    let lse = (1.0f64 + 1f64.exp() + 2f64.exp()).ln();
    assert_close(
        "after errors",
        &out.loss.to_vec().unwrap(),
        &[lse - 2.0, lse - 2.0],
        1e-6,
    );
}

/// A vocab shard of more than 65535 columns: Mesa < 24's llvmpipe (a CPU
/// adapter; GPUs on that Mesa are not limited) ends an
/// invocation's loops after 65535 iterations in all, which would cut the
/// row reductions short, so there it is an error saying what to do; every
/// other adapter gives the f64 reference.
#[test]
fn row_reductions_past_65535_columns_are_right_or_refused() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("ce-wide");
    let (rows, cols) = (2, 70_001);
    // Multiples of 1/64 in [0, 1): every partial sum is exact in f32, so a
    // loop cut short shows as a wrong sum, not as rounding.
    let mut z: Vec<f32> = (0..rows * cols)
        .map(|_| rng.below(64) as f32 / 64.0)
        .collect();
    // The largest entry of each row sits past column 65535.
    z[68_000] = 9.0;
    z[cols + 69_999] = 8.5;
    let t = up(r, &[rows, cols], &z);
    let shard = VocabShard::full(cols);
    let old_mesa = super::loop_limit::loop_limited(r);
    let max = kernels::row_max(&t, shard);
    if old_mesa {
        let e = max.expect_err("Mesa < 24 cuts loops past 65535 iterations");
        assert!(matches!(e, Error::Unsupported { .. }), "{e}");
        assert!(e.to_string().contains("65535"), "{e}");
        // The mesh stays usable.
        let small = up(r, &[1, 3], &[1.0, 3.0, 2.0]);
        let got = kernels::row_max(&small, VocabShard::full(3)).unwrap();
        assert_eq!(got.to_vec().unwrap(), vec![3.0]);
        return;
    }
    let max = max.unwrap();
    assert_eq!(max.to_vec().unwrap(), vec![9.0, 8.5]);
    let sums = kernels::row_sum(&t, shard).unwrap().to_vec().unwrap();
    let want: Vec<f32> = z.chunks(cols).map(|r| r.iter().sum()).collect();
    assert_eq!(sums, want, "every column summed");
}
