//! Embedding lookup and its deterministic scatter-add backward against f64,
//! for one rank's shard of rows `[start, start + rows)`; the lookup on a
//! bf16 table too.

use crate::util::reference::{embedding_backward, embedding_lookup};
use crate::util::{Rng, assert_close, f32_bits, mesh, round_bf16};
use wgpu_tp::half::bf16;
use wgpu_tp::{DType, Error, kernels};

/// Ids drawn from `[lo, hi)`, so some fall outside the shard (and below 0).
fn random_ids(rng: &mut Rng, n: usize, lo: i32, hi: i32) -> Vec<i32> {
    (0..n)
        .map(|_| lo + rng.below((hi - lo) as usize) as i32)
        .collect()
}

#[test]
fn lookup_matches_f64_with_ids_outside_the_shard() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("embedding_lookup");
    // (rows, dim, n, start)
    for &(rows, dim, n, start) in &[
        (7usize, 1usize, 13usize, 0i64),
        (13, 17, 7, 5),
        (17, 13, 29, 40),
        (5, 3, 1, 1000),
        (64, 33, 300, 7),
    ] {
        let table = rng.vec(rows * dim);
        let lo = -3 - start as i32;
        let hi = start as i32 + rows as i32 + 4;
        let mut ids = random_ids(&mut rng, n, lo.min(-1), hi);
        ids[0] = i32::MIN; // must not wrap into range
        if n > 1 {
            ids[n - 1] = start as i32 + rows as i32 - 1; // last owned row
        }
        let tt = r.upload(&[rows, dim], &table).unwrap();
        let ti = r.upload_i32(&[n], &ids).unwrap();
        let got = kernels::embedding_lookup(&tt, &ti, start)
            .unwrap()
            .to_vec()
            .unwrap();
        assert_close(
            "lookup",
            &got,
            &embedding_lookup(&table, rows, dim, &ids, start),
            1e-6,
        );
        // A bf16 table (odd row lengths split words between rows) is read
        // as stored: exactly the widened rows.
        let narrow: Vec<bf16> = table.iter().map(|&v| bf16::from_f32(v)).collect();
        let tb = r.upload_bf16(&[rows, dim], &narrow).unwrap();
        let got = kernels::embedding_lookup(&tb, &ti, start).unwrap();
        assert_eq!(got.dtype(), DType::F32);
        let want = embedding_lookup(&round_bf16(&table), rows, dim, &ids, start);
        let want: Vec<f32> = want.iter().map(|&v| v as f32).collect();
        assert_eq!(
            got.to_vec().unwrap(),
            want,
            "bf16 lookup rows {rows} dim {dim}"
        );
    }
}

#[test]
fn lookup_flattens_multi_dim_ids() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("embedding_lookup_2d");
    let (rows, dim) = (11, 5);
    let table = rng.vec(rows * dim);
    let ids = random_ids(&mut rng, 3 * 7, -2, 13);
    let tt = r.upload(&[rows, dim], &table).unwrap();
    let ti = r.upload_i32(&[3, 7], &ids).unwrap();
    let out = kernels::embedding_lookup(&tt, &ti, 0).unwrap();
    assert_eq!(out.shape(), &[21, dim]);
    assert_close(
        "lookup 2-D ids",
        &out.to_vec().unwrap(),
        &embedding_lookup(&table, rows, dim, &ids, 0),
        1e-6,
    );
}

