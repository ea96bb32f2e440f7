//! GEMM (all transposes, bias, accumulate) and sum_rows against an f64 CPU
//! reference; ragged and empty shapes, folded grids, and error cases.

use crate::util::{Rng, assert_close, assert_close_cancelling, mesh};
use wgpu_tp::kernels::{self, GemmOptions, GemmVariant};
use wgpu_tp::{DType, Error, Rank};

/// f64 reference for `op(A)·op(B) + bias + acc` with A given as stored.
#[allow(clippy::too_many_arguments)]
fn reference(
    a: &[f32],
    b: &[f32],
    (m, n, k): (usize, usize, usize),
    ta: bool,
    tb: bool,
    bias: Option<&[f32]>,
    acc: Option<&[f32]>,
) -> Vec<f64> {
    let mut c = vec![0.0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = 0.0f64;
            for p in 0..k {
                let x = if ta { a[p * m + i] } else { a[i * k + p] };
                let y = if tb { b[j * k + p] } else { b[p * n + j] };
                s += x as f64 * y as f64;
            }
            if let Some(bias) = bias {
                s += bias[j] as f64;
            }
            if let Some(acc) = acc {
                s += acc[i * n + j] as f64;
            }
            c[i * n + j] = s;
        }
    }
    c
}

/// Run one gemm case on `r` and compare against the reference.
#[allow(clippy::too_many_arguments)]
fn check_case(
    r: &Rank,
    rng: &mut Rng,
    shape: (usize, usize, usize),
    ta: bool,
    tb: bool,
    with_bias: bool,
    with_acc: bool,
) {
    check_variant(
        r,
        rng,
        shape,
        ta,
        tb,
        with_bias,
        with_acc,
        GemmVariant::Auto,
    );
}

/// [`check_case`] with a forced kernel variant.
#[allow(clippy::too_many_arguments)]
fn check_variant(
    r: &Rank,
    rng: &mut Rng,
    (m, n, k): (usize, usize, usize),
    ta: bool,
    tb: bool,
    with_bias: bool,
    with_acc: bool,
    variant: GemmVariant,
) {
    let a = rng.vec(m * k);
    let b = rng.vec(k * n);
    let bias = rng.vec(n);
    let acc = rng.vec(m * n);
    let ta_shape = if ta { [k, m] } else { [m, k] };
    let tb_shape = if tb { [n, k] } else { [k, n] };
    let a_t = r.upload(&ta_shape, &a).unwrap();
    let b_t = r.upload(&tb_shape, &b).unwrap();
    let bias_t = r.upload(&[n], &bias).unwrap();
    let acc_t = r.upload(&[m, n], &acc).unwrap();
    let opts = GemmOptions::new()
        .trans_a(ta)
        .trans_b(tb)
        .bias(with_bias.then_some(&bias_t))
        .accumulate(with_acc.then_some(&acc_t));
    let out = kernels::gemm(&a_t, &b_t, opts.variant(variant)).unwrap();
    assert_eq!(out.shape(), &[m, n]);
    let got = out.to_vec().unwrap();
    let want = reference(
        &a,
        &b,
        (m, n, k),
        ta,
        tb,
        with_bias.then_some(&bias[..]),
        with_acc.then_some(&acc[..]),
    );
    let abs = |v: &[f32]| v.iter().map(|x| x.abs()).collect::<Vec<_>>();
    let (bias_abs, acc_abs) = (abs(&bias), abs(&acc));
    let scale = reference(
        &abs(&a),
        &abs(&b),
        (m, n, k),
        ta,
        tb,
        with_bias.then_some(&bias_abs[..]),
        with_acc.then_some(&acc_abs[..]),
    );
    let what = format!(
        "gemm {variant:?} m={m} n={n} k={k} ta={ta} tb={tb} bias={with_bias} acc={with_acc}"
    );
    assert_close_cancelling(&what, &got, &want, &scale, 1e-5);
}

