//! `DTensor::matmul` against an f64 product for every placement rule
//! (column parallel, row parallel, replicated weights with replicated or
//! token-split x), both `transpose_w` settings, every world size and both
//! transports, ragged sizes where some ranks hold no columns or no K; shard
//! units carried to the output; no communication; refused pairings, shapes,
//! dtypes and meshes return errors and leave the mesh usable.

use crate::util::reference::gemm;
use crate::util::{
    Rng, WORLD_SIZES, assert_close_cancelling, count_lock, counting_meshes, mesh, meshes,
    shared_mesh,
};
use wgpu_tp::{DTensor, DType, Error, MatmulOptions, Mesh, Placement, ReduceOp};

const SUM: Placement = Placement::Partial(ReduceOp::Sum);
/// (T, K, N): ragged; N and K below P = 4 and 8 (ranks holding nothing); T below P.
const SIZES: &[(usize, usize, usize)] = &[(7, 13, 17), (13, 3, 2), (2, 5, 7)];
const TOL: f64 = 1e-5;

/// w's (K dim, N dim) as stored.
fn w_dims(transpose_w: bool) -> (usize, usize) {
    if transpose_w { (1, 0) } else { (0, 1) }
}

/// w's stored shape for a `[K, N]` product.
fn w_shape(k: usize, n: usize, transpose_w: bool) -> [usize; 2] {
    if transpose_w { [n, k] } else { [k, n] }
}

/// `x·w` (`x·wᵀ`) in f64, and the same over absolute values (the scale
/// bounding f32's rounding, for the cancellation floor).
fn reference(x: &[f32], w: &[f32], (t, k, n): (usize, usize, usize), tw: bool) -> [Vec<f64>; 2] {
    let abs = |v: &[f32]| v.iter().map(|a| a.abs()).collect::<Vec<f32>>();
    [
        gemm(x, w, t, n, k, false, tw),
        gemm(&abs(x), &abs(w), t, n, k, false, tw),
    ]
}

/// `(x placement, w placement, y placement)` of every rule.
fn rules(transpose_w: bool) -> [(Placement, Placement, Placement); 4] {
    let (kd, nd) = w_dims(transpose_w);
    [
        (
            Placement::Replicate,
            Placement::Shard(nd),
            Placement::Shard(1),
        ),
        (Placement::Shard(1), Placement::Shard(kd), SUM),
        (
            Placement::Replicate,
            Placement::Replicate,
            Placement::Replicate,
        ),
        (
            Placement::Shard(0),
            Placement::Replicate,
            Placement::Shard(0),
        ),
    ]
}

