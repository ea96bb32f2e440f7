//! `kernels::top_k`: the k largest entries of one row of a logits shard,
//! equal to a host sort by `f32::total_cmp` (descending, ties by the lower
//! id), with many ties, ±0, ±∞ and NaN, ragged rows, k past the row.

use crate::util::{Rng, mesh};
use wgpu_tp::kernels;

/// The host's order: (value, id + offset) best first, `k` of them at most.
fn host(row: &[f32], k: usize, offset: usize) -> Vec<(u32, i32)> {
    let mut order: Vec<usize> = (0..row.len()).collect();
    order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
    order
        .iter()
        .take(k)
        .map(|&i| (row[i].to_bits(), (i + offset) as i32))
        .collect()
}

#[test]
fn top_k_equals_the_host_order_with_ties_and_specials() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("top_k");
    for (rows, cols) in [(1, 1), (3, 7), (2, 13), (1, 300), (2, 1031), (1, 5000)] {
        // Few distinct values: many ties, spread over the row.
        let mut x: Vec<f32> = (0..rows * cols)
            .map(|_| (rng.below(5) as f32 - 2.0) * 0.5)
            .collect();
        if cols > 10 {
            let specials = [
                f32::INFINITY,
                -0.0,
                0.0,
                f32::NEG_INFINITY,
                f32::NAN,
                -f32::NAN,
            ];
            for v in specials {
                let at = rng.below(rows * cols);
                x[at] = v;
            }
        }
        let t = r.upload(&[rows, cols], &x).unwrap();
        for row in [0, rows - 1] {
            for k in [1, 2, 5, cols.min(40), cols + 3] {
                let k = k.min(kernels::topk::TOP_K_MAX);
                let offset = rng.below(100);
                let out = kernels::top_k(&t, row, k, offset).unwrap();
                let groups = kernels::topk::top_k_groups(r.device(), cols, k);
                assert_eq!(out.shape(), &[groups * k, 2]);
                let what = format!("[{rows}, {cols}] row {row} k {k}");
                // Each group's candidates come best first; merged, the row's k best.
                let mut merged = Vec::new();
                for group in out.to_vec_i32().unwrap().chunks_exact(2 * k) {
                    let found: Vec<(u32, i32)> = group
                        .chunks_exact(2)
                        .filter(|c| c[1] >= 0)
                        .map(|c| (c[0] as u32, c[1]))
                        .collect();
                    let mut sorted = found.clone();
                    sorted.sort_by(|a, b| {
                        f32::from_bits(b.0)
                            .total_cmp(&f32::from_bits(a.0))
                            .then(a.1.cmp(&b.1))
                    });
                    assert_eq!(found, sorted, "{what}: a group out of order");
                    merged.extend(found);
                }
                merged.sort_by(|a, b| {
                    f32::from_bits(b.0)
                        .total_cmp(&f32::from_bits(a.0))
                        .then(a.1.cmp(&b.1))
                });
                merged.truncate(k);
                let want = host(&x[row * cols..(row + 1) * cols], k, offset);
                assert_eq!(merged, want, "{what}");
            }
        }
    }
}

#[test]
fn top_k_refuses_bad_requests_and_keeps_working() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let t = r.upload(&[2, 3], &[1.0, 3.0, 2.0, 0.0, 0.0, -1.0]).unwrap();
    assert!(kernels::top_k(&t, 2, 1, 0).is_err(), "row past the end");
    assert!(kernels::top_k(&t, 0, 0, 0).is_err(), "k = 0");
    assert!(kernels::top_k(&t, 0, kernels::topk::TOP_K_MAX + 1, 0).is_err());
    let ids = r.upload_i32(&[3], &[1, 2, 3]).unwrap();
    assert!(kernels::top_k(&ids, 0, 1, 0).is_err(), "i32 logits");
    // One group for a short row: its candidates are the row's, ties by id.
    let got = kernels::top_k(&t, 1, 3, 10).unwrap().to_vec_i32().unwrap();
    let ids: Vec<i32> = got.chunks_exact(2).map(|c| c[1]).collect();
    assert_eq!(ids, vec![10, 11, 12], "ties by the lower id");
}
