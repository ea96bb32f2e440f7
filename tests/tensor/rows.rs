//! `DTensor::add_row` and `DTensor::sum_rows` against f64 on every placement
//! rule, world size and transport, with ragged sizes (N below P leaves ranks
//! without columns, T below P without rows); shard units carried over; no
//! communication; refused placements and shapes return errors and leave the
//! mesh usable.

use crate::util::reference::sum_rows;
use crate::util::{Rng, WORLD_SIZES, assert_close, count_lock, counting_meshes, mesh, meshes};
use wgpu_tp::{DTensor, Error, Mesh, Placement, ReduceOp};

const SUM: Placement = Placement::Partial(ReduceOp::Sum);
/// (T, N): ragged; N = 3 below P = 4, 8; T = 2 below P = 3, 4, 8.
const SIZES: &[(usize, usize)] = &[(7, 17), (13, 3), (2, 13)];
const TOL: f64 = 1e-5;

/// `y[i, j] + b[j]` in f64.
fn add_row_ref(y: &[f32], b: &[f32], n: usize) -> Vec<f64> {
    y.iter()
        .enumerate()
        .map(|(i, v)| *v as f64 + b[i % n] as f64)
        .collect()
}

/// A `Partial(Sum)` tensor whose rank r holds `parts[r]`.
fn partial(m: &Mesh, shape: &[usize], parts: &[Vec<f32>]) -> DTensor {
    let shards = m
        .ranks()
        .iter()
        .zip(parts)
        .map(|(r, d)| r.upload(shape, d).unwrap())
        .collect();
    DTensor::from_shards(m, shards, shape, SUM).unwrap()
}

#[test]
fn add_row_and_sum_rows_match_f64_on_every_placement_p1_2_3_4_8() {
    let mut rng = Rng::fresh("dtensor_rows");
    let (rep, s0, s1) = (
        Placement::Replicate,
        Placement::Shard(0),
        Placement::Shard(1),
    );
    for &(t, n) in SIZES {
        let (y, b) = (rng.vec(t * n), rng.vec(n));
        let want_add = add_row_ref(&y, &b, n);
        let want_sum = sum_rows(&y, t, n);
        for &p in WORLD_SIZES {
            for (transport, m) in meshes(p) {
                for (yp, bp) in [(s1, s0), (rep, rep), (s0, rep)] {
                    let what = format!("{transport} P={p} {t}x{n} y {yp:?} bias {bp:?}");
                    let yd = DTensor::from_host(&m, &[t, n], &y, yp).unwrap();
                    let bd = DTensor::from_host(&m, &[n], &b, bp).unwrap();
                    let z = yd.add_row(&bd).unwrap();
                    assert_eq!((z.placement(), z.shape()), (yp, &[t, n][..]), "{what}");
                    assert_close(&what, &z.to_host().unwrap(), &want_add, TOL);
                }
                for (xp, sp) in [(s1, s0), (rep, rep), (s0, SUM)] {
                    let what = format!("{transport} P={p} {t}x{n} sum_rows {xp:?}");
                    let s = DTensor::from_host(&m, &[t, n], &y, xp).unwrap().sum_rows();
                    let s = s.unwrap();
                    assert_eq!((s.placement(), s.shape()), (sp, &[n][..]), "{what}");
                    assert_close(&what, &s.to_host().unwrap(), &want_sum, TOL);
                }
                // A Partial(Sum) input: the sum over ranks of each rank's column sums.
                let parts: Vec<Vec<f32>> = (0..p).map(|_| rng.vec(t * n)).collect();
                let mut want = vec![0.0; n];
                for part in &parts {
                    for (w, s) in want.iter_mut().zip(sum_rows(part, t, n)) {
                        *w += s;
                    }
                }
                let s = partial(&m, &[t, n], &parts).sum_rows().unwrap();
                assert_eq!(s.placement(), SUM);
                let what = format!("{transport} P={p} {t}x{n} sum_rows Partial(Sum)");
                assert_close(&what, &s.to_host().unwrap(), &want, TOL);
            }
        }
    }
}

