//! Whole models: a two-layer Megatron MLP and `MlpLanguageModel` train for
//! several steps on P ranks with the losses and final master weights of the
//! serial run (and of an f64 reference for the MLP); the language model's
//! step-0 loss equals f64 and its per-step communication is exactly
//! docs/MATH.md's ("MlpLanguageModel"); a training step reaches a steady
//! state with no new pipelines or buffers.

use super::TOL;
use crate::util::reference::{embedding_lookup, gelu, gelu_grad, gemm, linear, sum_rows, widen};
use crate::util::{
    Rng, WORLD_SIZES, assert_close, assert_only, count_lock, counting_mesh, masters, mesh,
    mesh_env, token_batch,
};
use wgpu_tp::kernels::Activation;
use wgpu_tp::nn::{
    AdamW, ColumnParallelConfig, ColumnParallelLinear, MlpLanguageModel, MlpLmConfig, Params,
    RowParallelConfig, RowParallelLinear, Sgd,
};
use wgpu_tp::{Collective, DTensor, Mesh, Placement};

/// The two-layer MLP `y = gelu(x W1ᵀ + b1) W2ᵀ + b2` with loss `½‖y − t‖²`,
/// trained with plain SGD in f64. Returns the loss of each step and the final
/// `(W1, b1, W2, b2)`.
#[allow(clippy::too_many_arguments)]
fn mlp_sgd_reference(
    x: &[f32],
    tgt: &[f32],
    w1: &[f32],
    w2: &[f32],
    (t, d, h): (usize, usize, usize),
    lr: f64,
    steps: usize,
) -> (Vec<f64>, [Vec<f64>; 4]) {
    let x = widen(x);
    let (mut w1, mut w2) = (widen(w1), widen(w2));
    let (mut b1, mut b2) = (vec![0.0; h], vec![0.0; d]);
    let mut losses = Vec::new();
    for _ in 0..steps {
        let pre = linear(&x, &w1, Some(&b1), t, d, h);
        let act: Vec<f64> = pre.iter().map(|&v| gelu(v)).collect();
        let y = linear(&act, &w2, Some(&b2), t, h, d);
        let dy: Vec<f64> = y.iter().zip(tgt).map(|(y, t)| y - *t as f64).collect();
        losses.push(0.5 * dy.iter().map(|v| v * v).sum::<f64>());
        let dw2 = gemm(&dy, &act, d, h, t, true, false);
        let db2 = sum_rows(&dy, t, d);
        let dact = gemm(&dy, &w2, t, h, d, false, false);
        let dpre: Vec<f64> = dact
            .iter()
            .zip(&pre)
            .map(|(g, p)| g * gelu_grad(*p))
            .collect();
        let dw1 = gemm(&dpre, &x, h, d, t, true, false);
        let db1 = sum_rows(&dpre, t, h);
        for (w, g) in [
            (&mut w1, &dw1),
            (&mut b1, &db1),
            (&mut w2, &dw2),
            (&mut b2, &db2),
        ] {
            for (w, g) in w.iter_mut().zip(g) {
                *w -= lr * g;
            }
        }
    }
    (losses, [w1, b1, w2, b2])
}

/// Mean cross-entropy of `MlpLanguageModel` in f64 from its master weights.
fn lm_loss_reference(
    named: &[(String, Vec<f32>)],
    cfg: MlpLmConfig,
    ids: &[i32],
    targets: &[i32],
) -> f64 {
    let get = |n: &str| {
        &named
            .iter()
            .find(|(name, _)| name == n)
            .unwrap_or_else(|| panic!("parameter {n}"))
            .1
    };
    let (v, hd, f, t) = (cfg.vocab, cfg.hidden, cfg.ffn, ids.len());
    let emb = get("embed.weight");
    let x = embedding_lookup(emb, v, hd, ids, 0);
    let pre = linear(&x, get("fc1.weight"), Some(get("fc1.bias")), t, hd, f);
    let act: Vec<f64> = pre.iter().map(|&p| gelu(p)).collect();
    let h2 = linear(&act, get("fc2.weight"), Some(get("fc2.bias")), t, f, hd);
    let logits = gemm(&h2, get("head.weight"), t, v, hd, false, true);
    let mut total = 0.0;
    for (i, &tg) in targets.iter().enumerate() {
        let row = &logits[i * v..(i + 1) * v];
        let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let lse = m + row.iter().map(|z| (z - m).exp()).sum::<f64>().ln();
        total += lse - row[tg as usize];
    }
    total / t as f64
}

/// Column(no gather) → GELU → Row(input_is_parallel), named like a model.
#[derive(Params)]
struct Mlp {
    fc1: ColumnParallelLinear,
    fc2: RowParallelLinear,
    #[params(skip)]
    out: Option<DTensor>,
}

impl Mlp {
    fn forward(&mut self, x: &DTensor) -> DTensor {
        let pre = self.fc1.forward(x).unwrap();
        let act = pre.activation(Activation::Gelu).unwrap();
        let out = self.fc2.forward(&act).unwrap();
        self.out = Some(out.clone());
        out
    }

