//! The small-M GEMM's split-K entry for GPUs (`gemv_nk_split`,
//! `shaders/gemv_split.wgsl`), forced whatever the adapter (the tuner only
//! offers it on hardware GPUs): against f64 for 1, 3 and 8 rows, ragged K and N
//! (every binding: vec4, element-wise, bf16 eight a load), bias and
//! accumulate, f32 / bf16 / f16 weights, into poisoned outputs; every
//! columns-per-workgroup knob gives the same bits, and bf16 weights the
//! bits of f32 weights of equal values (other bits than the serial entries:
//! another order of sums).

use super::gemv::want;
use crate::util::{Rng, assert_close_cancelling, f16_meshes, mesh, round_bf16, round_f16};
use wgpu_tp::half::{bf16, f16};
use wgpu_tp::kernels::gemv::{SPLIT_CANDIDATES, gemv_split_with_candidate};
use wgpu_tp::{DType, LocalTensor, Rank};

/// `b` `[N, K]` uploaded as `dtype` (values already representable).
fn upload_weight(r: &Rank, shape: &[usize], b: &[f32], dtype: DType) -> LocalTensor {
    match dtype {
        DType::BF16 => {
            let h: Vec<bf16> = b.iter().map(|&x| bf16::from_f32(x)).collect();
            r.upload_bf16(shape, &h).unwrap()
        }
        DType::F16 => {
            let h: Vec<f16> = b.iter().map(|&x| f16::from_f32(x)).collect();
            r.upload_f16(shape, &h).unwrap()
        }
        _ => r.upload(shape, b).unwrap(),
    }
}

fn bits(t: &LocalTensor) -> Vec<u32> {
    t.to_vec().unwrap().iter().map(|x| x.to_bits()).collect()
}

/// Sizes (N, K): ragged (K mod 8 of 1..7: element-wise binding and the
/// trailing elements), K a multiple of 4 but not 8 (vec4, a 4-element
/// tail), K a multiple of 8 (bf16 eight a load), and a layer's widths.
const SIZES: [(usize, usize); 7] = [
    (7, 13),
    (13, 17),
    (17, 7),
    (13, 20),
    (7, 1032),
    (1031, 769),
    (769, 1031),
];

/// f32 A with an f32, bf16 or f16 B, every row count, bias and accumulate,
/// against f64 on the (rounded) weights; bf16 and f16 weights give the
/// f32 weights' bits on the same values.
#[test]
fn split_gemv_matches_f64_every_row_count_and_weight_dtype() {
    let m1 = mesh(1);
    let r = &m1.ranks()[0];
    let mut rng = Rng::fresh("gemv_split");
    let mut case = 0;
    // Rows 1 (its own loop shape) and 8 (the most; 3 is in the knob test):
    // each row count is a pipeline per family, seconds each on lavapipe.
    for m in [1, 8] {
        for &(n, k) in &SIZES {
            // A layer's widths at 1 row only (lavapipe runs them slowly).
            if n * k > 1 << 16 && m != 1 {
                continue;
            }
            let a = rng.vec(m * k);
            let (bias, acc) = (rng.vec(n), rng.vec(m * n));
            let a_t = r.upload(&[m, k], &a).unwrap();
            let bias_t = r.upload(&[n], &bias).unwrap();
            let acc_t = r.upload(&[m, n], &acc).unwrap();
            let (with_bias, with_acc) = [(false, false), (true, false), (true, true)][case % 3];
            // One knob here (each is a pipeline per family and row count,
            // seconds on lavapipe); the next test gives every knob's bits.
            let c = SPLIT_CANDIDATES[0];
            case += 1;
            let ops = (with_bias.then_some(&bias_t), with_acc.then_some(&acc_t));
            // f16 weights only where the adapter has SHADER_F16 (never on GL).
            let f16 = r.device().has_f16();
            // bf16 at 1 and 3 rows, f16 (where there is SHADER_F16) at 8.
            for dtype in [DType::BF16, DType::F16] {
                if (dtype == DType::F16) != (m == 8 && f16) {
                    continue;
                }
                let round = if dtype == DType::BF16 {
                    round_bf16
                } else {
                    round_f16
                };
                let b = round(&rng.vec(n * k));
                let b_t = upload_weight(r, &[n, k], &b, dtype);
                let wide = r.upload(&[n, k], &b).unwrap();
                let got = gemv_split_with_candidate(&a_t, &b_t, ops, c).unwrap();
                let f32_twin = gemv_split_with_candidate(&a_t, &wide, ops, c).unwrap();
                let (w, scale) = want(
                    &a,
                    &b,
                    (m, n, k),
                    (false, true),
                    with_bias.then_some(&bias[..]),
                    with_acc.then_some(&acc[..]),
                );
                let what = format!(
                    "split {dtype:?} m={m} n={n} k={k} c={c} bias={with_bias} acc={with_acc}"
                );
                assert_close_cancelling(&what, &got.to_vec().unwrap(), &w, &scale, 1e-5);
                assert_close_cancelling(&what, &f32_twin.to_vec().unwrap(), &w, &scale, 1e-5);
                assert_eq!(bits(&got), bits(&f32_twin), "{what}: bits of f32 weights");
            }
        }
    }
}

