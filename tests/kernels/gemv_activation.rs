//! The activation in the GEMM's options (`GemmOptions::activation`): the
//! small-M kernel applies it as it stores, the other kernels by the
//! element-wise kernel after; both give the bits of the product followed by
//! `kernels::activation`, and GELU / SiLU / ReLU of the product match f64
//! (relative to the product's magnitudes where it cancels).
//! 1, 3 and 8 rows (the small-M kernel) and 13 (the general GEMM), ragged K
//! and N, with and without a bias, f32 and bf16 weights, B `[N, K]` and
//! `[K, N]`; an f16 C with an activation is refused. The multiply
//! (`GemmOptions::multiply`, SwiGLU's gate times up) likewise gives the
//! bits of the separate activation and `kernels::mul`, with or without an
//! accumulate beside it.

use crate::util::{Rng, assert_close_cancelling, mesh, reference, round_bf16};
use wgpu_tp::kernels::{self, Activation, GemmOptions};
use wgpu_tp::{DType, Error, LocalTensor, Rank};

fn act64(act: Activation, x: f64) -> f64 {
    match act {
        Activation::Gelu => reference::gelu(x),
        Activation::Silu => x / (1.0 + (-x).exp()),
        Activation::Relu => x.max(0.0),
    }
}

/// B on `r`, kept in bf16 where `bf16` (its values already rounded so).
fn weight(r: &Rank, shape: &[usize], b: &[f32], bf16: bool) -> LocalTensor {
    let t = r.upload(shape, b).unwrap();
    match bf16 {
        true => kernels::cast(&t, DType::BF16).unwrap(),
        false => t,
    }
}

/// |A|·|B| in f64: the sums of magnitudes that bound the product's rounding
/// where it cancels.
fn magnitudes(a: &[f32], b: &[f32], (m, n, k): (usize, usize, usize), trans_b: bool) -> Vec<f64> {
    let abs = |v: &[f32]| v.iter().map(|x| x.abs()).collect::<Vec<_>>();
    reference::gemm(&abs(a), &abs(b), m, n, k, false, trans_b)
}

#[test]
fn the_activation_in_the_store_gives_the_two_kernels_bits() {
    let m1 = mesh(1);
    let r = &m1.ranks()[0];
    let mut rng = Rng::fresh("gemv activation");
    let acts = [Activation::Gelu, Activation::Silu, Activation::Relu];
    for &(k, n) in &[(13, 17), (16, 12), (7, 20), (1, 1), (64, 9)] {
        for m in [1, 3, 8, 13] {
            for (i, &act) in acts.iter().enumerate() {
                let bf16 = i == 1 && k % 8 == 0;
                let trans_b = !(i == 2 && n % 4 == 0);
                let a = rng.vec(m * k);
                // Pre-activations around 0 and past GELU's and SiLU's bends.
                let a: Vec<f32> = a.iter().map(|v| 3.0 * v).collect();
                let b = rng.vec(k * n);
                let b = if bf16 { round_bf16(&b) } else { b };
                let bias = (m % 2 == 1).then(|| rng.vec(n));
                let ta = r.upload(&[m, k], &a).unwrap();
                let shape = if trans_b { [n, k] } else { [k, n] };
                let tb = weight(r, &shape, &b, bf16);
                let tbias = bias.as_ref().map(|v| r.upload(&[n], v).unwrap());
                let opts = GemmOptions::new().trans_b(trans_b).bias(tbias.as_ref());
                let what = format!("{m}x{k}x{n} {act:?} bf16 {bf16} trans_b {trans_b}");
                let fused = opts.activation(act);
                let got = kernels::gemm(&ta, &tb, fused).unwrap().to_vec().unwrap();
                let y = kernels::gemm(&ta, &tb, opts).unwrap();
                let two = kernels::activation(&y, act).unwrap().to_vec().unwrap();
                assert!(got == two, "{what}: the two kernels' bits");
                let bias_at = |v: &Option<Vec<f32>>, e: usize| v.as_ref().map_or(0.0, |v| v[e % n]);
                let pre = reference::gemm(&a, &b, m, n, k, false, trans_b);
                let want: Vec<f64> = (0..m * n)
                    .map(|e| act64(act, pre[e] + bias_at(&bias, e) as f64))
                    .collect();
                // The same sums of magnitudes bound the product's rounding where
                // it cancels (the activations' slopes are at most 1.13).
                let mag = magnitudes(&a, &b, (m, n, k), trans_b);
                let scale: Vec<f64> = (0..m * n)
                    .map(|e| mag[e] + bias_at(&bias, e).abs() as f64)
                    .collect();
                assert_close_cancelling(&what, &got, &want, &scale, 1e-5);
            }
        }
    }
}

