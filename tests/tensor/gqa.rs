//! `DTensor::gqa_attention` and `DTensor::gqa_decode`: grouped-query causal
//! attention with q `Shard(1)` in whole heads and k, v `Replicate`, on every
//! world size of `util::WORLD_SIZES` and both transports. The output against
//! an f64 host forward; the VJP against central finite differences of it,
//! with `dq` placed like q and `dk`, `dv` coming back `Partial(Sum)` (k
//! enters through Megatron's f, `Mapping::CopyToParallel`, whose backward
//! refuses anything but a partial sum; v is a plain leaf, reduced by the
//! tape) whose sums over the ranks are the serial gradient. Groups 1, 2, 3
//! and multi-query, windows 0, 1, 2, 3 heads on 4 and 8 ranks (ranks without
//! a query head). Decoding step by step (`past > 0`) equals the full op's
//! rows, window included; the ops communicate nothing forward and exactly
//! the two reductions of dK, dV backward; dropout on the probabilities gives
//! one rank's numbers at every world size; bad operands are errors.

use super::fd::{assert_fd, central_all, wide};
use crate::util::{
    Rng, WORLD_SIZES, assert_close, assert_only, count_lock, counting_meshes, meshes, rel_err,
};
use wgpu_tp::tensor::GqaSpec;
use wgpu_tp::{Collective, DTensor, Mapping, Placement, ReduceOp};

const BATCH: usize = 2;
const SEQ: usize = 3;

pub(super) fn spec(
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    window: usize,
    seq: usize,
) -> GqaSpec {
    GqaSpec {
        seq,
        heads,
        kv_heads,
        head_dim,
        window,
        dropout: None,
        softcap: None,
    }
}

/// f64 grouped-query attention of q `[B·seq, H·D]`, k, v `[B·seq, KV·D]`
/// (query head h reads key/value head h / (H/KV); query i sees key j iff
/// j ≤ i and, with a window w > 0, i − w < j; scores soft-capped to
/// `c·tanh(s/c)` with `spec.softcap` c).
pub(super) fn host_gqa(q: &[f64], k: &[f64], v: &[f64], s: &GqaSpec) -> Vec<f64> {
    let (h, kv, d, t) = (s.heads, s.kv_heads, s.head_dim, s.seq);
    let (hd, kvd, group) = (h * d, kv * d, h / kv);
    let batch = q.len() / (t * hd);
    let mut out = vec![0.0; q.len()];
    for b in 0..batch {
        for head in 0..h {
            let kh = head / group;
            for i in 0..t {
                let seen: Vec<usize> = (0..=i)
                    .filter(|&j| s.window == 0 || i < j + s.window)
                    .collect();
                let qi = (b * t + i) * hd + head * d;
                let sc: Vec<f64> = seen
                    .iter()
                    .map(|&j| {
                        let kj = (b * t + j) * kvd + kh * d;
                        let raw =
                            (0..d).map(|e| q[qi + e] * k[kj + e]).sum::<f64>() / (d as f64).sqrt();
                        match s.softcap {
                            Some(c) => c as f64 * (raw / c as f64).tanh(),
                            None => raw,
                        }
                    })
                    .collect();
                let m = sc.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = sc.iter().map(|x| (x - m).exp()).sum();
                for (&j, sj) in seen.iter().zip(&sc) {
                    let vj = (b * t + j) * kvd + kh * d;
                    for e in 0..d {
                        out[qi + e] += (sj - m).exp() / z * v[vj + e];
                    }
                }
            }
        }
    }
    out
}

/// (heads, kv_heads, head_dim, window, soft cap): multi-head with 3 heads
/// (ranks without one at P = 4, 8), group 2 with a window, group 3,
/// multi-query with window 1 and head_dim 6; group 2 soft-capped at 0.7
/// (scores of random inputs reach a few units: the cap bends them).
const CASES: &[(usize, usize, usize, usize, f32)] = &[
    (3, 3, 3, 0, 0.0),
    (4, 2, 3, 2, 0.0),
    (6, 2, 2, 0, 0.0),
    (3, 1, 6, 1, 0.0),
    (4, 2, 5, 0, 0.7),
];

