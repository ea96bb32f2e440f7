//! GEMMs with an operand past the device's textures (a 50k vocabulary's
//! tied head on lavapipe) run as parts that fit, on the texture kernel:
//! checked on a device whose textures are 256 texels a side, so small ragged
//! products split along N, M, K and all three, with every transpose, bias
//! and accumulate, against the f64 reference; the buffer kernel never runs.

use crate::util::{Rng, assert_close_cancelling, mesh_env, reference};
use wgpu_tp::kernels::{self, GemmOptions};
use wgpu_tp::{DType, MeshBuilder};

#[test]
fn products_past_the_texture_limit_split_into_parts_that_fit() {
    mesh_env();
    let limits = wgpu::Limits {
        max_texture_dimension_2d: 256,
        ..wgpu::Limits::default()
    };
    let m = MeshBuilder::new().ranks(1).limits(limits).build().unwrap();
    m.set_poison(true);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("gemm_split");
    m.start_trace().unwrap();
    // (M, N, K): N past 256, M past, K past, and all three.
    for (mm, n, k) in [(13, 700, 40), (530, 17, 33), (19, 23, 601), (300, 263, 517)] {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let (av, bv) = (rng.vec(mm * k), rng.vec(k * n));
            let (bias, acc) = (rng.vec(n), rng.vec(mm * n));
            let a_shape = if ta { [k, mm] } else { [mm, k] };
            let b_shape = if tb { [n, k] } else { [k, n] };
            let (a, b) = (
                r.upload(&a_shape, &av).unwrap(),
                r.upload(&b_shape, &bv).unwrap(),
            );
            let (tbias, tacc) = (
                r.upload(&[n], &bias).unwrap(),
                r.upload(&[mm, n], &acc).unwrap(),
            );
            let prod = reference::gemm(&av, &bv, mm, n, k, ta, tb);
            let abs_a: Vec<f32> = av.iter().map(|x| x.abs()).collect();
            let abs_b: Vec<f32> = bv.iter().map(|x| x.abs()).collect();
            let scale = reference::gemm(&abs_a, &abs_b, mm, n, k, ta, tb);
            for extras in [false, true] {
                let opts = GemmOptions::new()
                    .trans_a(ta)
                    .trans_b(tb)
                    .bias(extras.then_some(&tbias))
                    .accumulate(extras.then_some(&tacc));
                let got = kernels::gemm(&a, &b, opts).unwrap();
                assert_eq!(got.shape(), [mm, n]);
                let want: Vec<f64> = (0..mm * n)
                    .map(|i| {
                        prod[i]
                            + if extras {
                                (bias[i % n] + acc[i]) as f64
                            } else {
                                0.0
                            }
                    })
                    .collect();
                let what = format!("({mm}, {n}, {k}) ta {ta} tb {tb} extras {extras}");
                assert_close_cancelling(&what, &got.to_vec().unwrap(), &want, &scale, 1e-5);
            }
        }
    }
    // An f16 product split along K rounds once, from the f32 sum.
    if r.device().has_f16() {
        let (mm, n, k) = (7, 9, 700);
        let (av, bv) = (rng.vec(mm * k), rng.vec(k * n));
        let h = |v: &[f32]| {
            v.iter()
                .map(|&x| wgpu_tp::half::f16::from_f32(x))
                .collect::<Vec<_>>()
        };
        let (ah, bh) = (h(&av), h(&bv));
        let a = r.upload_f16(&[mm, k], &ah).unwrap();
        let b = r.upload_f16(&[k, n], &bh).unwrap();
        let got = kernels::gemm(&a, &b, GemmOptions::default()).unwrap();
        assert_eq!(got.dtype(), DType::F16);
        let want = reference::gemm(&ah, &bh, mm, n, k, false, false);
        let got: Vec<f32> = got
            .to_vec_f16()
            .unwrap()
            .iter()
            .map(|x| x.to_f32())
            .collect();
        let want_rounded: Vec<f32> = want
            .iter()
            .map(|&x| wgpu_tp::half::f16::from_f64(x).to_f32())
            .collect();
        let off = got
            .iter()
            .zip(&want_rounded)
            .filter(|(g, w)| g != w)
            .count();
        assert!(
            off * 20 <= got.len(),
            "{off} of {} values not the rounded sum",
            got.len()
        );
    }
    let trace = m.stop_trace().unwrap();
    if r.device().is_cpu() {
        let buffer_kernel = trace
            .kernels()
            .find(|e| e.name.starts_with("gemm::gemm_buf"));
        assert!(
            buffer_kernel.is_none(),
            "ran {:?}",
            buffer_kernel.map(|e| &e.name)
        );
        assert!(
            trace
                .kernels()
                .any(|e| e.name.starts_with("gemm::gemm_img"))
        );
    }
}
