//! Held key/value heads (`Holding`, `DTensor::share_replicas`, and
//! `gqa_attention` / `gqa_decode` on held k, v): every rank holds the
//! key/value heads its query heads read, and no others but to even the
//! blocks; attention on held k, v equals the f64 reference and the
//! replicated op (whose VJP tests/tensor/gqa.rs checks against finite
//! differences), with `dk`, `dv` summed over their holders equal to the
//! replicated op's; decoding grows a held cache; share_replicas' VJP gives
//! every holder the sum of the holders' gradients, bit-identical copies, in
//! one all-reduce; bad layouts are errors. World sizes 1, 2, 3, 4, 8 on
//! both transports.

use super::fd::wide;
use super::gqa::{host_gqa, spec};
use crate::util::{
    Rng, WORLD_SIZES, assert_close, assert_only, count_lock, counting_meshes, meshes, rel_err,
};
use wgpu_tp::shard::split_range;
use wgpu_tp::tensor::Holding;
use wgpu_tp::{Collective, DTensor, Mapping, Placement};

/// The columns of `[rows, kv·d]` each rank holds, rank after rank.
fn expand_cols(x: &[f32], rows: usize, kv: usize, d: usize, h: &Holding) -> Vec<f32> {
    let mut out = Vec::with_capacity(rows * h.expanded() * d);
    for i in 0..rows {
        for &s in &h.starts {
            out.extend_from_slice(&x[(i * kv + s) * d..(i * kv + s + h.per) * d]);
        }
    }
    out
}

/// The held gradient `[rows, P·per·d]` summed over holders into `[rows, kv·d]`.
fn fold_cols(g: &[f32], rows: usize, kv: usize, d: usize, h: &Holding) -> Vec<f64> {
    let mut out = vec![0.0; rows * kv * d];
    let w = h.expanded() * d;
    for i in 0..rows {
        for (r, &s) in h.starts.iter().enumerate() {
            for e in 0..h.per * d {
                out[(i * kv + s) * d + e] += g[i * w + r * h.per * d + e] as f64;
            }
        }
    }
    out
}

#[test]
fn every_rank_holds_the_heads_its_query_heads_read() {
    // SmolLM2 (9 / 3), Qwen2.5-0.5B (14 / 2), Llama-3 (32 / 8), MQA, MHA, ragged.
    for (heads, kv) in [(9, 3), (14, 2), (32, 8), (7, 1), (6, 6), (12, 4), (15, 5)] {
        for p in 1..=heads {
            let h = Holding::kv_heads(heads, kv, p).unwrap();
            let group = heads / kv;
            let mut most = 1;
            for r in 0..p {
                let q = split_range(heads, p, r);
                let (s, end) = (h.starts[r], h.starts[r] + h.per);
                assert!(
                    end <= kv,
                    "{heads}/{kv} P={p} r={r}: block passes the heads"
                );
                if !q.is_empty() {
                    let (first, last) = (q.start / group, (q.end - 1) / group);
                    assert!(s <= first && last < end, "{heads}/{kv} P={p} r={r}");
                    most = most.max(last + 1 - first);
                }
            }
            assert_eq!(
                h.per, most,
                "{heads}/{kv} P={p}: blocks no wider than needed"
            );
            assert!(h.first_holders().iter().all(|&i| i < h.expanded()));
        }
    }
    let h = Holding::kv_heads(9, 3, 3).unwrap();
    assert_eq!(
        (h.per, h.starts.as_slice()),
        (1, &[0, 1, 2][..]),
        "one head each"
    );
    let h = Holding::kv_heads(9, 3, 2).unwrap();
    assert_eq!(
        (h.per, h.starts.as_slice()),
        (2, &[0, 1][..]),
        "head 1 on both"
    );
    let h = Holding::kv_heads(32, 8, 16).unwrap();
    assert_eq!(h.per, 1, "Llama-3 at P = 16: half a head's group each");
    assert_eq!(h.starts, (0..16).map(|r| r / 2).collect::<Vec<_>>());
    for (heads, kv, p) in [(0, 1, 1), (4, 0, 1), (6, 4, 2), (4, 2, 0)] {
        assert!(
            Holding::kv_heads(heads, kv, p).is_err(),
            "{heads}/{kv} P={p}"
        );
    }
}