#[test]
fn gemm_all_transposes_bias_accumulate() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("gemm_all");
    let shapes = [
        (1, 1, 1),
        (7, 13, 17),
        (17, 7, 13),
        (13, 17, 7),
        (4, 8, 12),
        (64, 64, 64),
        (255, 129, 67),
        (9, 300, 5),
    ];
    for &shape in &shapes {
        for ta in [false, true] {
            for tb in [false, true] {
                for (bias, acc) in [(false, false), (true, false), (false, true), (true, true)] {
                    check_case(r, &mut rng, shape, ta, tb, bias, acc);
                }
            }
        }
    }
}

#[test]
fn gemm_each_variant_forced() {
    // Every kernel runs on any adapter when forced (the Tiled one is meant for
    // real GPUs; Buffer packs the operands it cannot read in place,
    // PackedBuffer packs both always, Texture copies 64-aligned untransposed
    // operands in place, packs others). Aligned shapes with partial tiles
    // exercise the Buffer kernel's clamped edges; K % 4 != 0 with trans_a
    // (and not trans_b) takes its zero-padded last K block.
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("gemm_variants");
    let shapes = [
        (1, 1, 1),
        (7, 13, 17),
        (4, 4, 4),
        (20, 36, 12),
        (36, 292, 8),
        (12, 8, 7),
        (65, 68, 33),
        (64, 64, 64),
    ];
    for variant in [
        GemmVariant::Texture,
        GemmVariant::Buffer,
        GemmVariant::Tiled,
        GemmVariant::PackedBuffer,
    ] {
        for &shape in &shapes {
            for ta in [false, true] {
                for tb in [false, true] {
                    for (bias, acc) in [(false, false), (true, true)] {
                        check_variant(r, &mut rng, shape, ta, tb, bias, acc, variant);
                    }
                }
            }
        }
        // K = 0: bias and accumulate only.
        check_variant(r, &mut rng, (4, 8, 0), false, false, true, true, variant);
        check_variant(r, &mut rng, (4, 8, 0), true, true, false, false, variant);
    }
}

#[test]
fn gemm_layer_shapes_register_kernels() {
    // A layer-sized case per product (forward x·Wᵀ, dW = dyᵀx, dx = dy·W) on
    // both register kernels (textures, buffers): long K loops and several
    // tiles in each direction; the last reads both operands in place into
    // textures.
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("gemm_layer");
    for variant in [GemmVariant::Texture, GemmVariant::Buffer] {
        for (shape, ta, tb) in [
            ((64, 288, 512), false, true),
            ((288, 64, 512), true, false),
            ((64, 512, 288), false, false),
            ((100, 192, 128), false, false),
        ] {
            check_variant(r, &mut rng, shape, ta, tb, true, false, variant);
        }
    }
}

#[test]
fn gemm_past_the_texture_limit_runs_in_parts_on_textures() {
    // Operands with a side over max_texture_dimension_2d texels run as
    // parts that fit (gemm/split.rs), with the same result; the
    // storage-buffer kernel runs only where it is asked for.
    let limits = wgpu::Limits {
        max_texture_dimension_2d: 64,
        ..mesh(1).ranks()[0].device().limits().clone()
    };
    let m = wgpu_tp::MeshBuilder::new()
        .ranks(1)
        .limits(limits)
        .build()
        .unwrap();
    let r = &m.ranks()[0];
    r.device().set_poison(true);
    let mut rng = Rng::fresh("gemm_texture_limit");
    // M = 70 rows and K = 300 (75 texels) exceed 64; N = 256 (64 texels) fits.
    for shape in [(70, 16, 8), (8, 16, 300), (8, 256, 8)] {
        for ta in [false, true] {
            check_variant(
                r,
                &mut rng,
                shape,
                ta,
                false,
                true,
                true,
                GemmVariant::Texture,
            );
        }
    }
    // The kernel that ran: textures (sampled `tex`, storage `img`) within
    // the limit and past it, in parts; buffers only when forced.
    let textures = texture_prefix(r, GemmVariant::Texture);
    for ((mm, n, k), kernel, variant) in [
        ((8, 256, 8), textures, GemmVariant::Texture),
        ((70, 16, 8), textures, GemmVariant::Texture),
        ((70, 16, 8), "gemm_buf_", GemmVariant::Buffer),
    ] {
        let names = traced_gemm(&m, r, &mut rng, (mm, n, k), variant, (false, false));
        assert!(
            names.iter().any(|n| n.contains(kernel)),
            "{mm}x{n}x{k}: {names:?}"
        );
        if variant == GemmVariant::Texture {
            assert!(!names.iter().any(|n| n.contains("gemm_buf_")), "{names:?}");
        }
    }
}

