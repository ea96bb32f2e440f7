//! The cooperative-matrix GEMM (`GemmVariant::Coop`, tensor cores): against
//! f64 on the f16 operands where the adapter has it (a GPU through Vulkan's
//! `VK_KHR_cooperative_matrix`; `WGPU_TP_REQUIRE_COOP=1` makes a missing one
//! a failure), and a clear `Error::Unsupported` everywhere else, after which
//! the rank keeps working. lavapipe and llvmpipe offer no cooperative
//! matrices, so CI runs only the refusal.

use crate::util::reference;
use crate::util::round_f16 as round;
use crate::util::{Rng, assert_close_f16, mesh, rel_err};
use wgpu_tp::half::f16;
use wgpu_tp::kernels::{self, GemmOptions, GemmVariant};
use wgpu_tp::{DType, Error, LocalTensor, Rank};

/// `v` as an f16 `[r, c]` tensor on `rank`, transposed (stored `[c, r]`) when asked.
fn f16_operand(rank: &Rank, (r, c): (usize, usize), v: &[f32], trans: bool) -> LocalTensor {
    let h: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
    let t = rank.upload_f16(&[r, c], &h).unwrap();
    if trans {
        kernels::transpose(&t).unwrap()
    } else {
        t
    }
}

/// f32 C against f64: norm-wise within 1e-5, as every f32 product, and each
/// element within 1e-4 + 1e-3·|w| + 2^-18·s, s being the element's sum of
/// absolute terms (Σ|a||b| + |bias| + |acc|). At K = 4099 an f32 sum's
/// rounding outgrows the fixed element floor whatever the order (H100's
/// tensor cores: |err| 2.0e-4 where s ≈ 1000; lavapipe's tiled kernel on
/// these shapes: up to 2.6e-7·s; the H100 over the whole test: 4.7e-7·s).
/// 2^-18·s is 64 units of f32 roundoff of s, far inside the γ_K·s that
/// bounds any f32 summation order. Returns the largest |err| / s.
fn assert_close_summed(what: &str, got: &[f32], want: &[f64], scale: &[f64]) -> f64 {
    let e = rel_err(got, want);
    assert!(e <= 1e-5, "{what}: relative error {e:.3e} > 1e-5");
    let mut worst: f64 = 0.0;
    for (i, ((&g, &w), &s)) in got.iter().zip(want).zip(scale).enumerate() {
        let d = (g as f64 - w).abs();
        assert!(
            d <= 1e-4 + 1e-3 * w.abs() + s / f64::from(1 << 18),
            "{what}: element {i}: got {g}, want {w} (diff {d:.3e}, sum of |terms| {s:.1})"
        );
        worst = worst.max(d / s.max(1e-30));
    }
    worst
}

#[test]
fn the_coop_gemm_is_refused_without_tensor_cores_or_f16_and_the_rank_keeps_working() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let a32 = r.upload(&[16, 16], &vec![1.0; 256]).unwrap();
    // f32 operands: no adapter multiplies them on cooperative matrices here.
    let e = kernels::gemm(
        &a32,
        &a32,
        GemmOptions::default().variant(GemmVariant::Coop),
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Unsupported {
                feature: "EXPERIMENTAL_COOPERATIVE_MATRIX",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("f16 operands"), "{e}");
    if r.device().has_f16() && !r.device().has_coop_f16() {
        let a16 = f16_operand(r, (16, 16), &[1.0; 256], false);
        let e = kernels::gemm(
            &a16,
            &a16,
            GemmOptions::default().variant(GemmVariant::Coop),
        )
        .unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    }
    // Nothing was recorded: the rank still multiplies.
    let c = kernels::gemm(&a32, &a32, GemmOptions::new())
        .unwrap()
        .to_vec()
        .unwrap();
    assert_eq!(c, vec![16.0; 256]);
}