#[test]
fn an_activation_needs_an_f32_output() {
    let m1 = mesh(1);
    let r = &m1.ranks()[0];
    let (a, b) = (
        r.upload(&[2, 4], &[0.5; 8]).unwrap(),
        r.upload(&[3, 4], &[0.25; 12]).unwrap(),
    );
    let opts = GemmOptions::new()
        .trans_b(true)
        .out_dtype(DType::F16)
        .activation(Activation::Gelu);
    let e = kernels::gemm(&a, &b, opts).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { .. }) && e.to_string().contains("f32"),
        "{e}"
    );
    let ok = opts.out_dtype(None).activation(Activation::Relu);
    assert_eq!(
        kernels::gemm(&a, &b, ok).unwrap().to_vec().unwrap(),
        vec![0.5; 6]
    );
}

#[test]
fn the_multiply_in_the_store_gives_the_separate_kernels_bits() {
    let m1 = mesh(1);
    let r = &m1.ranks()[0];
    let mut rng = Rng::fresh("gemv multiply");
    for &(k, n) in &[(13, 17), (16, 12), (7, 20), (1, 1), (64, 9)] {
        for m in [1, 3, 8, 13] {
            for case in 0..3 {
                // SwiGLU's SiLU; no activation; an accumulate beside it
                // (which takes the multiply's binding, so the mul kernel runs).
                let act = (case != 1).then_some(Activation::Silu);
                let bf16 = case == 0 && k % 8 == 0;
                let trans_b = !(case == 2 && n % 4 == 0);
                let a: Vec<f32> = rng.vec(m * k).iter().map(|v| 3.0 * v).collect();
                let b = rng.vec(k * n);
                let b = if bf16 { round_bf16(&b) } else { b };
                let up = rng.vec(m * n);
                let acc = (case == 2).then(|| rng.vec(m * n));
                let ta = r.upload(&[m, k], &a).unwrap();
                let shape = if trans_b { [n, k] } else { [k, n] };
                let tb = weight(r, &shape, &b, bf16);
                let tup = r.upload(&[m, n], &up).unwrap();
                let tacc = acc.as_ref().map(|v| r.upload(&[m, n], v).unwrap());
                let opts = GemmOptions::new()
                    .trans_b(trans_b)
                    .accumulate(tacc.as_ref());
                let what = format!(
                    "{m}x{k}x{n} {act:?} bf16 {bf16} trans_b {trans_b} acc {}",
                    case == 2
                );
                let fused = opts.activation(act).multiply(&tup);
                let got = kernels::gemm(&ta, &tb, fused).unwrap().to_vec().unwrap();
                let y = kernels::gemm(&ta, &tb, opts).unwrap();
                let y = match act {
                    Some(act) => kernels::activation(&y, act).unwrap(),
                    None => y,
                };
                let three = kernels::mul(&y, &tup).unwrap().to_vec().unwrap();
                assert!(got == three, "{what}: the separate kernels' bits");
                let pre = reference::gemm(&a, &b, m, n, k, false, trans_b);
                let at = |v: &Option<Vec<f32>>, e: usize| v.as_ref().map_or(0.0, |v| v[e]);
                let want: Vec<f64> = (0..m * n)
                    .map(|e| {
                        let x = pre[e] + at(&acc, e) as f64;
                        act.map_or(x, |act| act64(act, x)) * up[e] as f64
                    })
                    .collect();
                let mag = magnitudes(&a, &b, (m, n, k), trans_b);
                let scale: Vec<f64> = (0..m * n)
                    .map(|e| (mag[e] + at(&acc, e).abs() as f64) * (up[e].abs() as f64))
                    .collect();
                assert_close_cancelling(&what, &got, &want, &scale, 1e-5);
            }
        }
    }
}

#[test]
fn a_multiply_is_shaped_like_c_and_needs_an_f32_output() {
    let m1 = mesh(1);
    let r = &m1.ranks()[0];
    let (a, b) = (
        r.upload(&[2, 4], &[0.5; 8]).unwrap(),
        r.upload(&[3, 4], &[0.25; 12]).unwrap(),
    );
    let wrong = r.upload(&[3, 2], &[2.0; 6]).unwrap();
    let right = r.upload(&[2, 3], &[2.0; 6]).unwrap();
    let opts = GemmOptions::new().trans_b(true).multiply(&wrong);
    let e = kernels::gemm(&a, &b, opts).unwrap_err();
    assert!(e.to_string().contains("[2, 3]"), "{e}");
    let f16 = opts.multiply(&right).out_dtype(DType::F16);
    let e = kernels::gemm(&a, &b, f16).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { .. }) && e.to_string().contains("f32"),
        "{e}"
    );
    let ok = f16.out_dtype(None);
    assert_eq!(
        kernels::gemm(&a, &b, ok).unwrap().to_vec().unwrap(),
        vec![1.0; 6]
    );
}
