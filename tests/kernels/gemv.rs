//! The small-M GEMM (`GemmVariant::Gemv`, `shaders/gemv.wgsl`) against an
//! f64 reference: 1..=8 rows, B `[N, K]` and `[K, N]` read as stored, ragged
//! K and N (vec4 and element-wise bindings), bias, accumulate, A transposed,
//! f16 operands; `Auto` takes it for small M, and refuses nothing it did.

use crate::util::{Rng, assert_close_cancelling, f16_meshes, mesh, reference, round_f16};
use wgpu_tp::half::f16;
use wgpu_tp::kernels::{self, GemmOptions, GemmVariant};
use wgpu_tp::{DType, Rank};

/// `op(A)·op(B) (+ bias) (+ acc)` in f64 and the same of the magnitudes
/// (the scale of each entry's rounding).
#[allow(clippy::too_many_arguments)]
pub(super) fn want(
    a: &[f32],
    b: &[f32],
    (m, n, k): (usize, usize, usize),
    (ta, tb): (bool, bool),
    bias: Option<&[f32]>,
    acc: Option<&[f32]>,
) -> (Vec<f64>, Vec<f64>) {
    let abs = |v: &[f32]| v.iter().map(|x| x.abs()).collect::<Vec<_>>();
    let one = |a: &[f32], b: &[f32], bias: Option<&[f32]>, acc: Option<&[f32]>| {
        let mut c = reference::gemm(a, b, m, n, k, ta, tb);
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] += bias.map_or(0.0, |b| b[j] as f64);
                c[i * n + j] += acc.map_or(0.0, |a| a[i * n + j] as f64);
            }
        }
        c
    };
    let (bias_abs, acc_abs) = (bias.map(abs), acc.map(abs));
    (
        one(a, b, bias, acc),
        one(&abs(a), &abs(b), bias_abs.as_deref(), acc_abs.as_deref()),
    )
}

/// One f32 case with `variant`, against the reference.
fn check(
    r: &Rank,
    rng: &mut Rng,
    (m, n, k): (usize, usize, usize),
    ta: bool,
    tb: bool,
    variant: GemmVariant,
) {
    let (a, b, bias, acc) = (rng.vec(m * k), rng.vec(k * n), rng.vec(n), rng.vec(m * n));
    let a_t = r.upload(&if ta { [k, m] } else { [m, k] }, &a).unwrap();
    let b_t = r.upload(&if tb { [n, k] } else { [k, n] }, &b).unwrap();
    let (bias_t, acc_t) = (
        r.upload(&[n], &bias).unwrap(),
        r.upload(&[m, n], &acc).unwrap(),
    );
    for (with_bias, with_acc) in [(false, false), (true, false), (true, true)] {
        let opts = GemmOptions::new()
            .trans_a(ta)
            .trans_b(tb)
            .bias(with_bias.then_some(&bias_t))
            .accumulate(with_acc.then_some(&acc_t));
        let got = kernels::gemm(&a_t, &b_t, opts.variant(variant)).unwrap();
        assert_eq!(got.shape(), &[m, n]);
        let (w, scale) = want(
            &a,
            &b,
            (m, n, k),
            (ta, tb),
            with_bias.then_some(&bias[..]),
            with_acc.then_some(&acc[..]),
        );
        let what = format!(
            "gemv {variant:?} m={m} n={n} k={k} ta={ta} tb={tb} bias={with_bias} acc={with_acc}"
        );
        assert_close_cancelling(&what, &got.to_vec().unwrap(), &w, &scale, 1e-5);
    }
}

#[test]
fn gemv_matches_f64_every_layout_ragged() {
    let mesh = mesh(1);
    let r = &mesh.ranks()[0];
    let mut rng = Rng::fresh("gemv");
    // Each row-count pipeline (1, 2, 4, 8; 3 runs 4 with a clamped row), K and N whole vec4s or not, a column group cut by N,
    // and a long K (a layer's width).
    let sizes = [
        (13, 17),
        (16, 12),
        (7, 20),
        (1, 1),
        (5, 3),
        (36, 768),
        (129, 13),
    ];
    for m in [1, 2, 3, 8] {
        for &(n, k) in &sizes {
            for tb in [true, false] {
                check(r, &mut rng, (m, n, k), false, tb, GemmVariant::Gemv);
            }
        }
    }
    // A stored [K, M] (packed: it is at most 8 columns).
    for tb in [true, false] {
        check(r, &mut rng, (3, 17, 13), true, tb, GemmVariant::Gemv);
    }
    // Auto takes the GEMV for small M, the general kernels beyond.
    for m in [1, 8, 9] {
        check(r, &mut rng, (m, 19, 24), false, true, GemmVariant::Auto);
    }
}

