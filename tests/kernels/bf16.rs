//! Weights kept in bf16 (two per word) or f16 beside f32 activations:
//! the casts bit for bit against the host's `half::bf16`, the small-M GEMM
//! reading bf16 / f16 B as stored and the other GEMM kernels taking it
//! widened, all against f64 on the widened weights (1e-5), ragged sizes,
//! both layouts, bias and accumulate.

use crate::util::{Rng, assert_close_cancelling, mesh, reference, round_bf16, round_f16};
use wgpu_tp::half::{bf16, f16};
use wgpu_tp::kernels::{self, GemmOptions, GemmVariant};
use wgpu_tp::{DType, Rank};

fn to_bf16(v: &[f32]) -> Vec<bf16> {
    v.iter().map(|&x| bf16::from_f32(x)).collect()
}

/// Narrowing on the device equals the host's round-to-nearest-even bit for
/// bit (ties both ways, overflow to infinity, NaN, subnormals, odd counts);
/// widening is exact; f16 ↔ bf16 goes through f32.
#[test]
fn bf16_casts_round_like_the_host() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("bf16_cast");
    let mut x: Vec<f32> = rng.vec(4099).iter().map(|v| v * 1e3).collect();
    // Ties (the dropped half exactly 0x8000) to even, either way.
    x.extend([
        f32::from_bits(0x3f80_8000),
        f32::from_bits(0x3f81_8000),
        f32::from_bits(0x3f80_8001),
        f32::MAX,
        -f32::MAX,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MIN_POSITIVE / 3.0,
        -0.0,
        0.0,
    ]);
    for n in [x.len(), 1, 7, 13] {
        let x = &x[x.len() - n..];
        let t = r.upload(&[n], x).unwrap();
        let h = kernels::cast(&t, DType::BF16).unwrap();
        assert_eq!(h.dtype(), DType::BF16);
        let got = h.to_vec().unwrap();
        for (i, (g, w)) in got.iter().zip(to_bf16(x)).enumerate() {
            assert_eq!(
                g.to_bits(),
                w.to_f32().to_bits(),
                "n {n} element {i} of {}",
                x[i]
            );
        }
        let back = kernels::cast(&h, DType::F32).unwrap().to_vec().unwrap();
        assert_eq!(back, got);
    }
    let nan = r.upload(&[3], &[f32::NAN, 1.0, -f32::NAN]).unwrap();
    let got = kernels::cast(&nan, DType::BF16).unwrap().to_vec().unwrap();
    assert!(
        got[0].is_nan() && got[2].is_nan() && got[1] == 1.0,
        "{got:?}"
    );
    // Uploaded bf16 reads back as stored.
    let up = r.upload_bf16(&[5], &to_bf16(&x[..5])).unwrap();
    assert_eq!(up.to_vec().unwrap(), round_bf16(&x[..5]));
    if r.device().has_f16() {
        let h = kernels::cast(&up, DType::F16).unwrap();
        assert_eq!(h.dtype(), DType::F16);
        let want = round_f16(&round_bf16(&x[..5]));
        assert_eq!(
            kernels::cast(&h, DType::F32).unwrap().to_vec().unwrap(),
            want
        );
    }
}

/// `op(A)·op(B) (+ bias) (+ acc)` in f64, with the magnitudes' product.
fn want(
    a: &[f32],
    b: &[f32],
    (m, n, k): (usize, usize, usize),
    tb: bool,
    bias: &[f32],
    acc: Option<&[f32]>,
) -> (Vec<f64>, Vec<f64>) {
    let abs = |v: &[f32]| v.iter().map(|x| x.abs()).collect::<Vec<_>>();
    let one = |a: &[f32], b: &[f32], bias: &[f32], acc: Option<Vec<f32>>| {
        let mut c = reference::gemm(a, b, m, n, k, false, tb);
        for (i, c) in c.iter_mut().enumerate() {
            *c += bias[i % n] as f64 + acc.as_ref().map_or(0.0, |a| a[i] as f64);
        }
        c
    };
    (
        one(a, b, bias, acc.map(|a| a.to_vec())),
        one(&abs(a), &abs(b), &abs(bias), acc.map(abs)),
    )
}

/// B uploaded as `dtype` (bf16 or f16) from values already representable.
pub(super) fn upload_weight(
    r: &Rank,
    shape: &[usize],
    b: &[f32],
    dtype: DType,
) -> wgpu_tp::LocalTensor {
    match dtype {
        DType::BF16 => r.upload_bf16(shape, &to_bf16(b)).unwrap(),
        _ => {
            let h: Vec<f16> = b.iter().map(|&x| f16::from_f32(x)).collect();
            r.upload_f16(shape, &h).unwrap()
        }
    }
}