#[test]
fn the_coop_gemm_matches_f64_on_f16_operands_every_layout() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    if !r.device().has_coop_f16() {
        let why = format!(
            "coop gemm: skipped, adapter {} offers no 16x16x16 f16 cooperative matrices (GPUs through Vulkan do; `cargo run --example devices` lists them)",
            m.adapter_summary()
        );
        assert!(
            std::env::var_os("WGPU_TP_REQUIRE_COOP").is_none(),
            "WGPU_TP_REQUIRE_COOP is set but {why}"
        );
        eprintln!("[wgpu-tp tests] {why}");
        return;
    }
    let mut rng = Rng::fresh("coop_gemm");
    // Ragged sizes, one tile and past it (128), K past one 32-deep slice, a
    // long K for the f32 accumulation. Tiles wholly inside a and b with row
    // strides a multiple of 8 load from the buffers (128×128×32, the first
    // tile of 136×136×64, the inner ones of 256×384×520 with K's last 8
    // staged); the rest are staged.
    let mut worst: f64 = 0.0;
    let shapes = [
        (1, 1, 1),
        (7, 13, 17),
        (17, 7, 13),
        (16, 16, 16),
        (128, 128, 32),
        (129, 131, 33),
        (136, 136, 64),
        (300, 260, 530),
        (256, 384, 520),
        (64, 96, 4099),
    ];
    for (case, &(mm, n, k)) in shapes.iter().enumerate() {
        for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
            let a = round(&rng.vec(mm * k));
            let b = round(&rng.vec(k * n));
            let bias = rng.vec(n);
            let acc = rng.vec(mm * n);
            let a_t = if ta {
                let at: Vec<f32> = (0..k * mm).map(|i| a[(i % mm) * k + i / mm]).collect();
                f16_operand(r, (k, mm), &at, false)
            } else {
                f16_operand(r, (mm, k), &a, false)
            };
            let b_t = f16_operand(r, (k, n), &b, tb);
            let bias_t = r.upload(&[n], &bias).unwrap();
            let acc_t = r.upload(&[mm, n], &acc).unwrap();
            let with = case + ta as usize + 2 * tb as usize;
            let (with_bias, with_acc) = (with.is_multiple_of(2), with.is_multiple_of(3));
            let mut want = reference::gemm(&a, &b, mm, n, k, false, false);
            let abs = |v: &[f32]| v.iter().map(|x| x.abs()).collect::<Vec<f32>>();
            let mut scale = reference::gemm(&abs(&a), &abs(&b), mm, n, k, false, false);
            for (i, (w, s)) in want.iter_mut().zip(&mut scale).enumerate() {
                if with_bias {
                    *w += bias[i % n] as f64;
                    *s += bias[i % n].abs() as f64;
                }
                if with_acc {
                    *w += acc[i] as f64;
                    *s += acc[i].abs() as f64;
                }
            }
            for out in [DType::F32, DType::F16] {
                let opts = GemmOptions::new()
                    .trans_a(ta)
                    .trans_b(tb)
                    .bias(with_bias.then_some(&bias_t))
                    .accumulate(with_acc.then_some(&acc_t))
                    .out_dtype(out);
                let what = format!(
                    "coop gemm -> {out} {mm}x{n}x{k} ta={ta} tb={tb} bias={with_bias} acc={with_acc}"
                );
                let c = kernels::gemm(&a_t, &b_t, opts.variant(GemmVariant::Coop)).unwrap();
                assert_eq!((c.dtype(), c.shape()), (out, &[mm, n][..]), "{what}");
                let got = c.to_vec().unwrap();
                if out == DType::F16 {
                    assert_close_f16(&what, &got, &want);
                } else {
                    worst = worst.max(assert_close_summed(&what, &got, &want, &scale));
                }
                // Auto takes the same kernel for f16 products past the small-M one.
                if mm > 8 {
                    let auto = kernels::gemm(&a_t, &b_t, opts).unwrap().to_vec().unwrap();
                    assert_eq!(auto, got, "{what}: Auto");
                }
            }
        }
    }
    eprintln!("[coop_gemm] largest |err| / sum of |terms|, f32 C: {worst:.2e}");
}
