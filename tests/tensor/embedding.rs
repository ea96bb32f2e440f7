//! `DTensor::embedding` and its VJP: the tape's table gradient against
//! central finite differences of the f64 lookup for every table placement
//! (vocab 13 split raggedly over 2, 3 and 4 ranks, dim 5 likewise), the
//! lookups' placements and values, the padding row getting no gradient, two
//! lookups of one table summing their gradients, tables blocked past one
//! binding equal to whole ones, no communication either way, and bad
//! inputs refused.

use super::fd::{assert_fd, central_differences, dot};
use crate::util::reference::{embedding_backward, embedding_lookup, widen};
use crate::util::{Rng, assert_close, count_lock, counting_mesh, limited_mesh, mesh};
use wgpu_tp::{DTensor, Error, Placement, ReduceOp};

const TOL: f64 = 1e-5;
const PLACEMENTS: [Placement; 3] = [
    Placement::Shard(0),
    Placement::Shard(1),
    Placement::Replicate,
];

/// `Σ dy · table[ids]` in f64, the scalar whose table gradient is the VJP.
fn lookup_dot(table: &[f64], dim: usize, ids: &[i32], dy: &[f64]) -> f64 {
    let rows: Vec<f64> = ids
        .iter()
        .flat_map(|&id| table[id as usize * dim..(id as usize + 1) * dim].to_vec())
        .collect();
    dot(dy, &rows)
}

#[test]
fn embedding_vjp_matches_finite_differences_p1_2_3_4() {
    let _counting = count_lock();
    let mut rng = Rng::fresh("embedding_fd");
    let (vocab, dim, n) = (13, 5, 7);
    let table = rng.vec(vocab * dim);
    // A repeat, the first and the last rows.
    let mut ids: Vec<i32> = (0..n).map(|_| rng.below(vocab) as i32).collect();
    (ids[0], ids[1], ids[2]) = (0, vocab as i32 - 1, 0);
    let dy = rng.vec(n * dim);
    let fd = central_differences(&widen(&table), 1e-3, |t| {
        lookup_dot(t, dim, &ids, &widen(&dy))
    });
    for p in [1, 2, 3, 4] {
        let m = counting_mesh(p);
        for placement in PLACEMENTS {
            let what = format!("P={p} table {placement:?}");
            let t = DTensor::from_host(&m, &[vocab, dim], &table, placement)
                .unwrap()
                .requires_grad();
            m.reset_comm_stats();
            let y = t.embedding(&ids, None).unwrap();
            let want = match placement {
                Placement::Shard(0) => Placement::Partial(ReduceOp::Sum),
                other => other,
            };
            assert_eq!((y.placement(), y.shape()), (want, &[n, dim][..]), "{what}");
            let d = DTensor::from_host(&m, &[n, dim], &dy, Placement::Replicate).unwrap();
            y.backward_with(&d).unwrap();
            assert!(m.comm_stats().is_empty(), "{what}: no communication");
            let values = y.redistribute(Placement::Replicate).unwrap();
            let lookup = embedding_lookup(&table, vocab, dim, &ids, 0);
            assert_close(&what, &values.to_host().unwrap(), &lookup, TOL);
            let g = t.grad().unwrap();
            assert_eq!(
                g.placement(),
                placement,
                "{what}: gradient placed like the table"
            );
            assert_fd(&what, &g.to_host().unwrap(), &fd);
        }
    }
}

#[test]
fn padding_row_gets_no_gradient_and_two_uses_add_up_p1_3() {
    let mut rng = Rng::fresh("embedding_padding");
    let (vocab, dim) = (13, 5);
    let table = rng.vec(vocab * dim);
    let ids = [3, 7, 3, 12, 0, 7, 7];
    let n = ids.len();
    let dy = rng.vec(n * dim);
    let lookup = embedding_lookup(&table, vocab, dim, &ids, 0);
    let padded = embedding_backward(&ids, &dy, (vocab, dim), 0, None, Some(7));
    let thrice: Vec<f64> = embedding_backward(&ids, &dy, (vocab, dim), 0, None, None)
        .iter()
        .map(|v| 3.0 * v)
        .collect();
    let whole = |y: DTensor| y.redistribute(Placement::Replicate).unwrap();
    for p in [1, 3] {
        let m = mesh(p);
        let d = DTensor::from_host(&m, &[n, dim], &dy, Placement::Replicate).unwrap();
        for placement in PLACEMENTS {
            let what = format!("P={p} {placement:?}");
            let t = DTensor::from_host(&m, &[vocab, dim], &table, placement).unwrap();
            // The padding row still looks up; it only gets no gradient.
            let leaf = t.requires_grad();
            let y = whole(leaf.embedding(&ids, Some(7)).unwrap());
            assert_close(&what, &y.to_host().unwrap(), &lookup, TOL);
            y.backward_with(&d).unwrap();
            let g = leaf.grad().unwrap().to_host().unwrap();
            assert_close(&format!("{what} padding"), &g, &padded, TOL);
            // One table looked up twice: the tape sums both uses' gradients.
            let leaf = t.requires_grad();
            let a = whole(leaf.embedding(&ids, None).unwrap());
            let b = whole(leaf.embedding(&ids, None).unwrap())
                .scale(2.0)
                .unwrap();
            a.add(&b).unwrap().backward_with(&d).unwrap();
            let g = leaf.grad().unwrap().to_host().unwrap();
            assert_close(&format!("{what} two uses"), &g, &thrice, TOL);
        }
    }
}