/// The kernels one `[M, K]·[K, N]` GEMM of random operands ran on `r`
/// (`variant`; B stored `[N, K]` when `trans_b`), by name, from a trace of
/// `mesh`.
fn traced_gemm(
    mesh: &wgpu_tp::Mesh,
    r: &Rank,
    rng: &mut Rng,
    (m, n, k): (usize, usize, usize),
    variant: GemmVariant,
    (trans_a, trans_b): (bool, bool),
) -> Vec<String> {
    mesh.start_trace().unwrap();
    let a_shape = if trans_a { [k, m] } else { [m, k] };
    let a = r.upload(&a_shape, &rng.vec(m * k)).unwrap();
    let b_shape = if trans_b { [n, k] } else { [k, n] };
    let b = r.upload(&b_shape, &rng.vec(k * n)).unwrap();
    let opts = GemmOptions::new().trans_a(trans_a).trans_b(trans_b);
    kernels::gemm(&a, &b, opts.variant(variant)).unwrap();
    let trace = mesh.stop_trace().unwrap();
    trace.kernels().map(|e| e.name.clone()).collect()
}

/// The Mesa major version in `r`'s driver string (`Mesa 25.0.7 (LLVM …)`).
fn mesa_major(r: &Rank) -> Option<u32> {
    let info = r.device().adapter_info();
    let rest = &info.driver_info[info.driver_info.find("Mesa ")? + 5..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Whether /proc/cpuinfo names an Intel CPU (`None` where it cannot be
/// read, or off x86-64, where the library does not ask).
fn intel_cpu() -> Option<bool> {
    if !cfg!(target_arch = "x86_64") {
        return None;
    }
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let vendor = info.lines().find(|l| l.starts_with("vendor_id"))?;
    Some(vendor.contains("GenuineIntel"))
}

/// The entry-name prefix of the texture kernel `variant` runs on `r`:
/// storage textures (`gemm_img_`) by default on CPU adapters and when asked
/// for, where the device can bind them; else sampled (`gemm_tex_`).
fn texture_prefix(r: &Rank, variant: GemmVariant) -> &'static str {
    let device = r.device();
    let storage = match variant {
        GemmVariant::StorageTexture => true,
        GemmVariant::SampledTexture => false,
        _ => device.is_cpu(),
    };
    let can_bind = device.limits().max_storage_textures_per_shader_stage >= 2;
    if storage && can_bind {
        "gemm_img_"
    } else {
        "gemm_tex_"
    }
}

#[test]
fn gemm_texture_kernel_with_and_without_subgroups() {
    // Where the device has subgroups the texture kernel shares A's rows
    // across the subgroup (tile names end in `s`) and reads transposed
    // operands as stored; without, each lane fetches its own rows (`m`).
    // Both must give the same result on ragged shapes in every layout: M
    // not a multiple of the shared rows, N past the last lane, K not whole
    // texels. The textures are bound as the device prefers (storage on
    // lavapipe) and, on fewer layouts, the other way.
    let default = mesh(1);
    let has_subgroups = default.ranks()[0]
        .device()
        .features()
        .contains(wgpu::Features::SUBGROUP);
    let other = if texture_prefix(&default.ranks()[0], GemmVariant::Texture) == "gemm_img_" {
        GemmVariant::SampledTexture
    } else {
        GemmVariant::StorageTexture
    };
    let lanes = if has_subgroups { "s" } else { "m" };
    let all_layouts = [(false, false), (true, false), (false, true), (true, true)];
    let mut runs = vec![
        (
            default.clone(),
            lanes,
            GemmVariant::Texture,
            &all_layouts[..],
        ),
        (default, lanes, other, &[(false, false), (true, true)][..]),
    ];
    if has_subgroups {
        let without = wgpu_tp::MeshBuilder::new()
            .ranks(1)
            .without_features(wgpu::Features::SUBGROUP)
            .build()
            .unwrap();
        runs.push((without, "m", GemmVariant::Texture, &all_layouts[..]));
    }
    let mut rng = Rng::fresh("gemm_subgroups");
    for (m, lanes, variant, layouts) in &runs {
        let r = &m.ranks()[0];
        r.device().set_poison(true);
        // The last three shapes are over 2^24 multiply-adds: the large tile,
        // A packed in blocks by the scalar pack (K % 4 != 0) and the vec4
        // one, and B [K, N] in blocks of columns (K, N % 4 == 0).
        for shape in [
            (45, 70, 13),
            (33, 9, 130),
            (1, 1, 1),
            (100, 200, 64),
            (257, 131, 515),
            (259, 131, 516),
            (259, 132, 516),
        ] {
            for &(ta, tb) in *layouts {
                check_variant(r, &mut rng, shape, ta, tb, true, true, *variant);
            }
        }
        let names = traced_gemm(m, r, &mut rng, (40, 64, 64), *variant, (false, false));
        let prefix = texture_prefix(r, *variant);
        assert!(
            names
                .iter()
                .any(|n| n.contains(prefix) && n.ends_with(lanes)),
            "expected a {prefix}*{lanes} kernel for {variant:?}: {names:?}"
        );
        // Large products with shared rows read A packed in blocks of rows
        // and B in blocks of columns, from [N, K] (`_bb`, `_tb`) or, where
        // K and N are whole texels, from [K, N] (`_bk`, `_tk`; else `_bn`,
        // `_tn`); the large cases above checked them.
        if *lanes == "s" {
            // Mesa 22.3 keeps B [K, N] as stored (blocks were slower there).
            let new_mesa = mesa_major(r).is_some_and(|v| v >= 24);
            let (bk, tk) = if new_mesa {
                ("_bk", "_tk")
            } else {
                ("_bn", "_tn")
            };
            // The tile: 32 rows a lane on Intel CPUs from Mesa 24 (faster
            // there), 16 elsewhere; None where the vendor cannot be read.
            let tile = intel_cpu().map(|intel| {
                if intel && new_mesa {
                    "_32x8_"
                } else {
                    "_16x8_"
                }
            });
            for (shape, trans, layout) in [
                ((257, 131, 515), (false, false), "_bn"),
                ((257, 131, 515), (false, true), "_bb"),
                ((259, 132, 516), (false, false), bk),
                ((259, 132, 516), (true, false), tk),
            ] {
                let names = traced_gemm(m, r, &mut rng, shape, *variant, trans);
                // Tiles and layouts are chosen for CPU adapters; a GPU's
                // subgroups (32 lanes on NVIDIA) take unblocked tiles.
                assert!(
                    !r.device().is_cpu()
                        || names
                            .iter()
                            .any(|n| n.ends_with(layout) && tile.is_none_or(|t| n.contains(t))),
                    "expected a {tile:?} {layout} kernel for {variant:?}: {names:?}"
                );
            }
            // A read transposed as stored over a long K takes its own tile
            // on Mesa >= 24 (32 rows, against 16 elsewhere): ragged M and N
            // through it, B from either layout, and its name.
            let long_k = (67, 132, 2052);
            for &(ta, tb) in layouts.iter().filter(|(ta, _)| *ta) {
                check_variant(r, &mut rng, long_k, ta, tb, true, true, *variant);
            }
            let tile = if new_mesa { "_32x8_" } else { "_16x8_" };
            let names = traced_gemm(m, r, &mut rng, long_k, *variant, (true, false));
            assert!(
                !r.device().is_cpu() || names.iter().any(|n| n.contains(tile) && n.ends_with(tk)),
                "expected a {tile}*{tk} kernel for {variant:?}: {names:?}"
            );
        }
    }
}

#[test]
fn gemm_square_256_each_layout() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("gemm_256");
    for ta in [false, true] {
        for tb in [false, true] {
            check_case(r, &mut rng, (256, 256, 256), ta, tb, ta, tb);
        }
    }
    // GemmOptions::new(): the plain product.
    let a = rng.vec(5 * 6);
    let b = rng.vec(6 * 3);
    let got = kernels::gemm(
        &r.upload(&[5, 6], &a).unwrap(),
        &r.upload(&[6, 3], &b).unwrap(),
        GemmOptions::new(),
    )
    .unwrap()
    .to_vec()
    .unwrap();
    assert_close(
        "matmul",
        &got,
        &reference(&a, &b, (5, 3, 6), false, false, None, None),
        1e-5,
    );
}

#[test]
fn gemm_empty_dimensions() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("gemm_empty");
    // K = 0: bias / accumulate / zeros.
    for ta in [false, true] {
        for tb in [false, true] {
            for (bias, acc) in [(false, false), (true, false), (true, true)] {
                check_case(r, &mut rng, (5, 6, 0), ta, tb, bias, acc);
            }
        }
    }
    // M = 0 or N = 0: an empty result.
    for (mm, nn, kk) in [(0, 5, 3), (4, 0, 3), (0, 0, 0)] {
        let a = r.upload(&[mm, kk], &vec![1.0; mm * kk]).unwrap();
        let b = r.upload(&[kk, nn], &vec![1.0; kk * nn]).unwrap();
        let bias = r.upload(&[nn], &vec![1.0; nn]).unwrap();
        let out = kernels::gemm(&a, &b, GemmOptions::new().bias(&bias)).unwrap();
        assert_eq!(out.shape(), &[mm, nn]);
        assert!(out.to_vec().unwrap().is_empty());
    }
}