/// [`spec`] soft-capped at `cap` (0: none).
fn capped(s: GqaSpec, cap: f32) -> GqaSpec {
    GqaSpec {
        softcap: (cap > 0.0).then_some(cap),
        ..s
    }
}

#[test]
fn gqa_attention_vjp_matches_finite_differences_on_every_world_size() {
    let mut rng = Rng::fresh("gqa_fd");
    let rows = BATCH * SEQ;
    for &(h, kv, d, w, cap) in CASES {
        let s = capped(spec(h, kv, d, w, SEQ), cap);
        let (hd, kvd) = (h * d, kv * d);
        let (q, k, v) = (rng.vec(rows * hd), rng.vec(rows * kvd), rng.vec(rows * kvd));
        let dy = rng.vec(rows * hd);
        let f = |x: &[Vec<f64>]| host_gqa(&x[0], &x[1], &x[2], &s);
        let inputs = [wide(&q), wide(&k), wide(&v)];
        let want_y = f(&inputs);
        let fd = central_all(&f, &inputs, &wide(&dy));
        for &p in WORLD_SIZES {
            for (transport, m) in meshes(p) {
                let what =
                    format!("P={p} {transport} heads {h} kv {kv} d {d} window {w} cap {cap}");
                let xq = DTensor::from_host_in_units(&m, &[rows, hd], &q, Placement::Shard(1), d)
                    .unwrap()
                    .requires_grad();
                let xk = DTensor::from_host(&m, &[rows, kvd], &k, Placement::Replicate)
                    .unwrap()
                    .requires_grad();
                let xv = DTensor::from_host(&m, &[rows, kvd], &v, Placement::Replicate)
                    .unwrap()
                    .requires_grad();
                // k through f: its backward errors unless dK arrives as a partial sum.
                let fk = Mapping::CopyToParallel.forward(&xk).unwrap();
                let y = xq.gqa_attention(&fk, &xv, &s).unwrap();
                assert_eq!(
                    (y.placement(), y.shard_unit()),
                    (Placement::Shard(1), d),
                    "{what}: y split in whole heads"
                );
                assert_close(&format!("{what}: y"), &y.to_host().unwrap(), &want_y, 1e-5);
                let dyd = DTensor::from_host_in_units(&m, &[rows, hd], &dy, Placement::Shard(1), d)
                    .unwrap();
                y.backward_with(&dyd)
                    .unwrap_or_else(|e| panic!("{what}: backward: {e}"));
                let dq = xq.grad().unwrap();
                assert_eq!(
                    (dq.placement(), dq.shard_unit()),
                    (Placement::Shard(1), d),
                    "{what}: dq placed like q"
                );
                assert_fd(&format!("{what}: dq"), &dq.to_host().unwrap(), &fd[0]);
                for (name, x, want) in [("dk", &xk, &fd[1]), ("dv", &xv, &fd[2])] {
                    let g = x.grad().unwrap();
                    assert_eq!(g.placement(), Placement::Replicate, "{what}: {name}");
                    assert_fd(&format!("{what}: {name}"), &g.to_host().unwrap(), want);
                }
            }
        }
    }
}