#[test]
fn matmul_matches_f64_for_every_placement_rule_p1_2_3_4_8() {
    let mut rng = Rng::fresh("dtensor_matmul");
    for &(t, k, n) in SIZES {
        let x = rng.vec(t * k);
        let w = rng.vec(k * n);
        for tw in [false, true] {
            let [want, scale] = reference(&x, &w, (t, k, n), tw);
            let ws = w_shape(k, n, tw);
            for &p in WORLD_SIZES {
                for (transport, m) in meshes(p) {
                    for (xp, wp, yp) in rules(tw) {
                        let what = format!(
                            "{transport} P={p} {t}x{k}x{n} transpose_w={tw} x {xp:?} w {wp:?}"
                        );
                        let xd = DTensor::from_host(&m, &[t, k], &x, xp).unwrap();
                        let wd = DTensor::from_host(&m, &ws, &w, wp).unwrap();
                        let y = xd.matmul(&wd, tw).unwrap();
                        assert_eq!(y.placement(), yp, "{what}");
                        assert_eq!(y.shape(), [t, n], "{what}");
                        assert_eq!(y.dtype(), DType::F32, "{what}");
                        let got = y.to_host().unwrap();
                        assert_close_cancelling(&what, &got, &want, &scale, TOL);
                        if yp == SUM {
                            // The partial sums reduced on the mesh give the product too.
                            let r = y.redistribute(Placement::Replicate).unwrap();
                            let got = r.to_host().unwrap();
                            assert_close_cancelling(&what, &got, &want, &scale, TOL);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn matmul_keeps_whole_units_column_and_row_parallel_p1_2_3_4_8() {
    // N and K of 3 units of 4: at P = 4 and 8 some ranks hold no unit.
    let (t, k, n, unit) = (5, 12, 12, 4);
    let mut rng = Rng::fresh("dtensor_matmul_units");
    let (x, w) = (rng.vec(t * k), rng.vec(k * n));
    for tw in [false, true] {
        let (kd, nd) = w_dims(tw);
        let ws = w_shape(k, n, tw);
        let [want, scale] = reference(&x, &w, (t, k, n), tw);
        for &p in WORLD_SIZES {
            let m = mesh(p);
            let what = format!("P={p} transpose_w={tw} unit {unit}");
            let xr = DTensor::from_host(&m, &[t, k], &x, Placement::Replicate).unwrap();
            let wn = DTensor::from_host_in_units(&m, &ws, &w, Placement::Shard(nd), unit).unwrap();
            let y = xr.matmul(&wn, tw).unwrap();
            assert_eq!(
                (y.placement(), y.shard_unit()),
                (Placement::Shard(1), unit),
                "{what}"
            );
            assert_close_cancelling(&what, &y.to_host().unwrap(), &want, &scale, TOL);
            let xs = DTensor::from_host_in_units(&m, &[t, k], &x, Placement::Shard(1), unit);
            let wk = DTensor::from_host_in_units(&m, &ws, &w, Placement::Shard(kd), unit).unwrap();
            let y = xs.unwrap().matmul(&wk, tw).unwrap();
            assert_eq!(y.placement(), SUM, "{what}");
            assert_close_cancelling(&what, &y.to_host().unwrap(), &want, &scale, TOL);
        }
    }
}

#[test]
fn matmul_out_dtype_f32_and_f16_operands() {
    let (t, k, n) = (7, 13, 17);
    let mut rng = Rng::fresh("dtensor_matmul_f16");
    let (x, w) = (rng.vec(t * k), rng.vec(n * k));
    let Some(ms) = crate::util::f16_meshes(2, "matmul_out_dtype_f32_and_f16_operands") else {
        return;
    };
    let f16 = |v: &[f32]| crate::util::round_f16(v);
    let want = gemm(&f16(&x), &f16(&w), t, n, k, false, true);
    for (transport, m) in ms {
        let xd = DTensor::from_host_f16(&m, &[t, k], &x, Placement::Shard(1)).unwrap();
        let wd = DTensor::from_host_f16(&m, &[n, k], &w, Placement::Shard(1)).unwrap();
        let opts = MatmulOptions {
            transpose_w: true,
            out_dtype: Some(DType::F32),
        };
        let y = xd.matmul_with(&wd, opts).unwrap();
        assert_eq!((y.dtype(), y.placement()), (DType::F32, SUM), "{transport}");
        let got = y
            .redistribute(Placement::Replicate)
            .unwrap()
            .to_host()
            .unwrap();
        crate::util::assert_close(transport, &got, &want, TOL);
        // f16 output: column parallel, each element rounded once (an f16
        // partial sum would be rounded per rank before the reduce).
        let xr = DTensor::from_host_f16(&m, &[t, k], &x, Placement::Replicate).unwrap();
        let wn = DTensor::from_host_f16(&m, &[n, k], &w, Placement::Shard(0)).unwrap();
        let y = xr.matmul(&wn, true).unwrap();
        assert_eq!(
            (y.dtype(), y.placement()),
            (DType::F16, Placement::Shard(1))
        );
        crate::util::assert_close_f16(transport, &y.to_host().unwrap(), &want);
    }
}

#[test]
fn matmul_communicates_nothing_p1_2_3_4_8() {
    let _counting = count_lock();
    let (t, k, n) = (7, 13, 5);
    let mut rng = Rng::fresh("dtensor_matmul_comm");
    let (x, w) = (rng.vec(t * k), rng.vec(k * n));
    for &p in WORLD_SIZES {
        for (transport, m) in counting_meshes(p) {
            for tw in [false, true] {
                for (xp, wp, _) in rules(tw) {
                    let xd = DTensor::from_host(&m, &[t, k], &x, xp).unwrap();
                    let wd = DTensor::from_host(&m, &w_shape(k, n, tw), &w, wp).unwrap();
                    m.reset_comm_stats();
                    let y = xd.matmul(&wd, tw).unwrap();
                    let stats = m.comm_stats();
                    assert!(
                        stats.is_empty(),
                        "{transport} P={p} {xp:?}·{wp:?}: {stats:?}"
                    );
                    drop(y.to_host().unwrap());
                }
            }
        }
    }
}

/// `r` is an invalid-argument error whose message mentions every one of `words`.
#[track_caller]
fn refused(r: wgpu_tp::Result<DTensor>, words: &[&str]) {
    match r {
        Err(Error::InvalidArgument { message, .. }) => {
            for w in words {
                assert!(message.contains(w), "{message:?} should mention {w:?}");
            }
        }
        other => panic!("expected an InvalidArgument error, got {other:?}"),
    }
}

/// After refused calls the mesh still multiplies correctly.
fn still_usable(m: &Mesh) {
    let x = DTensor::from_host(
        m,
        &[2, 3],
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        Placement::Replicate,
    );
    let w = DTensor::from_host(m, &[3, 1], &[1.0, 1.0, 1.0], Placement::Replicate).unwrap();
    let y = x.unwrap().matmul(&w, false).unwrap();
    assert_eq!(y.to_host().unwrap(), [6.0, 15.0]);
}

#[test]
fn matmul_refuses_bad_placements_shapes_dtypes_and_meshes() {
    for &p in &[2, 4] {
        let m = mesh(p);
        let (t, k, n) = (3, 6, 5);
        let x = |pl| DTensor::from_host(&m, &[t, k], &vec![0.5; t * k], pl).unwrap();
        let w = |pl| DTensor::from_host(&m, &[n, k], &vec![0.25; n * k], pl).unwrap();
        let (rep, s0, s1) = (
            Placement::Replicate,
            Placement::Shard(0),
            Placement::Shard(1),
        );
        // Partial x, and pairings without a shard-by-shard product.
        refused(
            x(SUM).matmul(&w(s0), true),
            &["Partial(Sum)", "Shard(0)", "redistribute"],
        );
        refused(
            x(s1).matmul(&w(rep), true),
            &["Shard(1)", "Replicate", "redistribute"],
        );
        refused(x(rep).matmul(&w(s1), true), &["Replicate", "Shard(1)"]);
        refused(x(s1).matmul(&w(s0), true), &["Shard(1)", "Shard(0)"]);
        refused(x(s0).matmul(&w(s0), true), &["Shard(0)"]);
        // K split differently: plain 6 over 4 is [2, 2, 1, 1], in units of 2 [2, 2, 2, 0].
        if p == 4 {
            let w2 = DTensor::from_host_in_units(&m, &[n, k], &vec![0.0; n * k], s1, 2).unwrap();
            refused(x(s1).matmul(&w2, true), &["line up", "shard unit 2"]);
        }
        // Shapes: K mismatch, and a 1-D operand.
        let bad = DTensor::from_host(&m, &[n, k + 1], &vec![0.0; n * (k + 1)], rep).unwrap();
        assert!(matches!(
            x(rep).matmul(&bad, true),
            Err(Error::ShapeMismatch { .. })
        ));
        assert!(matches!(
            x(rep).matmul(&w(rep), false),
            Err(Error::ShapeMismatch { .. })
        ));
        let v = DTensor::from_host(&m, &[k], &vec![0.0; k], rep).unwrap();
        assert!(matches!(
            v.matmul(&w(rep), true),
            Err(Error::ShapeMismatch { .. })
        ));
        // Dtypes: i32 operands, an i32 output.
        let xi = DTensor::from_host_i32(&m, &[t, k], &vec![1; t * k], rep).unwrap();
        assert!(matches!(
            xi.matmul(&w(rep), true),
            Err(Error::DTypeMismatch { .. })
        ));
        let opts = MatmulOptions {
            transpose_w: true,
            out_dtype: Some(DType::I32),
        };
        refused(x(rep).matmul_with(&w(rep), opts), &["out_dtype"]);
        // Another mesh of the same size.
        let other = DTensor::from_host(&shared_mesh(p), &[n, k], &vec![0.0; n * k], rep).unwrap();
        refused(x(rep).matmul(&other, true), &["different meshes"]);
        still_usable(&m);
    }
}
