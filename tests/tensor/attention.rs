//! `DTensor::causal_attention` on heads split over ranks: its output against
//! an f64 host forward and its VJP (the tape's gradient of qkv) against
//! central finite differences of it, batch 2 of sequences of 3, P = 1, 2, 3
//! with ragged heads (5 heads over 2 or 3 ranks, 2 heads over 3 ranks leave
//! one without), with and without dropout on the probabilities (the mask is
//! the kernel's, keyed on the global head, so the same at every P);
//! `DTensor::attention_decode` step by step equals the full op's rows and
//! records nothing; bad operands are errors.

use super::fd::{assert_fd, central, dot, wide};
use crate::util::{Rng, assert_close, mesh};
use wgpu_tp::kernels::{PhiloxKey, dropout};
use wgpu_tp::shard::split_range;
use wgpu_tp::tensor::AttentionDropout;
use wgpu_tp::{DTensor, Mesh, Placement};

const BATCH: usize = 2;
const SEQ: usize = 3;
/// (heads, head_dim).
const HEADS: &[(usize, usize)] = &[(5, 2), (2, 3)];
const KEY: PhiloxKey = PhiloxKey {
    seed: 7,
    step: 3,
    layer: 2,
};

/// Causal attention in f64 of `qkv` `[BATCH·SEQ, 3·h·d]` (`[q | k | v]`),
/// the probabilities times `mask` `[BATCH, h, SEQ, SEQ]` where given.
fn host_attention(qkv: &[f64], h: usize, d: usize, mask: Option<&[f64]>) -> Vec<f64> {
    let (w, hd) = (3 * h * d, h * d);
    let mut out = vec![0.0; BATCH * SEQ * hd];
    for b in 0..BATCH {
        for head in 0..h {
            let col = |t: usize, part: usize| (b * SEQ + t) * w + part * hd + head * d;
            for i in 0..SEQ {
                let s: Vec<f64> = (0..=i)
                    .map(|j| {
                        let qk: f64 = (0..d)
                            .map(|e| qkv[col(i, 0) + e] * qkv[col(j, 1) + e])
                            .sum();
                        qk / (d as f64).sqrt()
                    })
                    .collect();
                let max = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = s.iter().map(|v| (v - max).exp()).sum();
                for (j, sj) in s.iter().enumerate() {
                    let m = mask.map_or(1.0, |m| m[((b * h + head) * SEQ + i) * SEQ + j]);
                    let pj = (sj - max).exp() / sum * m;
                    for e in 0..d {
                        out[(b * SEQ + i) * hd + head * d + e] += pj * qkv[col(j, 2) + e];
                    }
                }
            }
        }
    }
    out
}

/// Column `c` of the rank-by-rank layout (rank r's `[q_r | k_r | v_r]`
/// after rank r − 1's) holds logical column `order[c]`.
fn qkv_order(h: usize, d: usize, p: usize) -> Vec<usize> {
    let mut order = Vec::with_capacity(3 * h * d);
    for r in 0..p {
        for part in 0..3 {
            for head in split_range(h, p, r) {
                order.extend((0..d).map(|e| part * h * d + head * d + e));
            }
        }
    }
    order
}

/// The logical `[rows, 3·h·d]` `qkv` as a column-parallel projection places
/// it: `Shard(1)` in whole heads.
fn place_qkv(m: &Mesh, qkv: &[f32], rows: usize, h: usize, d: usize) -> DTensor {
    let order = qkv_order(h, d, m.size());
    let w = 3 * h * d;
    let data: Vec<f32> = (0..rows * w)
        .map(|i| qkv[i / w * w + order[i % w]])
        .collect();
    DTensor::from_host_in_units(m, &[rows, w], &data, Placement::Shard(1), 3 * d).unwrap()
}

/// A gradient of [`place_qkv`]'s tensor back in the logical column order.
fn logical_qkv(g: &DTensor, h: usize, d: usize) -> Vec<f32> {
    let order = qkv_order(h, d, g.mesh().size());
    let (host, w) = (g.to_host().unwrap(), 3 * h * d);
    let mut out = vec![0.0; host.len()];
    for (i, v) in host.iter().enumerate() {
        out[i / w * w + order[i % w]] = *v;
    }
    out
}

/// The kernel's dropout scale `m/(1 − p)` over `[BATCH, h, SEQ, SEQ]`.
fn mask(p: f32, h: usize) -> Vec<f64> {
    let n = BATCH * h * SEQ * SEQ;
    let ones = mesh(1).ranks()[0]
        .upload(&[BATCH, h, SEQ, SEQ], &vec![1.0; n])
        .unwrap();
    wide(&dropout(&ones, p, KEY, None).unwrap().to_vec().unwrap())
}