#[test]
fn gemm_folded_grid() {
    // Many row tiles with almost no work each: > 65535 workgroups, so the grid
    // is folded into x/y and the shader must rebuild the linear id.
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("gemm_fold");
    check_case(r, &mut rng, (1_100_003, 1, 2), false, false, true, true);
}

#[test]
fn sum_rows_matches_f64() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("sum_rows");
    for &(rows, cols) in &[
        (0usize, 5usize),
        (1, 1),
        (7, 13),
        (17, 7),
        (128, 3),
        (129, 3),
        (300, 64),
        (5, 4),
        (100_003, 3),
    ] {
        let x = rng.vec(rows * cols);
        let t = r.upload(&[rows, cols], &x).unwrap();
        let out = kernels::sum_rows(&t).unwrap();
        assert_eq!(out.shape(), &[cols]);
        let got = out.to_vec().unwrap();
        let want: Vec<f64> = (0..cols)
            .map(|j| (0..rows).map(|i| x[i * cols + j] as f64).sum())
            .collect();
        assert_close(&format!("sum_rows {rows}x{cols}"), &got, &want, 1e-5);
        // Same input, same bits.
        let again = kernels::sum_rows(&t).unwrap().to_vec().unwrap();
        assert_eq!(
            got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            again.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
    }
    // Empty columns.
    let t = r.upload(&[4, 0], &[]).unwrap();
    assert!(kernels::sum_rows(&t).unwrap().to_vec().unwrap().is_empty());
}

