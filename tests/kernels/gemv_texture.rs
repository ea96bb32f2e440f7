//! The small-M GEMM's texture entries (`shaders/gemv_texture.wgsl`: the
//! weight as a texture, A as a uniform): the buffer entries' bits and f64,
//! forced and as the automatic choice takes them for a weight read again
//! on CPU adapters; kept textures go when the weight is written; products
//! they cannot take are refused.

use super::gemv::want;
use crate::util::{Rng, assert_close_cancelling, count_lock, counting_mesh, mesh, round_bf16};
use wgpu_tp::kernels::optim::{SgdStep, sgd_step};
use wgpu_tp::kernels::{self, Activation, GemmOptions};
use wgpu_tp::{DType, LocalTensor, Rank, Trace};

/// B uploaded as `dtype` (f32, or bf16 from values already representable).
fn upload_weight(r: &Rank, shape: &[usize], b: &[f32], dtype: DType) -> LocalTensor {
    match dtype {
        DType::F32 => r.upload(shape, b).unwrap(),
        _ => super::bf16::upload_weight(r, shape, b, dtype),
    }
}

fn bits(t: &LocalTensor) -> Vec<u32> {
    t.to_vec().unwrap().iter().map(|x| x.to_bits()).collect()
}

/// Every texture knob gives the serial buffer entry's bits, f32 and bf16
/// weights, 1 to 8 rows, ragged N, rows of texels that end mid-row and
/// textures of one part-filled row; and f64's values.
#[test]
fn texture_entries_give_the_buffer_entries_bits() {
    let mut rng = Rng::fresh("gemv_texture_bits");
    let m1 = mesh(1);
    let r = &m1.ranks()[0];
    let shapes = [
        (1, 1031, 616),
        (3, 130, 72),
        (8, 17, 16),
        (1, 7, 8),
        (2, 517, 1024),
        (5, 13, 40),
        (7, 3, 2048),
        // K ≡ 4 mod 8 (f32 only), and A filling the uniform exactly.
        (2, 11, 12),
        (1, 300, 44),
        (8, 5, 2048),
        (1, 9, 16384),
    ];
    for (m, n, k) in shapes {
        let a = rng.vec(m * k);
        let a_t = r.upload(&[m, k], &a).unwrap();
        let dtypes: &[DType] = if k % 8 == 0 {
            &[DType::F32, DType::BF16]
        } else {
            &[DType::F32]
        };
        for &dtype in dtypes {
            let b = if dtype == DType::BF16 {
                round_bf16(&rng.vec(n * k))
            } else {
                rng.vec(n * k)
            };
            let b_t = upload_weight(r, &[n, k], &b, dtype);
            let base = kernels::gemv::gemv_with_candidate(&a_t, &b_t, true, 2).unwrap();
            let (w, scale) = want(&a, &b, (m, n, k), (false, true), None, None);
            for &knob in &kernels::gemv::TEXTURE_CANDIDATES {
                let what = format!("m {m} n {n} k {k} {dtype:?} knob {knob:?}");
                let got = kernels::gemv::gemv_texture_with(&a_t, &b_t, knob).unwrap();
                assert_close_cancelling(&what, &got.to_vec().unwrap(), &w, &scale, 1e-5);
                assert_eq!(
                    bits(&got),
                    bits(&base),
                    "{what}: bits differ from the buffer entry"
                );
            }
        }
    }
}

/// Calls of kernels whose name starts with `prefix` in `trace`.
fn calls(trace: &Trace, prefix: &str) -> u64 {
    let all = trace.top_kernels(usize::MAX);
    all.iter()
        .filter(|k| k.name.starts_with(prefix))
        .map(|k| k.calls)
        .sum()
}