/// Every knob the tuner measures computes the same bits (ragged, vec4 and
/// eight-wide bf16 bindings; 3 and 8 rows), so only speed changes.
#[test]
fn every_split_knob_gives_the_same_bits() {
    let m1 = mesh(1);
    let r = &m1.ranks()[0];
    let mut rng = Rng::fresh("gemv_split_knobs");
    // Each (shape, dtype) below is a pipeline per knob (seconds each on
    // lavapipe): the element-wise f32 binding at 3 rows, the eight-wide
    // bf16 one at 8.
    for (m, n, k, dtype) in [(3, 1031, 67, DType::F32), (8, 517, 616, DType::BF16)] {
        let a = rng.vec(m * k);
        let b = round_bf16(&rng.vec(n * k));
        let a_t = r.upload(&[m, k], &a).unwrap();
        {
            let b_t = upload_weight(r, &[n, k], &b, dtype);
            let first = bits(&gemv_split_with_candidate(&a_t, &b_t, (None, None), 2).unwrap());
            for &c in &SPLIT_CANDIDATES[1..] {
                let got = gemv_split_with_candidate(&a_t, &b_t, (None, None), c).unwrap();
                assert_eq!(bits(&got), first, "m {m} n {n} k {k} {dtype:?} c {c}");
            }
        }
        assert!(
            gemv_split_with_candidate(&a_t, &r.upload(&[n, k], &b).unwrap(), (None, None), 3)
                .is_err()
        );
    }
    // B whose rows are not K long, and more than 8 rows, are refused.
    let a = r.upload(&[2, 4], &[0.5; 8]).unwrap();
    let b = r.upload(&[4, 3], &[0.5; 12]).unwrap();
    assert!(gemv_split_with_candidate(&a, &b, (None, None), 2).is_err());
    let a9 = r.upload(&[9, 3], &[0.5; 27]).unwrap();
    assert!(gemv_split_with_candidate(&a9, &b, (None, None), 2).is_err());
}

/// f16 A and B (where `SHADER_F16` exists): f32 sums, f32 output.
#[test]
fn split_gemv_f16_operands_accumulate_in_f32() {
    let Some([(_, mesh), _]) = f16_meshes(1, "f16 split gemv") else {
        return;
    };
    let r = &mesh.ranks()[0];
    let mut rng = Rng::fresh("gemv_split_f16");
    for &(m, n, k) in &[(1, 13, 17), (8, 769, 1032)] {
        let (a, b, bias) = (
            round_f16(&rng.vec(m * k)),
            round_f16(&rng.vec(n * k)),
            rng.vec(n),
        );
        let half = |v: &[f32]| v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>();
        let a_t = r.upload_f16(&[m, k], &half(&a)).unwrap();
        let b_t = r.upload_f16(&[n, k], &half(&b)).unwrap();
        let bias_t = r.upload(&[n], &bias).unwrap();
        let got = gemv_split_with_candidate(&a_t, &b_t, (Some(&bias_t), None), 4).unwrap();
        assert_eq!(got.dtype(), DType::F16);
        let got = wgpu_tp::kernels::cast(&got, DType::F32)
            .unwrap()
            .to_vec()
            .unwrap();
        let (w, scale) = want(&a, &b, (m, n, k), (false, true), Some(&bias), None);
        // One rounding to f16 at the end.
        assert_close_cancelling(
            &format!("split f16 m={m} n={n} k={k}"),
            &got,
            &w,
            &scale,
            1e-3,
        );
    }
}