    /// The layers' backward is the tape's: from the saved output.
    fn backward(&mut self, dy: &DTensor) {
        self.out.take().unwrap().backward_with(dy).unwrap();
    }
}

#[test]
fn two_layer_mlp_trains_like_serial_and_f64_p1_3_4() {
    let (t, d, h) = (9, 12, 20);
    let (steps, lr) = (4, 0.05);
    let mut rng = Rng::fresh("mlp_train");
    let x = rng.vec(t * d);
    let tgt = rng.vec(t * d);
    let w1: Vec<f32> = rng.vec(h * d).iter().map(|v| v * 0.4).collect();
    let w2: Vec<f32> = rng.vec(d * h).iter().map(|v| v * 0.4).collect();
    let (ref_losses, ref_params) = mlp_sgd_reference(&x, &tgt, &w1, &w2, (t, d, h), lr, steps);
    let mut serial: Option<(Vec<f32>, Vec<Vec<f32>>)> = None;
    for &p in &[1, 4, 3] {
        let m = mesh(p);
        let mut mlp = Mlp {
            fc1: ColumnParallelLinear::from_master(
                &m,
                ColumnParallelConfig::new(d, h),
                &w1,
                Some(&vec![0.0; h]),
            )
            .unwrap(),
            fc2: RowParallelLinear::from_master(
                &m,
                RowParallelConfig::new(h, d),
                &w2,
                Some(&vec![0.0; d]),
            )
            .unwrap(),
            out: None,
        };
        let mut opt = Sgd::new(lr as f32);
        let xd = DTensor::from_host(&m, &[t, d], &x, Placement::Replicate).unwrap();
        let mut losses = Vec::new();
        for _ in 0..steps {
            let y = mlp.forward(&xd).to_host().unwrap();
            let dy: Vec<f32> = y.iter().zip(&tgt).map(|(y, t)| y - t).collect();
            losses.push(0.5 * dy.iter().map(|v| v * v).sum::<f32>());
            let dyd = DTensor::from_host(&m, &[t, d], &dy, Placement::Replicate).unwrap();
            mlp.backward(&dyd);
            opt.step(&mut mlp).unwrap();
            mlp.zero_grad();
        }
        assert!(
            losses[steps - 1] < losses[0],
            "P={p}: the loss did not fall: {losses:?}"
        );
        assert_close(&format!("MLP losses, P={p}"), &losses, &ref_losses, TOL);
        let params: Vec<Vec<f32>> = mlp
            .named_parameters()
            .iter()
            .map(|(_, p)| p.master().unwrap())
            .collect();
        for (i, name) in ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
            .iter()
            .enumerate()
        {
            assert_close(
                &format!("MLP {name} after {steps} steps, P={p} vs f64"),
                &params[i],
                &ref_params[i],
                TOL,
            );
        }
        match &serial {
            None => serial = Some((losses, params)),
            Some((sl, sp)) => {
                assert_close(
                    &format!("MLP losses, P={p} vs P=1"),
                    &losses,
                    &widen(sl),
                    TOL,
                );
                for (i, (a, b)) in params.iter().zip(sp).enumerate() {
                    assert_close(
                        &format!("MLP parameter {i}, P={p} vs P=1"),
                        a,
                        &widen(b),
                        TOL,
                    );
                }
            }
        }
    }
}

/// Train `steps` SGD-with-momentum steps; the losses and final master weights.
fn train_lm(
    m: &Mesh,
    cfg: MlpLmConfig,
    seed: u64,
    batches: &[(Vec<i32>, Vec<i32>)],
) -> (Vec<f32>, Vec<(String, Vec<f32>)>) {
    let mut model = MlpLanguageModel::new(m, cfg, seed).unwrap();
    let mut opt = Sgd::new(0.5).with_momentum(0.9).with_weight_decay(0.01);
    let mut losses = Vec::new();
    for (ids, targets) in batches {
        let loss = model.loss(ids, targets).unwrap();
        loss.backward().unwrap();
        opt.step(&mut model).unwrap();
        model.zero_grad();
        losses.push(loss.to_host().unwrap()[0]);
    }
    (losses, masters(&model))
}