/// The automatic choice: a weight's first product reads the buffer, the
/// second makes and keeps the texture (where the adapter takes one
/// unmeasured: GL llvmpipe), with the same bits, bias, accumulate,
/// activation and multiply included; an in-place write drops the texture
/// and the next products read the new values.
#[test]
fn a_weight_read_again_is_kept_as_a_texture_with_the_same_bits() {
    let _counting = count_lock();
    let mut rng = Rng::fresh("gemv_texture_auto");
    let m1 = counting_mesh(1);
    let r = &m1.ranks()[0];
    // Tuning is off in the suite: the driver's guess decides (GL llvmpipe
    // keeps textures; lavapipe reads the buffer unless measured otherwise).
    let cpu = kernels::gemv::texture_by_default(r.device());
    for (m, n, k, dtype) in [(1, 771, 264, DType::F32), (3, 66, 136, DType::BF16)] {
        let (a, bias, acc) = (rng.vec(m * k), rng.vec(n), rng.vec(m * n));
        let a_t = r.upload(&[m, k], &a).unwrap();
        let bias_t = r.upload(&[n], &bias).unwrap();
        let acc_t = r.upload(&[m, n], &acc).unwrap();
        let b = round_bf16(&rng.vec(n * k));
        let b_t = upload_weight(r, &[n, k], &b, dtype);
        let plain = GemmOptions::new().trans_b(true);
        let cases = [
            plain.bias(&bias_t).accumulate(&acc_t),
            plain.bias(&bias_t).activation(Activation::Gelu),
            plain.activation(Activation::Silu).multiply(&acc_t),
            plain,
        ];
        for (i, opts) in cases.into_iter().enumerate() {
            let what = format!("m {m} n {n} k {k} {dtype:?} case {i}");
            m1.start_trace().unwrap();
            let first = kernels::gemm(&a_t, &b_t, opts.weight(true)).unwrap();
            let again = kernels::gemm(&a_t, &b_t, opts.weight(true)).unwrap();
            let trace = m1.stop_trace().unwrap();
            assert_eq!(bits(&again), bits(&first), "{what}");
            // A texture from the second product on, kept from then on.
            let textured = calls(&trace, "gemv_tex::");
            let want_tex = if !cpu {
                0
            } else if i == 0 {
                1
            } else {
                2
            };
            assert_eq!(textured, want_tex, "{what}: texture products");
            assert_eq!(b_t.derived_count(), usize::from(cpu), "{what}: kept");
        }
        let (w, scale) = want(&a, &b, (m, n, k), (false, true), None, None);
        let got = kernels::gemm(&a_t, &b_t, plain.weight(true)).unwrap();
        assert_close_cancelling("before the write", &got.to_vec().unwrap(), &w, &scale, 1e-5);
        if dtype != DType::F32 {
            continue;
        }
        // An SGD step writes the weight in place: the texture goes, and the
        // next products read the new values (a stale texture would not).
        let grad = rng.vec(n * k);
        let grad_t = r.upload(&[n, k], &grad).unwrap();
        let spare = r.zeros(&[4], DType::F32).unwrap();
        let step = SgdStep {
            lr: 0.5,
            momentum: 0.0,
            weight_decay: 0.0,
            first_step: true,
        };
        sgd_step(&b_t, &grad_t, None, [&spare, &spare.clone()], step).unwrap();
        assert_eq!(b_t.derived_count(), 0, "a write drops the texture");
        let b2: Vec<f32> = b.iter().zip(&grad).map(|(w, g)| w - 0.5 * g).collect();
        let (w2, scale2) = want(&a, &b2, (m, n, k), (false, true), None, None);
        for pass in 0..3 {
            let got = kernels::gemm(&a_t, &b_t, plain.weight(true)).unwrap();
            let what = format!("m {m} n {n} k {k} after the write, pass {pass}");
            assert_close_cancelling(&what, &got.to_vec().unwrap(), &w2, &scale2, 1e-5);
        }
    }
}

/// Products the texture entries cannot take are errors naming why, and the
/// rank keeps working: K not whole texels (f32 and bf16), A past 64 KiB, a
/// knob not measured, operands of different K.
#[test]
fn the_texture_entries_refuse_what_they_cannot_take() {
    let m1 = mesh(1);
    let r = &m1.ranks()[0];
    let refuse = |a: &LocalTensor, b: &LocalTensor, knob, says: &str| {
        let err = kernels::gemv::gemv_texture_with(a, b, knob).unwrap_err();
        assert!(err.to_string().contains(says), "{err}");
    };
    let a13 = r.upload(&[1, 13], &[0.5; 13]).unwrap();
    let b13 = r.upload(&[4, 13], &[0.5; 52]).unwrap();
    refuse(&a13, &b13, (2, 64), "a multiple of 4");
    let a12 = r.upload(&[1, 12], &[0.5; 12]).unwrap();
    let b12 = upload_weight(r, &[4, 12], &[0.5; 48], DType::BF16);
    refuse(&a12, &b12, (2, 64), "a multiple of 8");
    let big = r.upload(&[8, 2056], &vec![0.5; 8 * 2056]).unwrap();
    let bbig = r.upload(&[4, 2056], &vec![0.5; 4 * 2056]).unwrap();
    refuse(&big, &bbig, (2, 64), "64 KiB");
    let b4 = r.upload(&[4, 12], &[0.5; 48]).unwrap();
    refuse(&a12, &b4, (3, 64), "knob");
    refuse(&a13, &b4, (2, 64), "same K");
    let ok = kernels::gemv::gemv_texture_with(&a12, &b4, (2, 64)).unwrap();
    assert_eq!(ok.to_vec().unwrap(), vec![3.0; 4]);
}
