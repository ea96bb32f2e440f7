//! `DTensor::vocab_parallel_cross_entropy` and its VJP: the tape's logits
//! gradient for a random loss gradient against central finite differences
//! of an f64 softmax cross-entropy, for every reduction, with label
//! smoothing, an ignored row and a padded vocab, with vocab 13 split
//! raggedly over 1 to 4 ranks; the loss against f64; three all-reduces
//! forward (four with smoothing), none backward.

use super::fd::{assert_fd, central_differences, dot};
use crate::util::reference::widen;
use crate::util::{Rng, assert_close, count_lock, counting_mesh};
use wgpu_tp::nn::{CrossEntropyConfig, Reduction};
use wgpu_tp::{Collective, DTensor, Placement};

const TOL: f64 = 1e-5;

/// Per-row loss in f64 over the first `k` of `v` columns: `(1 − α)·(lse −
/// z_t) + α·(lse − mean z)`, 0 on ignored rows.
fn rows_loss(
    z: &[f64],
    (v, k): (usize, usize),
    targets: &[i32],
    c: &CrossEntropyConfig,
) -> Vec<f64> {
    let alpha = c.label_smoothing as f64;
    targets
        .iter()
        .enumerate()
        .map(|(r, &t)| {
            if c.ignore_index == Some(t) {
                return 0.0;
            }
            let row = &z[r * v..r * v + k];
            let m = row.iter().copied().fold(f64::MIN, f64::max);
            let lse = row.iter().map(|x| (x - m).exp()).sum::<f64>().ln() + m;
            let mean = row.iter().sum::<f64>() / k as f64;
            (1.0 - alpha) * (lse - row[t as usize]) + alpha * (lse - mean)
        })
        .collect()
}

/// The loss as the reduction gives it.
fn reduced(loss: Vec<f64>, targets: &[i32], c: &CrossEntropyConfig) -> Vec<f64> {
    let counted = targets
        .iter()
        .filter(|&&t| Some(t) != c.ignore_index)
        .count();
    match c.reduction {
        Reduction::None => loss,
        Reduction::Sum => vec![loss.iter().sum()],
        Reduction::Mean => vec![loss.iter().sum::<f64>() / counted.max(1) as f64],
    }
}

#[test]
fn cross_entropy_vjp_matches_finite_differences_p1_2_3_4() {
    let _counting = count_lock();
    let mut rng = Rng::fresh("cross_entropy_fd");
    let (rows, vocab) = (5, 13);
    let z: Vec<f32> = rng.vec(rows * vocab).iter().map(|v| 3.0 * v).collect();
    let mut targets: Vec<i32> = (0..rows).map(|_| rng.below(11) as i32).collect();
    targets[1] = -100;
    let configs = [
        (Reduction::Mean, 0.0, None, None),
        (Reduction::Sum, 0.1, Some(-100), None),
        (Reduction::None, 0.2, Some(-100), None),
        (Reduction::Mean, 0.1, Some(-100), Some(11)),
    ];
    for (reduction, alpha, ignore_index, valid_vocab) in configs {
        let c = CrossEntropyConfig {
            ignore_index,
            reduction,
            label_smoothing: alpha,
            valid_vocab,
        };
        let mut t = targets.clone();
        if ignore_index.is_none() {
            t[1] = 4;
        }
        let k = valid_vocab.unwrap_or(vocab);
        let want = reduced(rows_loss(&widen(&z), (vocab, k), &t, &c), &t, &c);
        let dloss = rng.vec(want.len());
        let fd = central_differences(&widen(&z), 1e-3, |z| {
            dot(
                &widen(&dloss),
                &reduced(rows_loss(z, (vocab, k), &t, &c), &t, &c),
            )
        });
        for p in [1, 2, 3, 4] {
            let what = format!("P={p} {c:?}");
            let m = counting_mesh(p);
            let logits = DTensor::from_host(&m, &[rows, vocab], &z, Placement::Shard(1))
                .unwrap()
                .requires_grad();
            m.reset_comm_stats();
            let loss = logits.vocab_parallel_cross_entropy(&t, &c).unwrap();
            if p > 1 {
                let calls = if alpha > 0.0 { 4 } else { 3 };
                assert_eq!(m.comm_calls(Collective::AllReduce), calls, "{what}");
                assert_eq!(m.comm_stats().len(), 1, "{what}: all-reduces only");
            }
            assert_eq!(loss.placement(), Placement::Replicate, "{what}");
            assert_close(&what, &loss.to_host().unwrap(), &want, TOL);
            let n = want.len();
            let d = DTensor::from_host(&m, &[n], &dloss, Placement::Replicate).unwrap();
            m.reset_comm_stats();
            loss.backward_with(&d).unwrap();
            assert!(
                m.comm_stats().is_empty(),
                "{what}: backward communicates nothing"
            );
            let g = logits.grad().unwrap();
            assert_eq!(g.placement(), Placement::Shard(1), "{what}");
            assert_fd(&what, &g.to_host().unwrap(), &fd);
        }
    }
}

#[test]
fn bad_inputs_are_errors() {
    let m = counting_mesh(2);
    let logits = DTensor::from_host(&m, &[2, 5], &[0.0; 10], Placement::Shard(1)).unwrap();
    let c = CrossEntropyConfig::default();
    assert!(
        logits.vocab_parallel_cross_entropy(&[0, 5], &c).is_err(),
        "target ≥ vocab"
    );
    assert!(
        logits.vocab_parallel_cross_entropy(&[0], &c).is_err(),
        "one target short"
    );
    let padded = CrossEntropyConfig {
        valid_vocab: Some(4),
        ..Default::default()
    };
    assert!(
        logits
            .vocab_parallel_cross_entropy(&[0, 4], &padded)
            .is_err(),
        "padding target"
    );
    let zero = CrossEntropyConfig {
        valid_vocab: Some(0),
        ..Default::default()
    };
    assert!(logits.vocab_parallel_cross_entropy(&[0, 0], &zero).is_err());
    let smooth = CrossEntropyConfig {
        label_smoothing: -0.1,
        ..Default::default()
    };
    assert!(
        logits
            .vocab_parallel_cross_entropy(&[0, 0], &smooth)
            .is_err()
    );
    let rep = DTensor::from_host(&m, &[2, 5], &[0.0; 10], Placement::Replicate).unwrap();
    assert!(
        rep.vocab_parallel_cross_entropy(&[0, 0], &c).is_err(),
        "not Shard(1)"
    );
    let loss = logits.vocab_parallel_cross_entropy(&[0, 4], &c).unwrap();
    assert_close("uniform", &loss.to_host().unwrap(), &[5f64.ln()], 1e-6);
}