/// Forward communicates nothing; backward exactly one all-reduce each for
/// dK and dV (their partial sums reaching the replicated leaves), nothing for dQ.
#[test]
fn gqa_attention_communicates_only_the_kv_gradient_reductions() {
    let _lock = count_lock();
    let mut rng = Rng::fresh("gqa_comm");
    let (h, kv, d) = (4, 2, 3);
    let s = spec(h, kv, d, 0, SEQ);
    let rows = BATCH * SEQ;
    for (transport, m) in counting_meshes(3) {
        let q = DTensor::from_host_in_units(
            &m,
            &[rows, h * d],
            &rng.vec(rows * h * d),
            Placement::Shard(1),
            d,
        )
        .unwrap()
        .requires_grad();
        let kvs: Vec<DTensor> = (0..2)
            .map(|_| {
                DTensor::from_host(
                    &m,
                    &[rows, kv * d],
                    &rng.vec(rows * kv * d),
                    Placement::Replicate,
                )
                .unwrap()
                .requires_grad()
            })
            .collect();
        m.reset_comm_stats();
        let y = q.gqa_attention(&kvs[0], &kvs[1], &s).unwrap();
        assert!(
            m.comm_stats().is_empty(),
            "{transport}: forward communicated {:?}",
            m.comm_stats()
        );
        let dy = DTensor::from_host_in_units(
            &m,
            &[rows, h * d],
            &rng.vec(rows * h * d),
            Placement::Shard(1),
            d,
        )
        .unwrap();
        y.backward_with(&dy).unwrap();
        assert_only(&m.comm_stats(), Collective::AllReduce, 2, transport);
    }
}

#[test]
fn gqa_decode_equals_the_full_rows_on_every_world_size() {
    let mut rng = Rng::fresh("gqa_decode");
    let steps = [3, 1, 2, 1];
    let total: usize = steps.iter().sum();
    // (heads, kv_heads, head_dim, window, soft cap)
    for (h, kv, d, w, cap) in [
        (3, 1, 6, 0, 0.0),
        (4, 2, 5, 3, 0.0),
        (6, 3, 2, 1, 0.0),
        (4, 2, 8, 2, 0.8),
    ] {
        let (hd, kvd) = (h * d, kv * d);
        let (q, k, v) = (
            rng.vec(total * hd),
            rng.vec(total * kvd),
            rng.vec(total * kvd),
        );
        let full_spec = capped(spec(h, kv, d, w, total), cap);
        let want = host_gqa(&wide(&q), &wide(&k), &wide(&v), &full_spec);
        for &p in WORLD_SIZES {
            for (transport, m) in meshes(p) {
                let what = format!("P={p} {transport} heads {h} kv {kv} d {d} window {w}");
                let place_q = |x: &[f32], n: usize| {
                    DTensor::from_host_in_units(&m, &[n, hd], x, Placement::Shard(1), d).unwrap()
                };
                let rep = |x: &[f32], n: usize| {
                    DTensor::from_host(&m, &[n, kvd], x, Placement::Replicate).unwrap()
                };
                let full = place_q(&q, total)
                    .gqa_attention(&rep(&k, total), &rep(&v, total), &full_spec)
                    .unwrap()
                    .to_host()
                    .unwrap();
                let (mut cache, mut past) = (None::<DTensor>, 0);
                for n in steps {
                    let rows = past * hd..(past + n) * hd;
                    let kv_rows = past * kvd..(past + n) * kvd;
                    let sq = place_q(&q[rows.clone()], n).requires_grad();
                    let (out, grown) = sq
                        .gqa_decode(
                            &rep(&k[kv_rows.clone()], n),
                            &rep(&v[kv_rows], n),
                            cache.as_ref(),
                            &capped(spec(h, kv, d, w, n), cap),
                        )
                        .unwrap();
                    let at = format!("{what}: positions {past}..{}", past + n);
                    assert!(!out.is_tracked(), "{at}: decoding is not differentiable");
                    assert_eq!(
                        (out.placement(), out.shard_unit()),
                        (Placement::Shard(1), d),
                        "{at}"
                    );
                    assert_eq!(grown.shape(), [past + n, 2, 1, kv, d], "{at}");
                    assert_eq!(grown.placement(), Placement::Replicate, "{at}");
                    let got = out.to_host().unwrap();
                    assert_close(&at, &got, &want[rows.clone()], 1e-5);
                    let e = rel_err(&got, &wide(&full[rows]));
                    assert!(e <= 1e-6, "{at}: differs from the full op by {e:.3e}");
                    (cache, past) = (Some(grown), past + n);
                }
            }
        }
    }
}