#[test]
fn causal_attention_vjp_matches_finite_differences_p1_2_3() {
    let mut rng = Rng::fresh("attention_fd");
    let rows = BATCH * SEQ;
    for &(h, d) in HEADS {
        let (qkv, dy) = (rng.vec(rows * 3 * h * d), rng.vec(rows * h * d));
        let (qkv64, dy64) = (wide(&qkv), wide(&dy));
        for drop_p in [None, Some(0.25f32)] {
            let m64 = drop_p.map(|p| mask(p, h));
            let want = host_attention(&qkv64, h, d, m64.as_deref());
            let fd = central(
                |q| dot(&dy64, &host_attention(q, h, d, m64.as_deref())),
                &qkv64,
            );
            let drop = drop_p.map(|p| AttentionDropout { p, key: KEY });
            for p in [1, 2, 3] {
                let what = format!("P={p} heads {h} of {d} dropout {drop_p:?}");
                let m = mesh(p);
                let x = place_qkv(&m, &qkv, rows, h, d).requires_grad();
                let y = x.causal_attention(SEQ, h, d, drop).unwrap();
                assert_eq!(y.placement(), Placement::Shard(1), "{what}");
                assert_eq!(y.shard_unit(), d, "{what}: split in heads");
                assert_close(&format!("{what}: y"), &y.to_host().unwrap(), &want, 1e-5);
                let dyd =
                    DTensor::from_host_in_units(&m, &[rows, h * d], &dy, Placement::Shard(1), d)
                        .unwrap();
                y.backward_with(&dyd).unwrap();
                let g = x.grad().unwrap();
                assert_eq!(
                    (g.placement(), g.shard_unit()),
                    (Placement::Shard(1), 3 * d),
                    "{what}: dqkv placed like qkv"
                );
                assert_fd(&format!("{what}: dqkv"), &logical_qkv(&g, h, d), &fd);
            }
        }
    }
}

#[test]
fn attention_decode_equals_the_full_rows_and_records_nothing_p1_2_3() {
    let mut rng = Rng::fresh("attention_decode");
    let (h, d, steps) = (5, 2, [2, 1, 1]);
    let total: usize = steps.iter().sum();
    let qkv = rng.vec(total * 3 * h * d);
    for p in [1, 2, 3] {
        let m = mesh(p);
        let full = place_qkv(&m, &qkv, total, h, d)
            .causal_attention(total, h, d, None)
            .unwrap()
            .to_host()
            .unwrap();
        let w = 3 * h * d;
        let (mut cache, mut start) = (None::<DTensor>, 0);
        for n in steps {
            let step = place_qkv(&m, &qkv[start * w..(start + n) * w], n, h, d).requires_grad();
            let (out, grown) = step.attention_decode(cache.as_ref(), h, d).unwrap();
            assert!(!out.is_tracked(), "P={p}: decoding is not differentiable");
            assert_eq!(grown.shape(), [start + n, 2, 1, h, d], "P={p}");
            let want = wide(&full[start * h * d..(start + n) * h * d]);
            assert_close(
                &format!("P={p} rows {start}.."),
                &out.to_host().unwrap(),
                &want,
                1e-5,
            );
            (cache, start) = (Some(grown), start + n);
        }
    }
}

#[test]
fn attention_ops_refuse_bad_operands() {
    let m = mesh(2);
    let (h, d, rows) = (3, 2, 6);
    let qkv = place_qkv(&m, &vec![0.5; rows * 3 * h * d], rows, h, d);
    assert!(
        qkv.causal_attention(4, h, d, None).is_err(),
        "6 tokens in sequences of 4"
    );
    assert!(
        qkv.causal_attention(0, h, d, None).is_err(),
        "sequences of 0"
    );
    assert!(
        qkv.causal_attention(3, h + 1, d, None).is_err(),
        "wrong head count"
    );
    let bad_drop = AttentionDropout { p: 1.0, key: KEY };
    assert!(
        qkv.causal_attention(3, h, d, Some(bad_drop)).is_err(),
        "p = 1"
    );
    let plain = DTensor::from_host(&m, &[rows, 3 * h * d], &vec![0.5; 108], Placement::Shard(1));
    assert!(
        plain.unwrap().causal_attention(3, h, d, None).is_err(),
        "columns split in units of 1, not whole heads"
    );
    let rep = DTensor::from_host(
        &m,
        &[rows, 3 * h * d],
        &vec![0.5; 108],
        Placement::Replicate,
    );
    assert!(
        rep.unwrap().causal_attention(3, h, d, None).is_err(),
        "replicated at P = 2"
    );
    let (_, cache) = qkv.attention_decode(None, h, d).unwrap();
    assert!(
        qkv.attention_decode(Some(&cache), h, 3).is_err(),
        "another head_dim"
    );
    assert!(
        qkv.causal_attention(3, h, d, None).is_ok(),
        "usable after the errors"
    );
}