#[test]
fn backward_scatter_adds_repeated_ids_deterministically() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("embedding_backward");
    for &(rows, dim, n, start) in &[
        (7usize, 1usize, 13usize, 0i64),
        (5, 17, 200, 3), // few rows, many tokens: heavy repetition
        (17, 13, 31, 10),
        (13, 70, 500, 2),
    ] {
        let ids = random_ids(&mut rng, n, -2, start as i32 + rows as i32 + 3);
        let dout = rng.vec(n * dim);
        let acc = rng.vec(rows * dim);
        let ti = r.upload_i32(&[n], &ids).unwrap();
        let td = r.upload(&[n, dim], &dout).unwrap();
        let ta = r.upload(&[rows, dim], &acc).unwrap();

        let g1 = kernels::embedding_backward(&ti, &td, rows, start, None)
            .unwrap()
            .to_vec()
            .unwrap();
        assert_close(
            "backward",
            &g1,
            &embedding_backward(&ids, &dout, (rows, dim), start, None, None),
            1e-5,
        );
        let g2 = kernels::embedding_backward(&ti, &td, rows, start, None)
            .unwrap()
            .to_vec()
            .unwrap();
        assert_eq!(
            f32_bits(&g1),
            f32_bits(&g2),
            "backward must be bit-identical"
        );

        let ga = kernels::embedding_backward(&ti, &td, rows, start, Some(&ta)).unwrap();
        assert_close(
            "backward + accumulate",
            &ga.to_vec().unwrap(),
            &embedding_backward(&ids, &dout, (rows, dim), start, Some(&acc), None),
            1e-5,
        );
        // The accumulator itself is left alone.
        assert_eq!(ta.to_vec().unwrap(), acc);
    }
}

#[test]
fn backward_accepts_dout_shaped_like_ids() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("embedding_backward_3d");
    let (rows, dim) = (9, 4);
    let ids = random_ids(&mut rng, 2 * 5, 0, 9);
    let dout = rng.vec(2 * 5 * dim);
    let ti = r.upload_i32(&[2, 5], &ids).unwrap();
    let td = r.upload(&[2, 5, dim], &dout).unwrap();
    let g = kernels::embedding_backward(&ti, &td, rows, 0, None).unwrap();
    assert_eq!(g.shape(), &[rows, dim]);
    assert_close(
        "backward 3-D dout",
        &g.to_vec().unwrap(),
        &embedding_backward(&ids, &dout, (rows, dim), 0, None, None),
        1e-5,
    );
}

#[test]
fn embedding_errors_leave_mesh_usable() {
    let m = mesh(2);
    let (r0, r1) = (&m.ranks()[0], &m.ranks()[1]);
    let table = r0.upload(&[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let ids = r0.upload_i32(&[2], &[2, 0]).unwrap();
    let f32_ids = r0.upload(&[2], &[2.0, 0.0]).unwrap();
    let ids_r1 = r1.upload_i32(&[2], &[2, 0]).unwrap();
    let dout = r0.upload(&[2, 2], &[1.0; 4]).unwrap();

    assert!(matches!(
        kernels::embedding_lookup(&table, &f32_ids, 0),
        Err(Error::DTypeMismatch { .. })
    ));
    assert!(matches!(
        kernels::embedding_lookup(&table, &ids_r1, 0),
        Err(Error::RankMismatch { .. })
    ));
    assert!(matches!(
        kernels::embedding_lookup(&table.reshape(&[6]).unwrap(), &ids, 0),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        kernels::embedding_lookup(&table, &ids, -1),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        kernels::embedding_backward(&f32_ids, &dout, 3, 0, None),
        Err(Error::DTypeMismatch { .. })
    ));
    assert!(matches!(
        kernels::embedding_backward(&ids, &dout.reshape(&[4, 1]).unwrap(), 3, 0, None),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        kernels::embedding_backward(&ids_r1, &dout, 3, 0, None),
        Err(Error::RankMismatch { .. })
    ));
    let bad_acc = r0.zeros(&[4, 2], DType::F32).unwrap();
    assert!(matches!(
        kernels::embedding_backward(&ids, &dout, 3, 0, Some(&bad_acc)),
        Err(Error::ShapeMismatch { .. })
    ));

    let got = kernels::embedding_lookup(&table, &ids, 0)
        .unwrap()
        .to_vec()
        .unwrap();
    assert_eq!(got, vec![5.0, 6.0, 1.0, 2.0]);
    let got = kernels::embedding_backward(&ids, &dout, 3, 0, None)
        .unwrap()
        .to_vec()
        .unwrap();
    assert_eq!(got, vec![1.0, 1.0, 0.0, 0.0, 1.0, 1.0]);
}