#[test]
fn sum_rows_folded_grid() {
    // One invocation per four columns, 64 per workgroup: > 65535 · 256
    // columns fold the grid (one row keeps the buffer under 128 MiB).
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("sum_rows_fold");
    let cols = 65_536 * 256 + 7;
    let x = rng.vec(cols);
    let t = r.upload(&[1, cols], &x).unwrap();
    let got = kernels::sum_rows(&t).unwrap().to_vec().unwrap();
    let want: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    assert_close("sum_rows folded", &got, &want, 1e-6);
}

#[test]
fn gemm_errors_leave_mesh_usable() {
    let m = mesh(2);
    let (r0, r1) = (&m.ranks()[0], &m.ranks()[1]);
    let a = r0.upload(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let b = r0.upload(&[3, 2], &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0]).unwrap();
    let works = |a: &wgpu_tp::LocalTensor, b: &wgpu_tp::LocalTensor| {
        let got = kernels::gemm(a, b, GemmOptions::new())
            .unwrap()
            .to_vec()
            .unwrap();
        assert_eq!(got, vec![4.0, 5.0, 10.0, 11.0]);
    };
    // Mismatched K.
    let bad_k = r0.upload(&[2, 2], &[1.0; 4]).unwrap();
    let e = kernels::gemm(&a, &bad_k, GemmOptions::new()).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "gemm", .. }), "{e}");
    works(&a, &b);
    // Transposed B must be [N, K].
    let e = kernels::gemm(&a, &b, GemmOptions::new().trans_b(true)).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    // Not 2-D.
    let v = r0.upload(&[3], &[1.0; 3]).unwrap();
    assert!(matches!(
        kernels::gemm(&a, &v, GemmOptions::new()),
        Err(Error::ShapeMismatch { .. })
    ));
    let cube = r0.upload(&[1, 2, 3], &[1.0; 6]).unwrap();
    assert!(matches!(
        kernels::gemm(&cube, &b, GemmOptions::new()),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        kernels::sum_rows(&v),
        Err(Error::ShapeMismatch { .. })
    ));
    works(&a, &b);
    // Wrong bias / accumulate shapes.
    let bias3 = r0.upload(&[3], &[1.0; 3]).unwrap();
    let e = kernels::gemm(&a, &b, GemmOptions::new().bias(&bias3)).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    let acc = r0.upload(&[2, 3], &[1.0; 6]).unwrap();
    let e = kernels::gemm(&a, &b, GemmOptions::new().accumulate(&acc)).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    // Wrong dtype.
    let ids = r0.upload_i32(&[3, 2], &[1; 6]).unwrap();
    assert!(matches!(
        kernels::gemm(&a, &ids, GemmOptions::new()),
        Err(Error::DTypeMismatch { .. })
    ));
    assert!(matches!(
        kernels::sum_rows(&ids),
        Err(Error::DTypeMismatch { .. })
    ));
    // Operands (or options) on different ranks.
    let b1 = r1.upload(&[3, 2], &[1.0; 6]).unwrap();
    assert!(matches!(
        kernels::gemm(&a, &b1, GemmOptions::new()),
        Err(Error::RankMismatch { .. })
    ));
    let bias1 = r1.upload(&[2], &[1.0; 2]).unwrap();
    let e = kernels::gemm(&a, &b, GemmOptions::new().bias(&bias1)).unwrap_err();
    assert!(matches!(e, Error::RankMismatch { .. }), "{e}");
    works(&a, &b);
    // Rank 1 still works too.
    let a1 = r1.upload(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let b1 = r1.upload(&[3, 2], &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0]).unwrap();
    works(&a1, &b1);
    let s = kernels::sum_rows(&a1).unwrap().to_vec().unwrap();
    assert_eq!(s, vec![5.0, 7.0, 9.0]);
    assert_eq!(a1.dtype(), DType::F32);
}