#[test]
fn attention_on_held_heads_equals_f64_and_the_replicated_op() {
    let mut rng = Rng::fresh("gqa_held");
    let (batch, seq) = (2, 3);
    let rows = batch * seq;
    // (heads, kv_heads, head_dim, window)
    for (h, kv, d, w) in [(9, 3, 2, 0), (6, 2, 3, 2), (4, 4, 2, 0), (5, 1, 4, 1)] {
        let s = spec(h, kv, d, w, seq);
        let (hd, kvd) = (h * d, kv * d);
        let (q, k, v) = (rng.vec(rows * hd), rng.vec(rows * kvd), rng.vec(rows * kvd));
        let dy = rng.vec(rows * hd);
        let want = host_gqa(&wide(&q), &wide(&k), &wide(&v), &s);
        for &p in WORLD_SIZES {
            for (transport, m) in meshes(p) {
                let what = format!("P={p} {transport} heads {h} kv {kv} d {d} window {w}");
                let held = Holding::kv_heads(h, kv, p).unwrap();
                let ew = held.expanded() * d;
                let place_q = || {
                    DTensor::from_host_in_units(&m, &[rows, hd], &q, Placement::Shard(1), d)
                        .unwrap()
                        .requires_grad()
                };
                let hold = |x: &[f32]| {
                    let e = expand_cols(x, rows, kv, d, &held);
                    DTensor::from_host_in_units(
                        &m,
                        &[rows, ew],
                        &e,
                        Placement::Shard(1),
                        held.per * d,
                    )
                    .unwrap()
                    .requires_grad()
                };
                let rep = |x: &[f32]| {
                    DTensor::from_host(&m, &[rows, kvd], x, Placement::Replicate)
                        .unwrap()
                        .requires_grad()
                };
                let dyd = DTensor::from_host_in_units(&m, &[rows, hd], &dy, Placement::Shard(1), d)
                    .unwrap();
                let (xq, xk, xv) = (place_q(), hold(&k), hold(&v));
                let y = xq.gqa_attention(&xk, &xv, &s).unwrap();
                assert_close(&format!("{what}: y"), &y.to_host().unwrap(), &want, 1e-5);
                y.backward_with(&dyd).unwrap();
                // The replicated op on the same numbers.
                let (rq, rk, rv) = (place_q(), rep(&k), rep(&v));
                let fk = Mapping::CopyToParallel.forward(&rk).unwrap();
                rq.gqa_attention(&fk, &rv, &s)
                    .unwrap()
                    .backward_with(&dyd)
                    .unwrap();
                let e = rel_err(
                    &xq.grad().unwrap().to_host().unwrap(),
                    &wide(&rq.grad().unwrap().to_host().unwrap()),
                );
                assert!(
                    e <= 1e-6,
                    "{what}: dq differs from the replicated op's by {e:.2e}"
                );
                for (name, x, r) in [("dk", &xk, &rk), ("dv", &xv, &rv)] {
                    let g = x.grad().unwrap();
                    assert_eq!(
                        (g.placement(), g.shard_unit()),
                        (Placement::Shard(1), held.per * d),
                        "{what}: {name} held like k"
                    );
                    let summed = fold_cols(&g.to_host().unwrap(), rows, kv, d, &held);
                    assert_close(
                        &format!("{what}: {name} over holders"),
                        &r.grad().unwrap().to_host().unwrap(),
                        &summed,
                        1e-6,
                    );
                }
            }
        }
    }
}