/// A table of 773 × 64 f32 is past a 48 KiB binding on 1 to 3 ranks, so its
/// shards are row blocks: lookups and gradients equal a whole table's bit
/// for bit, and the f64 reference.
#[test]
fn blocked_tables_equal_whole_ones_p1_2_3() {
    let mut rng = Rng::fresh("embedding_blocked");
    let (vocab, dim) = (773, 64);
    let table = rng.vec(vocab * dim);
    let ids: Vec<i32> = (0..11)
        .map(|_| rng.below(vocab) as i32)
        .chain([0, 772, 400])
        .collect();
    let n = ids.len();
    let dy = rng.vec(n * dim);
    let want = embedding_backward(&ids, &dy, (vocab, dim), 0, None, None);
    for p in [1, 2, 3] {
        let results: Vec<(Vec<f32>, Vec<f32>)> = [limited_mesh(p, 48 * 1024, p > 1), mesh(p)]
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let t = DTensor::from_host(m, &[vocab, dim], &table, Placement::Shard(0))
                    .unwrap()
                    .requires_grad();
                if i == 0 {
                    assert!(t.shards().iter().all(|s| s.is_blocked()), "P={p}: blocked");
                }
                let y = t.embedding(&ids, None).unwrap();
                let d = DTensor::from_host(m, &[n, dim], &dy, Placement::Replicate).unwrap();
                y.backward_with(&d).unwrap();
                let y = y.redistribute(Placement::Replicate).unwrap();
                (y.to_host().unwrap(), t.grad().unwrap().to_host().unwrap())
            })
            .collect();
        let lookup = embedding_lookup(&table, vocab, dim, &ids, 0);
        assert_close(
            &format!("P={p} blocked lookup"),
            &results[0].0,
            &lookup,
            TOL,
        );
        assert_close(&format!("P={p} blocked grad"), &results[0].1, &want, TOL);
        assert_eq!(
            results[0], results[1],
            "P={p}: blocked = whole, bit for bit"
        );
    }
}

#[test]
fn bad_tables_and_ids_are_errors() {
    let m = mesh(3);
    let t = DTensor::from_host(&m, &[5, 2], &[0.5; 10], Placement::Shard(0)).unwrap();
    for ids in [&[0, 5][..], &[-1]] {
        assert!(
            matches!(t.embedding(ids, None), Err(Error::OutOfRange { .. })),
            "{ids:?}"
        );
    }
    let flat = DTensor::from_host(&m, &[10], &[0.5; 10], Placement::Replicate).unwrap();
    assert!(flat.embedding(&[0], None).is_err(), "a 1-D table");
    let ints = DTensor::from_host_i32(&m, &[5, 2], &[1; 10], Placement::Replicate).unwrap();
    assert!(ints.embedding(&[0], None).is_err(), "an i32 table");
    let parts: Vec<_> = m
        .ranks()
        .iter()
        .map(|r| r.upload(&[5, 2], &[0.5; 10]).unwrap())
        .collect();
    let sum = Placement::Partial(ReduceOp::Sum);
    let partial = DTensor::from_shards(&m, parts, &[5, 2], sum).unwrap();
    assert!(partial.embedding(&[0], None).is_err(), "a partial table");
    let y = t
        .embedding(&[4], None)
        .unwrap()
        .redistribute(Placement::Replicate);
    assert_eq!(
        y.unwrap().to_host().unwrap(),
        vec![0.5, 0.5],
        "still usable"
    );
}