/// The options' setters fill the fields they name (and take an `Option`
/// where a field is one); a kernel asked for what it cannot take refuses,
/// naming it: the small-M kernel a product of more than 8 rows. The
/// process-wide variant falls back to `Auto` for those instead.
#[test]
fn options_are_built_by_setters_and_a_kernel_refuses_what_it_cannot_take() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let (a, b) = (
        r.zeros(&[9, 4], DType::F32).unwrap(),
        r.zeros(&[3, 4], DType::F32).unwrap(),
    );
    let bias = r.zeros(&[3], DType::F32).unwrap();
    let o = GemmOptions::new()
        .trans_b(true)
        .bias(&bias)
        .out_dtype(DType::F32)
        .activation(wgpu_tp::kernels::Activation::Relu)
        .variant(GemmVariant::Gemv)
        .weight(true);
    assert!(o.trans_b && !o.trans_a && o.weight && o.bias.is_some());
    assert_eq!(
        (o.out_dtype, o.variant),
        (Some(DType::F32), GemmVariant::Gemv)
    );
    assert!(o.bias(None).bias.is_none() && o.accumulate(Some(&bias)).accumulate.is_some());
    let e = kernels::gemm(&a, &b, o).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { .. }) && e.to_string().contains("at most 8 rows"),
        "{e}"
    );
    // Eight rows it takes; Auto takes any.
    let a8 = r.zeros(&[8, 4], DType::F32).unwrap();
    assert_eq!(kernels::gemm(&a8, &b, o).unwrap().shape(), [8, 3]);
    let auto = o.variant(GemmVariant::Auto);
    assert_eq!(kernels::gemm(&a, &b, auto).unwrap().shape(), [9, 3]);
}