#[test]
fn gemv_refuses_more_rows_than_it_takes() {
    let mesh = mesh(1);
    let r = &mesh.ranks()[0];
    let a = r.upload(&[9, 4], &[0.5; 36]).unwrap();
    let b = r.upload(&[4, 4], &[0.5; 16]).unwrap();
    let err = kernels::gemm(&a, &b, GemmOptions::default().variant(GemmVariant::Gemv)).unwrap_err();
    assert!(err.to_string().contains("rows"), "{err}");
    // The device stays usable.
    let ok = kernels::gemm(&a, &b, GemmOptions::default().variant(GemmVariant::Auto)).unwrap();
    assert_eq!(ok.to_vec().unwrap(), vec![1.0; 36]);
}

#[test]
fn gemv_f16_operands_accumulate_in_f32() {
    let Some([(_, mesh), _]) = f16_meshes(1, "f16 gemv") else {
        return;
    };
    let r = &mesh.ranks()[0];
    let mut rng = Rng::fresh("gemv_f16");
    for &(m, n, k) in &[(1, 13, 17), (3, 16, 12), (8, 7, 20), (2, 36, 256)] {
        for tb in [true, false] {
            let (a, b, bias) = (
                round_f16(&rng.vec(m * k)),
                round_f16(&rng.vec(k * n)),
                rng.vec(n),
            );
            let half = |v: &[f32]| v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>();
            let a_t = r.upload_f16(&[m, k], &half(&a)).unwrap();
            let b_t = r
                .upload_f16(&if tb { [n, k] } else { [k, n] }, &half(&b))
                .unwrap();
            let bias_t = r.upload(&[n], &bias).unwrap();
            let (w, scale) = want(&a, &b, (m, n, k), (false, tb), Some(&bias), None);
            for out in [DType::F32, DType::F16] {
                let opts = GemmOptions::new().trans_b(tb).bias(&bias_t).out_dtype(out);
                let got = kernels::gemm(&a_t, &b_t, opts.variant(GemmVariant::Gemv)).unwrap();
                assert_eq!(got.dtype(), out);
                let got = kernels::cast(&got, DType::F32).unwrap().to_vec().unwrap();
                // f32 output: f32 accumulation; f16 output: one rounding at the end.
                let tol = if out == DType::F32 { 1e-5 } else { 1e-3 };
                let what = format!("gemv f16 → {out:?} m={m} n={n} k={k} tb={tb}");
                assert_close_cancelling(&what, &got, &w, &scale, tol);
            }
        }
    }
}

/// Every workgroup size the tuner measures (`device::tune`) computes the
/// same bits, so a measured choice changes speed only: ragged N and K, both
/// layouts (vec4 and element-wise bindings), 1 and 3 rows, against f64 too.
#[test]
fn every_measured_workgroup_size_gives_the_same_bits() {
    let mut rng = Rng::fresh("gemv_workgroups");
    let m1 = mesh(1);
    let r = &m1.ranks()[0];
    for (m, n, k) in [(1, 1031, 612), (3, 130, 67)] {
        for tb in [true, false] {
            let (a, b) = (rng.vec(m * k), rng.vec(n * k));
            let a_t = r.upload(&[m, k], &a).unwrap();
            let b_t = r.upload(&if tb { [n, k] } else { [k, n] }, &b).unwrap();
            let (want, scale) = want(&a, &b, (m, n, k), (false, tb), None, None);
            let mut first: Option<Vec<u32>> = None;
            for &wg in &kernels::gemv::CANDIDATES {
                let what = format!("M {m} N {n} K {k} trans_b {tb} c {wg}");
                let c = kernels::gemv::gemv_with_candidate(&a_t, &b_t, tb, wg).unwrap();
                let got = c.to_vec().unwrap();
                assert_close_cancelling(&what, &got, &want, &scale, 1e-5);
                let bits: Vec<u32> = got.iter().map(|x| x.to_bits()).collect();
                match &first {
                    None => first = Some(bits),
                    Some(f) => assert_eq!(&bits, f, "{what}: bits differ from c = 1"),
                }
            }
            assert!(kernels::gemv::gemv_with_candidate(&a_t, &b_t, tb, 3).is_err());
        }
    }
}