#[test]
fn gqa_ops_refuse_bad_operands() {
    let m = crate::util::mesh(2);
    let (h, kv, d, rows) = (4, 2, 3, 6);
    let q = DTensor::from_host_in_units(
        &m,
        &[rows, h * d],
        &vec![0.5; rows * h * d],
        Placement::Shard(1),
        d,
    )
    .unwrap();
    let rep = |cols: usize| {
        DTensor::from_host(
            &m,
            &[rows, cols],
            &vec![0.25; rows * cols],
            Placement::Replicate,
        )
        .unwrap()
    };
    let (k, v) = (rep(kv * d), rep(kv * d));
    let ok = spec(h, kv, d, 0, SEQ);
    assert!(q.gqa_attention(&k, &v, &ok).is_ok());
    let bad_specs = [
        (spec(h, 3, d, 0, SEQ), "kv_heads 3 not dividing 4 heads"),
        (spec(h, 0, d, 0, SEQ), "kv_heads 0"),
        (spec(0, kv, d, 0, SEQ), "heads 0"),
        (spec(h, kv, 0, 0, SEQ), "head_dim 0"),
        (
            spec(h + 2, kv, d, 0, SEQ),
            "heads disagreeing with q's width",
        ),
        (spec(h, kv, d, 0, 4), "6 tokens in sequences of 4"),
        (spec(h, kv, d, 0, 0), "sequences of 0"),
    ];
    for (s, what) in bad_specs {
        assert!(q.gqa_attention(&k, &v, &s).is_err(), "{what}");
    }
    // k, v of the wrong width or token count, or not Replicate.
    assert!(
        q.gqa_attention(&rep(3 * d), &v, &ok).is_err(),
        "k of 3 kv heads"
    );
    assert!(
        q.gqa_attention(&k, &rep(kv * d + 1), &ok).is_err(),
        "v one column wide"
    );
    let k_short = DTensor::from_host(&m, &[3, kv * d], &[0.25; 18], Placement::Replicate).unwrap();
    assert!(
        q.gqa_attention(&k_short, &v, &ok).is_err(),
        "k of 3 tokens, q of 6"
    );
    let k_split = DTensor::from_host(
        &m,
        &[rows, kv * d],
        &vec![0.25; rows * kv * d],
        Placement::Shard(0),
    )
    .unwrap();
    assert!(q.gqa_attention(&k_split, &v, &ok).is_err(), "k Shard(0)");
    let k_sum = DTensor::from_host(
        &m,
        &[rows, kv * d],
        &vec![0.25; rows * kv * d],
        Placement::Partial(ReduceOp::Sum),
    )
    .unwrap();
    assert!(q.gqa_attention(&k, &k_sum, &ok).is_err(), "v Partial(Sum)");
    // q not split in whole heads.
    let q_units_1 = DTensor::from_host(
        &m,
        &[rows, h * d],
        &vec![0.5; rows * h * d],
        Placement::Shard(1),
    )
    .unwrap();
    assert!(
        q_units_1.gqa_attention(&k, &v, &ok).is_err(),
        "q in units of 1"
    );
    let q_rep = DTensor::from_host(
        &m,
        &[rows, h * d],
        &vec![0.5; rows * h * d],
        Placement::Replicate,
    )
    .unwrap();
    assert!(
        q_rep.gqa_attention(&k, &v, &ok).is_err(),
        "q Replicate at P = 2"
    );
    let bad_drop = GqaSpec {
        dropout: Some(wgpu_tp::tensor::AttentionDropout {
            p: 1.0,
            key: wgpu_tp::kernels::PhiloxKey {
                seed: 1,
                step: 0,
                layer: 0,
            },
        }),
        ..ok
    };
    assert!(q.gqa_attention(&k, &v, &bad_drop).is_err(), "dropout 1");
    // Windows of any size are fine.
    for w in [1, 2, SEQ, SEQ + 5] {
        let r = q.gqa_attention(&k, &v, &spec(h, kv, d, w, SEQ));
        assert!(r.is_ok(), "window {w}: {r:?}");
    }
    // Decode: a cache of other kv heads or head_dim, or of batch 2.
    let (_, cache) = q.gqa_decode(&k, &v, None, &ok).unwrap();
    assert!(q.gqa_decode(&k, &v, Some(&cache), &ok).is_ok());
    let wrong = [
        [rows, 2, 1, kv + 1, d],
        [rows, 2, 1, kv, d + 1],
        [rows, 2, 2, kv, d],
    ];
    for shape in wrong {
        let n = shape.iter().product();
        let c = DTensor::from_host(&m, &shape, &vec![0.0; n], Placement::Replicate).unwrap();
        assert!(
            q.gqa_decode(&k, &v, Some(&c), &ok).is_err(),
            "cache {shape:?}"
        );
    }
    assert!(
        q.gqa_decode(&k, &v, None, &spec(h, 3, d, 0, SEQ)).is_err(),
        "decode with kv_heads 3 of 4 heads"
    );
    assert!(
        q.gqa_attention(&k, &v, &ok).is_ok(),
        "usable after the errors"
    );
}