/// f32 A times a bf16 (or f16) B through `variant`, against f64 on the
/// widened weight, for 1..=8 rows (the small-M kernel) and more (widened).
fn check_narrow_weights(dtype: DType, label: &str, rows: &[usize]) {
    let m1 = mesh(1);
    let r = &m1.ranks()[0];
    let round = |v: &[f32]| {
        if dtype == DType::BF16 {
            round_bf16(v)
        } else {
            round_f16(v)
        }
    };
    let mut rng = Rng::fresh(label);
    // K a multiple of 8 takes bf16's eight-wide loads (`gemv_nk8`).
    let sizes = [
        (13, 17),
        (16, 12),
        (7, 20),
        (1, 1),
        (5, 3),
        (36, 768),
        (129, 13),
        (13, 24),
        (9, 8),
    ];
    // Row counts: each compiles its own pipelines (a constant), which is
    // this test's time with a fresh shader cache.
    let mut cases: Vec<(usize, usize, usize, GemmVariant)> = Vec::new();
    for &m in rows {
        cases.extend(sizes.iter().map(|&(n, k)| (m, n, k, GemmVariant::Gemv)));
    }
    // Past the small-M kernel's rows the weight is widened for the call
    // (before any kernel is chosen, so one ragged case per variant).
    for v in [GemmVariant::Auto, GemmVariant::Buffer, GemmVariant::Tiled] {
        cases.push((9, 19, 24, v));
    }
    cases.push((17, 13, 7, GemmVariant::Auto));
    for (m, n, k, variant) in cases {
        for tb in [true, false] {
            let (a, b, bias, acc) = (
                rng.vec(m * k),
                round(&rng.vec(k * n)),
                rng.vec(n),
                rng.vec(m * n),
            );
            let a_t = r.upload(&[m, k], &a).unwrap();
            let b_t = upload_weight(r, &if tb { [n, k] } else { [k, n] }, &b, dtype);
            let bias_t = r.upload(&[n], &bias).unwrap();
            let acc_t = r.upload(&[m, n], &acc).unwrap();
            for with_acc in [false, true] {
                let opts = GemmOptions::new()
                    .trans_b(tb)
                    .bias(&bias_t)
                    .accumulate(with_acc.then_some(&acc_t));
                let got = kernels::gemm(&a_t, &b_t, opts.variant(variant)).unwrap();
                assert_eq!(got.dtype(), DType::F32);
                let acc_ref = with_acc.then_some(&acc[..]);
                let (w, scale) = want(&a, &b, (m, n, k), tb, &bias, acc_ref);
                let what = format!("{dtype} weights {variant:?} m={m} n={n} k={k} tb={tb}");
                assert_close_cancelling(&what, &got.to_vec().unwrap(), &w, &scale, 1e-5);
            }
        }
    }
}

#[test]
fn gemm_reads_bf16_weights_against_f64() {
    // 1, 3 (computed as 4, one row clamped) and 8: every row-count
    // pipeline but 2, which differs from them only in a constant.
    check_narrow_weights(DType::BF16, "gemm_bf16_weights", &[1, 3, 8]);
}

#[test]
fn gemm_reads_f16_weights_beside_f32_activations() {
    if !mesh(1).ranks()[0].device().has_f16() {
        eprintln!("skipped: no SHADER_F16 on this adapter");
        return;
    }
    // f16 B is the f32 kernel's loads with another element type.
    check_narrow_weights(DType::F16, "gemm_f16_weights", &[1, 3]);
}

/// Every workgroup size the tuner may pick computes the same bits on bf16
/// weights `[N, K]` too (the layers' layout; K a multiple of 8, of 4, and
/// ragged), and those are the bits of the f32 kernel on the widened
/// weights: a model kept in bf16 computes what its f32 twin with rounded
/// weights computes.
#[test]
fn bf16_gemv_candidates_give_the_same_bits() {
    let mut rng = Rng::fresh("bf16_candidates");
    let m1 = mesh(1);
    let r = &m1.ranks()[0];
    for (m, n, k) in [(1, 1031, 612), (3, 130, 67), (1, 517, 616)] {
        let a = rng.vec(m * k);
        let b = round_bf16(&rng.vec(n * k));
        let a_t = r.upload(&[m, k], &a).unwrap();
        let b_t = upload_weight(r, &[n, k], &b, DType::BF16);
        let bits = |t: wgpu_tp::LocalTensor| -> Vec<u32> {
            t.to_vec().unwrap().iter().map(|x| x.to_bits()).collect()
        };
        let wide = r.upload(&[n, k], &b).unwrap();
        let want = bits(kernels::gemv::gemv_with_candidate(&a_t, &wide, true, 2).unwrap());
        for &c in &kernels::gemv::CANDIDATES {
            let got = kernels::gemv::gemv_with_candidate(&a_t, &b_t, true, c).unwrap();
            assert_eq!(bits(got), want, "m {m} n {n} k {k} c {c}");
        }
    }
}

/// A bf16 A (an activation) is refused with an error naming the dtypes;
/// the device stays usable.
#[test]
fn bf16_activations_are_refused() {
    let m1 = mesh(1);
    let r = &m1.ranks()[0];
    let a = r.upload_bf16(&[2, 4], &to_bf16(&[0.5; 8])).unwrap();
    let b = r.upload(&[4, 4], &[0.5; 16]).unwrap();
    let err = kernels::gemm(&a, &b, GemmOptions::default()).unwrap_err();
    assert!(err.to_string().contains("bf16"), "{err}");
    let a = r.upload(&[2, 4], &[0.5; 8]).unwrap();
    let ok = kernels::gemm(&a, &b, GemmOptions::default()).unwrap();
    assert_eq!(ok.to_vec().unwrap(), vec![1.0; 8]);
}
