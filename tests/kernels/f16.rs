//! f16 storage (run where the adapter has `SHADER_F16`, reported as skipped
//! elsewhere; required under CI's Mesa 25 lavapipe pass): casts round to a
//! neighbouring f16 and widen exactly; the f16 GEMM (every layout, kernel
//! variant, bias/accumulate, f16 or f32 output) accumulates in f32 against
//! an f64 reference of the f16 operands; f16 tensors shard, gather and reduce
//! (in f32) on both transports; a device without the feature gives
//! `Error::Unsupported` and stays usable.

use crate::util::reference;
use crate::util::round_f16 as round;
use crate::util::{
    F16_ROUNDOFF, Rng, WORLD_SIZES, assert_close, assert_close_f16, f16_meshes, mesh_env,
};
use wgpu_tp::half::f16;
use wgpu_tp::kernels::{self, GemmOptions, GemmVariant};
use wgpu_tp::{DTensor, DType, Error, MeshBuilder, Placement, ReduceOp, comm};

/// Random values spread over f16's range: normals of many magnitudes and
/// subnormals (|x| < 2^-14), each sign.
fn spread(rng: &mut Rng, n: usize) -> Vec<f32> {
    let scales = [1e-6, 3e-5, 0.01, 1.0, 7.0, 300.0, 20000.0];
    (0..n)
        .map(|i| rng.uniform(-1.0, 1.0) * scales[i % scales.len()])
        .collect()
}

#[test]
fn casts_round_to_a_neighbouring_f16_and_widen_exactly() {
    let Some([(_, m), _]) = f16_meshes(1, "casts") else {
        return;
    };
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("f16_cast");
    for n in [1, 7, 13, 1031] {
        let x = spread(&mut rng, n);
        let x_t = r.upload(&[n], &x).unwrap();
        let h = kernels::cast(&x_t, DType::F16).unwrap();
        assert_eq!((h.dtype(), h.shape()), (DType::F16, &[n][..]));
        let got = h.to_vec_f16().unwrap();
        for (i, (&g, &v)) in got.iter().zip(&x).enumerate() {
            // WGSL lets a conversion pick either neighbour; both bracket v
            // within one f16 step, and exact values stay exact.
            let nearest = f16::from_f32(v);
            let step = (f16::from_bits(nearest.to_bits() + 1).to_f32() - nearest.to_f32()).abs();
            let d = (g.to_f32() - v).abs();
            // A driver may also flush f16 subnormals (|v| < 2^-14) to zero.
            let flushed = v.abs() < 6.1e-5 && g.to_f32() == 0.0;
            assert!(
                (d <= step && (nearest.to_f32() != v || g == nearest)) || flushed,
                "n={n} element {i}: {v} -> {g} (nearest {nearest})"
            );
        }
        // Widening is exact: the same bits back as f32.
        let back = kernels::cast(&h, DType::F32).unwrap().to_vec().unwrap();
        let want: Vec<f32> = got.iter().map(|g| g.to_f32()).collect();
        assert_eq!(back, want, "n={n}: widening");
        // An f16 upload round-trips, odd lengths included (padded words).
        let up = r.upload_f16(&[n], &got).unwrap();
        assert_eq!(up.to_vec_f16().unwrap(), got, "n={n}: upload");
        assert_eq!(up.byte_len(), 2 * n as u64);
    }
}