/// Dropout on the probabilities is keyed on the global query head, so the
/// output and every gradient are those of one rank at every world size.
#[test]
fn gqa_dropout_is_the_same_on_every_world_size() {
    let mut rng = Rng::fresh("gqa_dropout");
    let (h, kv, d, w) = (6, 2, 3, 2);
    let rows = BATCH * SEQ;
    let (hd, kvd) = (h * d, kv * d);
    let (q, k, v, dy) = (
        rng.vec(rows * hd),
        rng.vec(rows * kvd),
        rng.vec(rows * kvd),
        rng.vec(rows * hd),
    );
    let s = GqaSpec {
        dropout: Some(wgpu_tp::tensor::AttentionDropout {
            p: 0.25,
            key: wgpu_tp::kernels::PhiloxKey {
                seed: 11,
                step: 2,
                layer: 1,
            },
        }),
        ..spec(h, kv, d, w, SEQ)
    };
    let run = |m: &wgpu_tp::Mesh| -> [Vec<f32>; 4] {
        let xq = DTensor::from_host_in_units(m, &[rows, hd], &q, Placement::Shard(1), d)
            .unwrap()
            .requires_grad();
        let rep = |x: &[f32]| {
            DTensor::from_host(m, &[rows, kvd], x, Placement::Replicate)
                .unwrap()
                .requires_grad()
        };
        let (xk, xv) = (rep(&k), rep(&v));
        let y = xq.gqa_attention(&xk, &xv, &s).unwrap();
        let dyd = DTensor::from_host_in_units(m, &[rows, hd], &dy, Placement::Shard(1), d).unwrap();
        y.backward_with(&dyd).unwrap();
        [
            y.to_host().unwrap(),
            xq.grad().unwrap().to_host().unwrap(),
            xk.grad().unwrap().to_host().unwrap(),
            xv.grad().unwrap().to_host().unwrap(),
        ]
    };
    let serial = run(&crate::util::mesh(1));
    let plain = spec(h, kv, d, w, SEQ);
    let undropped = host_gqa(&wide(&q), &wide(&k), &wide(&v), &plain);
    assert!(
        rel_err(&serial[0], &undropped) > 1e-3,
        "dropout 0.25 changed nothing"
    );
    for &p in &WORLD_SIZES[1..] {
        for (transport, m) in meshes(p) {
            let got = run(&m);
            for (name, (g, s)) in ["y", "dq", "dk", "dv"].iter().zip(got.iter().zip(&serial)) {
                let e = rel_err(g, &wide(s));
                assert!(
                    e <= 1e-6,
                    "P={p} {transport}: {name} differs from P=1 by {e:.3e}"
                );
            }
        }
    }
}