#[test]
fn add_row_and_sum_rows_keep_whole_units_p1_2_3_4_8() {
    let (t, n, unit) = (5, 12, 4);
    let mut rng = Rng::fresh("dtensor_rows_units");
    let (y, b) = (rng.vec(t * n), rng.vec(n));
    for &p in WORLD_SIZES {
        let m = mesh(p);
        let yd = DTensor::from_host_in_units(&m, &[t, n], &y, Placement::Shard(1), unit).unwrap();
        let bd = DTensor::from_host_in_units(&m, &[n], &b, Placement::Shard(0), unit).unwrap();
        let z = yd.add_row(&bd).unwrap();
        assert_eq!(z.shard_unit(), unit, "P={p}");
        assert_close(
            &format!("P={p}"),
            &z.to_host().unwrap(),
            &add_row_ref(&y, &b, n),
            TOL,
        );
        let s = yd.sum_rows().unwrap();
        assert_eq!((s.placement(), s.shard_unit()), (Placement::Shard(0), unit));
        assert_close(
            &format!("P={p}"),
            &s.to_host().unwrap(),
            &sum_rows(&y, t, n),
            TOL,
        );
        if p == 4 {
            // 12 in units of 4 over 4 ranks is [4, 4, 4, 0]; plainly [3, 3, 3, 3].
            let plain = DTensor::from_host(&m, &[n], &b, Placement::Shard(0)).unwrap();
            let e = yd.add_row(&plain).unwrap_err();
            assert!(e.to_string().contains("line up"), "{e}");
        }
    }
}

#[test]
fn add_row_and_sum_rows_communicate_nothing_p1_2_3_4_8() {
    let _counting = count_lock();
    let (t, n) = (7, 5);
    let mut rng = Rng::fresh("dtensor_rows_comm");
    let (y, b) = (rng.vec(t * n), rng.vec(n));
    let (rep, s0, s1) = (
        Placement::Replicate,
        Placement::Shard(0),
        Placement::Shard(1),
    );
    for &p in WORLD_SIZES {
        for (transport, m) in counting_meshes(p) {
            for (yp, bp) in [(s1, s0), (rep, rep), (s0, rep)] {
                let yd = DTensor::from_host(&m, &[t, n], &y, yp).unwrap();
                let bd = DTensor::from_host(&m, &[n], &b, bp).unwrap();
                m.reset_comm_stats();
                let z = yd.add_row(&bd).unwrap();
                let s = yd.sum_rows().unwrap();
                let stats = m.comm_stats();
                assert!(stats.is_empty(), "{transport} P={p} {yp:?}: {stats:?}");
                drop((z.to_host().unwrap(), s.to_host().unwrap()));
            }
        }
    }
}

#[test]
fn add_row_and_sum_rows_refuse_partial_and_bad_shapes() {
    for &p in &[2, 3] {
        let m = mesh(p);
        let (t, n) = (4, 5);
        let y = |pl| DTensor::from_host(&m, &[t, n], &vec![1.0; t * n], pl).unwrap();
        let b = |pl| DTensor::from_host(&m, &[n], &vec![0.5; n], pl).unwrap();
        let (rep, s0, s1) = (
            Placement::Replicate,
            Placement::Shard(0),
            Placement::Shard(1),
        );
        let msg = |e: Error| e.to_string();
        let e = msg(y(SUM).add_row(&b(rep)).unwrap_err());
        assert!(e.contains("Partial(Sum)") && e.contains("reduce"), "{e}");
        let e = msg(y(s1).add_row(&b(rep)).unwrap_err());
        assert!(e.contains("Shard(1)") && e.contains("Replicate"), "{e}");
        let e = msg(y(rep).add_row(&b(s0)).unwrap_err());
        assert!(e.contains("redistribute"), "{e}");
        let long = DTensor::from_host(&m, &[n + 1], &vec![0.0; n + 1], rep).unwrap();
        assert!(matches!(
            y(rep).add_row(&long),
            Err(Error::ShapeMismatch { .. })
        ));
        let max = Placement::Partial(ReduceOp::Max);
        let e = msg(y(max).sum_rows().unwrap_err());
        assert!(e.contains("Partial(Max)"), "{e}");
        assert!(matches!(
            b(rep).sum_rows(),
            Err(Error::ShapeMismatch { .. })
        ));
        let other = DTensor::from_host(&crate::util::shared_mesh(p), &[n], &[0.0; 5], rep);
        let e = msg(y(rep).add_row(&other.unwrap()).unwrap_err());
        assert!(e.contains("different meshes"), "{e}");
        // Still usable.
        let z = y(s0).add_row(&b(rep)).unwrap().sum_rows().unwrap();
        let z = z.redistribute(rep).unwrap().to_host().unwrap();
        assert_eq!(z, vec![6.0; n], "P={p}");
    }
}