#[test]
fn f16_gemm_accumulates_in_f32_every_layout_and_variant() {
    let Some([(_, m), _]) = f16_meshes(1, "f16 gemm") else {
        return;
    };
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("f16_gemm");
    let shapes = [
        (1, 1, 1),
        (7, 13, 17),
        (17, 7, 13),
        (4, 8, 12),
        (64, 64, 64),
        (33, 9, 130),
        // Rows of 128 halves: the texture kernel copies both operands in place.
        (20, 128, 128),
        // Over 2^24 multiply-adds, K and N % 4 == 0: A and B packed in
        // blocks by the vec4 packs, B from [K, N] (`_bk`, Mesa >= 24) or
        // [N, K] (`_bb`). Texture kernel and f32 output only, to keep the
        // large tile's compiles few.
        (259, 132, 516),
    ];
    let variants = [
        GemmVariant::Auto,
        GemmVariant::Texture,
        GemmVariant::Buffer,
        GemmVariant::Tiled,
        GemmVariant::PackedBuffer,
    ];
    for (case, &(mm, n, k)) in shapes.iter().enumerate() {
        let large = mm * n * k >= 1 << 24;
        for ta in [false, true] {
            if large && ta {
                continue;
            }
            for tb in [false, true] {
                let a = round(&rng.vec(mm * k));
                let b = round(&rng.vec(k * n));
                let bias = rng.vec(n);
                let acc = rng.vec(mm * n);
                let a_t = DTensor::from_host_f16(&m, &[mm, k], &a, Placement::Replicate)
                    .unwrap()
                    .shards()[0]
                    .clone();
                let a_t = if ta {
                    kernels::transpose(&a_t).unwrap()
                } else {
                    a_t
                };
                let b_t = r
                    .upload_f16(
                        &[k, n],
                        &b.iter().map(|&v| f16::from_f32(v)).collect::<Vec<_>>(),
                    )
                    .unwrap();
                let b_t = if tb {
                    kernels::transpose(&b_t).unwrap()
                } else {
                    b_t
                };
                assert_eq!(a_t.dtype(), DType::F16);
                let bias_t = r.upload(&[n], &bias).unwrap();
                let acc_t = r.upload(&[mm, n], &acc).unwrap();
                let with = (ta ^ tb) as usize + case;
                let (with_bias, with_acc) = (with.is_multiple_of(2), with.is_multiple_of(3));
                let mut want = reference::gemm(&a, &b, mm, n, k, false, false);
                for i in 0..mm {
                    for j in 0..n {
                        let e = &mut want[i * n + j];
                        *e += if with_bias { bias[j] as f64 } else { 0.0 };
                        *e += if with_acc { acc[i * n + j] as f64 } else { 0.0 };
                    }
                }
                for variant in variants {
                    for out in [DType::F16, DType::F32] {
                        if large && (variant != GemmVariant::Texture || out == DType::F16) {
                            continue;
                        }
                        let opts = GemmOptions::new()
                            .trans_a(ta)
                            .trans_b(tb)
                            .bias(with_bias.then_some(&bias_t))
                            .accumulate(with_acc.then_some(&acc_t))
                            .out_dtype(out);
                        let c = kernels::gemm(&a_t, &b_t, opts.variant(variant)).unwrap();
                        assert_eq!((c.dtype(), c.shape()), (out, &[mm, n][..]));
                        let what = format!(
                            "f16 gemm {variant:?} -> {out} {mm}x{n}x{k} ta={ta} tb={tb} bias={with_bias} acc={with_acc}"
                        );
                        let got = c.to_vec().unwrap();
                        if out == DType::F16 {
                            assert_close_f16(&what, &got, &want);
                        } else {
                            // Exact f16 operands, f32 sums: f32's tolerance.
                            assert_close(&what, &got, &want, 1e-5);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn f16_gemm_refuses_mixed_operands_and_keeps_working() {
    let Some([(_, m), _]) = f16_meshes(1, "f16 gemm errors") else {
        return;
    };
    let r = &m.ranks()[0];
    let a16 = r.upload_f16(&[2, 4], &[f16::ONE; 8]).unwrap();
    let b32 = r.upload(&[4, 3], &[1.0; 12]).unwrap();
    let b16 = kernels::cast(&b32, DType::F16).unwrap();
    let bias16 = r.upload_f16(&[3], &[f16::ONE; 3]).unwrap();
    let err = |opts: GemmOptions<'_>, b| kernels::gemm(&a16, b, opts).unwrap_err();
    assert!(matches!(
        err(GemmOptions::default(), &b32),
        Error::DTypeMismatch { .. }
    ));
    let opts = GemmOptions::new().bias(&bias16);
    assert!(matches!(err(opts, &b16), Error::DTypeMismatch { .. }));
    let opts = GemmOptions::new().out_dtype(DType::I32);
    assert!(matches!(err(opts, &b16), Error::InvalidArgument { .. }));
    let c = kernels::gemm(&a16, &b16, GemmOptions::default()).unwrap();
    assert_eq!(c.to_vec().unwrap(), vec![4.0; 6]);
    // i32 has no f16 cast.
    let ids = r.upload_i32(&[2], &[1, 2]).unwrap();
    assert!(matches!(
        kernels::cast(&ids, DType::F16),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn f16_tensors_shard_gather_and_reduce_in_f32_on_both_transports() {
    let mut rng = Rng::fresh("f16_dtensor");
    let shape = [13, 7];
    for &p in WORLD_SIZES {
        let Some(meshes) = f16_meshes(p, "f16 DTensor") else {
            return;
        };
        for (kind, m) in meshes {
            let x = spread(&mut rng, 91);
            let want = round(&x);
            for place in [
                Placement::Shard(0),
                Placement::Shard(1),
                Placement::Replicate,
            ] {
                let t = DTensor::from_host_f16(&m, &shape, &x, place).unwrap();
                assert_eq!(t.dtype(), DType::F16);
                assert_eq!(t.to_host().unwrap(), want, "{kind} P={p} {place:?}");
                let g = t.redistribute(Placement::Replicate).unwrap();
                assert_eq!(g.dtype(), DType::F16);
                assert_eq!(
                    g.to_host().unwrap(),
                    want,
                    "{kind} P={p} {place:?} gathered"
                );
            }
            // Partial sums: one f16 addend per rank, summed in f32, rounded once.
            let parts: Vec<Vec<f32>> = (0..p).map(|_| round(&rng.vec(91))).collect();
            let shards = m
                .ranks()
                .iter()
                .zip(&parts)
                .map(|(r, v)| {
                    let h: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
                    r.upload_f16(&shape, &h).unwrap()
                })
                .collect();
            let sum = DTensor::from_shards(&m, shards, &shape, Placement::Partial(ReduceOp::Sum))
                .unwrap();
            let got = sum.redistribute(Placement::Replicate).unwrap();
            assert_eq!(got.dtype(), DType::F16);
            let want: Vec<f64> = (0..91)
                .map(|i| parts.iter().map(|v| v[i] as f64).sum())
                .collect();
            for (i, (g, w)) in got.to_host().unwrap().iter().zip(&want).enumerate() {
                // One rounding of the (exact-in-f32 for these) sum.
                let d = (*g as f64 - w).abs();
                assert!(
                    d <= F16_ROUNDOFF * w.abs() + 6e-8,
                    "{kind} P={p} partial sum {i}: got {g}, want {w}"
                );
            }
            // The collectives themselves move 32-bit words and say so.
            let e = comm::all_gather(&m, sum.shards(), 0).unwrap_err();
            assert!(e.to_string().contains("cast f16"), "{e}");
        }
    }
}

#[test]
fn f16_slices_copies_and_fills_are_exact() {
    let Some([(_, m), _]) = f16_meshes(1, "f16 slicing") else {
        return;
    };
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("f16_slicing");
    // Odd sizes: strided blocks and runs that start mid-word.
    let (rows, cols) = (5, 7);
    let x = round(&rng.vec(rows * cols));
    let h: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
    let t = r.upload_f16(&[rows, cols], &h).unwrap();
    let part = kernels::narrow(&t, 1, 2, 3).unwrap();
    assert_eq!(part.dtype(), DType::F16);
    let want: Vec<f32> = (0..rows)
        .flat_map(|i| x[i * cols + 2..i * cols + 5].to_vec())
        .collect();
    assert_eq!(part.to_vec().unwrap(), want, "narrow along columns");
    let tail = kernels::narrow(&t, 0, 3, 2).unwrap();
    assert_eq!(
        tail.to_vec().unwrap(),
        x[3 * cols..].to_vec(),
        "narrow rows"
    );
    let left = kernels::narrow(&t, 1, 0, 2).unwrap();
    let right = kernels::narrow(&t, 1, 2, 5).unwrap();
    let joined = kernels::concat(&[&left, &right], 1).unwrap();
    assert_eq!(joined.to_vec().unwrap(), x, "concat");
    assert_eq!(t.deep_copy().unwrap().to_vec().unwrap(), x, "deep_copy");
    let ones = r
        .filled(&[3], DType::F16, f16::ONE.to_bits() as u32)
        .unwrap();
    assert_eq!(ones.to_vec().unwrap(), [1.0; 3]);
    assert!(matches!(
        r.filled(&[3], DType::F16, 1.0f32.to_bits()),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn f16_without_the_feature_is_a_clear_error_and_the_mesh_stays_usable() {
    mesh_env();
    let m = MeshBuilder::new()
        .ranks(2)
        .without_features(wgpu::Features::SHADER_F16)
        .build()
        .unwrap();
    let r = &m.ranks()[0];
    assert!(!r.device().has_f16());
    let x = r.upload(&[3], &[1.0, 2.0, 3.0]).unwrap();
    let unsupported = |res: Result<_, Error>, what: &str| match res {
        Err(e @ Error::Unsupported { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("SHADER_F16"), "{what}: {msg}");
        }
        other => panic!("{what}: expected Error::Unsupported, got {other:?}"),
    };
    unsupported(r.upload_f16(&[1], &[f16::ONE]).map(|_| ()), "upload_f16");
    unsupported(kernels::cast(&x, DType::F16).map(|_| ()), "cast");
    unsupported(
        DTensor::from_host_f16(&m, &[3], &[1.0, 2.0, 3.0], Placement::Shard(0)).map(|_| ()),
        "from_host_f16",
    );
    unsupported(r.zeros(&[4], DType::F16).map(|_| ()), "zeros");
    // Nothing was lost: f32 work goes on.
    assert_eq!(x.to_vec().unwrap(), [1.0, 2.0, 3.0]);
    let y = DTensor::from_host(&m, &[3], &[1.0, 2.0, 3.0], Placement::Shard(0)).unwrap();
    assert_eq!(y.to_host().unwrap(), [1.0, 2.0, 3.0]);
}