#[test]
fn decoding_on_held_heads_grows_a_held_cache() {
    let mut rng = Rng::fresh("gqa_held_decode");
    let steps = [2, 1, 3];
    let total: usize = steps.iter().sum();
    let (h, kv, d, w) = (9, 3, 2, 4);
    let (hd, kvd) = (h * d, kv * d);
    let (q, k, v) = (
        rng.vec(total * hd),
        rng.vec(total * kvd),
        rng.vec(total * kvd),
    );
    let want = host_gqa(&wide(&q), &wide(&k), &wide(&v), &spec(h, kv, d, w, total));
    for &p in WORLD_SIZES {
        for (transport, m) in meshes(p) {
            let held = Holding::kv_heads(h, kv, p).unwrap();
            let (mut cache, mut past) = (None::<DTensor>, 0);
            for n in steps {
                let at = format!("P={p} {transport}: positions {past}..{}", past + n);
                let rows = past * hd..(past + n) * hd;
                let hold = |x: &[f32]| {
                    let e = expand_cols(&x[past * kvd..(past + n) * kvd], n, kv, d, &held);
                    let ew = held.expanded() * d;
                    DTensor::from_host_in_units(&m, &[n, ew], &e, Placement::Shard(1), held.per * d)
                        .unwrap()
                };
                let sq = DTensor::from_host_in_units(
                    &m,
                    &[n, hd],
                    &q[rows.clone()],
                    Placement::Shard(1),
                    d,
                )
                .unwrap();
                let (out, grown) = sq
                    .gqa_decode(&hold(&k), &hold(&v), cache.as_ref(), &spec(h, kv, d, w, n))
                    .unwrap();
                assert_eq!(grown.shape(), [past + n, 2, 1, held.expanded(), d], "{at}");
                if p > 1 {
                    assert_eq!(
                        (grown.placement(), grown.shard_unit()),
                        (Placement::Shard(3), held.per),
                        "{at}"
                    );
                }
                for s in grown.shards() {
                    assert_eq!(
                        s.shape(),
                        [past + n, 2, 1, held.per, d],
                        "{at}: only the held heads"
                    );
                }
                assert_close(&at, &out.to_host().unwrap(), &want[rows], 1e-5);
                (cache, past) = (Some(grown), past + n);
            }
            // A replicated cache does not fit held k and v (P > 1).
            if p > 1 {
                let c = DTensor::from_host(
                    &m,
                    &[1, 2, 1, kv, d],
                    &vec![0.0; 2 * kv * d],
                    Placement::Replicate,
                )
                .unwrap();
                let sq =
                    DTensor::from_host_in_units(&m, &[1, hd], &q[..hd], Placement::Shard(1), d)
                        .unwrap();
                let ew = held.expanded() * d;
                let one = DTensor::from_host_in_units(
                    &m,
                    &[1, ew],
                    &vec![0.5; ew],
                    Placement::Shard(1),
                    held.per * d,
                )
                .unwrap();
                assert!(
                    sq.gqa_decode(&one, &one, Some(&c), &spec(h, kv, d, w, 1))
                        .is_err()
                );
            }
        }
    }
}

#[test]
fn share_replicas_gives_every_holder_the_sum_in_one_all_reduce() {
    let _lock = count_lock();
    let mut rng = Rng::fresh("share_replicas");
    let (heads, kv, cols) = (9, 3, 5);
    for &p in WORLD_SIZES {
        for (transport, m) in counting_meshes(p) {
            let what = format!("P={p} {transport}");
            let held = Holding::kv_heads(heads, kv, p).unwrap().scaled(2);
            let rows = held.expanded();
            let x = DTensor::from_host_in_units(
                &m,
                &[rows, cols],
                &rng.vec(rows * cols),
                Placement::Shard(0),
                held.per,
            )
            .unwrap()
            .requires_grad();
            let g = rng.vec(rows * cols);
            let gd =
                DTensor::from_host_in_units(&m, &[rows, cols], &g, Placement::Shard(0), held.per)
                    .unwrap();
            m.reset_comm_stats();
            let y = x.share_replicas(&held).unwrap();
            assert_eq!(
                y.to_host().unwrap(),
                x.to_host().unwrap(),
                "{what}: forward is the identity"
            );
            y.backward_with(&gd).unwrap();
            if p == 1 {
                assert!(
                    m.comm_stats().is_empty(),
                    "{what}: one rank communicates nothing"
                );
            } else {
                assert_only(&m.comm_stats(), Collective::AllReduce, 1, &what);
            }
            // Logical row j's total over its holders, given to each holder.
            let mut total = vec![0.0f64; held.total * cols];
            for (i, &j) in held.logical_rows().iter().enumerate() {
                for c in 0..cols {
                    total[j * cols + c] += g[i * cols + c] as f64;
                }
            }
            let want: Vec<f64> = held
                .logical_rows()
                .iter()
                .flat_map(|&j| total[j * cols..(j + 1) * cols].to_vec())
                .collect();
            let got = x.grad().unwrap().to_host().unwrap();
            assert_close(&what, &got, &want, 1e-6);
            let first = held.first_holders();
            for (i, &j) in held.logical_rows().iter().enumerate() {
                let (a, b) = (&got[i * cols..][..cols], &got[first[j] * cols..][..cols]);
                assert_eq!(a, b, "{what}: copies of row {j} differ");
            }
            // Not a held tensor of this holding: an error, nothing recorded.
            let plain = DTensor::from_host(&m, &[rows, cols], &g, Placement::Replicate).unwrap();
            assert!(plain.share_replicas(&held).is_err(), "{what}");
            let other = Holding::kv_heads(heads, kv, p + 1).unwrap();
            assert!(x.share_replicas(&other).is_err(), "{what}");
        }
    }
}