#[test]
fn language_model_trains_like_serial_p1_2_3_4_8() {
    let mut rng = Rng::fresh("lm_train");
    let seed = rng.next_u64();
    // vocab 50 is ragged over 3, 4 and 8; 13·3 over 2; vocab 5 leaves ranks 5..8 empty at P = 8.
    let cases: &[(usize, usize, &[usize])] =
        &[(50, 9, WORLD_SIZES), (13 * 3, 7, &[2]), (5, 6, &[8])];
    for &(vocab, t, sizes) in cases {
        let cfg = MlpLmConfig {
            vocab,
            hidden: 12,
            ffn: 20,
        };
        let batches: Vec<_> = (0..3).map(|_| token_batch(&mut rng, vocab, t)).collect();
        let serial_mesh = mesh(1);
        // f64 reference of the step-0 loss from the initial master weights.
        let init = masters(&MlpLanguageModel::new(&serial_mesh, cfg, seed).unwrap());
        let want0 = lm_loss_reference(&init, cfg, &batches[0].0, &batches[0].1);
        let (serial_losses, serial_weights) = train_lm(&serial_mesh, cfg, seed, &batches);
        assert_close(
            &format!("vocab {vocab}: step-0 loss vs f64"),
            &serial_losses[..1],
            &[want0],
            TOL,
        );
        for &p in sizes.iter().filter(|&&p| p > 1) {
            let (losses, weights) = train_lm(&mesh(p), cfg, seed, &batches);
            let what = format!("vocab {vocab}, P={p}");
            assert_close(
                &format!("{what}: losses vs P=1"),
                &losses,
                &widen(&serial_losses),
                TOL,
            );
            for ((n, w), (sn, sw)) in weights.iter().zip(&serial_weights) {
                assert_eq!(n, sn);
                assert_close(&format!("{what}: {n} after 3 steps"), w, &widen(sw), TOL);
            }
        }
    }
}

/// docs/MATH.md ("MlpLanguageModel"): embedding 1 + row 1 + loss 3
/// all-reduces forward; the two column layers' input gradients backward; the
/// optimiser step communicates nothing.
#[test]
fn language_model_communication_per_step_is_exact_p4() {
    let _counting = count_lock();
    let (p, t) = (4, 9);
    let cfg = MlpLmConfig {
        vocab: 50,
        hidden: 12,
        ffn: 20,
    };
    let m = counting_mesh(p);
    let mut rng = Rng::fresh("lm_comm");
    let mut model = MlpLanguageModel::new(&m, cfg, 3).unwrap();
    let mut opt = Sgd::new(0.1).with_momentum(0.9);
    let f32s = |n: usize| (p * n * 4) as u64;
    for _ in 0..2 {
        let (ids, targets) = token_batch(&mut rng, cfg.vocab, t);
        m.reset_comm_stats();
        let loss = model.loss(&ids, &targets).unwrap();
        let fwd = m.comm_stats();
        m.reset_comm_stats();
        loss.backward().unwrap();
        let bwd = m.comm_stats();
        m.reset_comm_stats();
        opt.step(&mut model).unwrap();
        model.zero_grad();
        let _ = loss.to_host().unwrap();
        assert!(m.comm_stats().is_empty(), "optimiser/readback communicated");
        assert_only(&fwd, Collective::AllReduce, 5, "forward all-reduces");
        // [t, hidden] twice (embedding, row) and three [t] row statistics.
        let bytes = 2 * f32s(t * cfg.hidden) + 3 * f32s(t);
        assert_eq!(fwd[&Collective::AllReduce].bytes, bytes, "forward bytes");
        assert_only(&bwd, Collective::AllReduce, 2, "backward all-reduces");
        let bytes = 2 * f32s(t * cfg.hidden);
        assert_eq!(bwd[&Collective::AllReduce].bytes, bytes, "backward bytes");
    }
}

/// Issue 4: after one warm-up step, a training step builds no pipeline and
/// creates no buffer (the pools hold everything a step needs), with either
/// optimiser (their state appears during the warm-up step).
#[test]
fn training_steps_reach_a_steady_state_p2() {
    mesh_env();
    let m = Mesh::simulated(2).unwrap();
    let cfg = MlpLmConfig {
        vocab: 50,
        hidden: 12,
        ffn: 20,
    };
    let mut rng = Rng::fresh("steady_state");
    let counters = |m: &Mesh| {
        m.devices().iter().fold((0, 0), |(p, b), g| {
            (p + g.pipelines_built(), b + g.buffers_allocated())
        })
    };
    for adamw in [false, true] {
        // Start from empty pools so the first run's buffers do not hide anything.
        m.synchronize().unwrap();
        m.devices().iter().for_each(|g| g.trim_pool());
        let mut model = MlpLanguageModel::new(&m, cfg, 5).unwrap();
        let mut sgd = Sgd::new(0.1).with_momentum(0.9);
        let mut adam = AdamW::new(0.01);
        let mut step = |rng: &mut Rng| {
            let (ids, targets) = token_batch(rng, cfg.vocab, 9);
            let loss = model.loss(&ids, &targets).unwrap();
            loss.backward().unwrap();
            if adamw {
                adam.step(&mut model).unwrap();
            } else {
                sgd.step(&mut model).unwrap();
            }
            model.zero_grad();
            loss.to_host().unwrap()[0]
        };
        step(&mut rng);
        let before = counters(&m);
        for _ in 0..2 {
            step(&mut rng);
        }
        let after = counters(&m);
        let what = if adamw { "AdamW" } else { "SGD with momentum" };
        assert_eq!(
            after.0, before.0,
            "{what}: pipelines built during steady-state steps"
        );
        assert_eq!(
            after.1, before.1,
            "{what}: buffers allocated during steady-state steps"
        );
    }
}
