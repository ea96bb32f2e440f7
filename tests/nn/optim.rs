//! Optimisers: SGD (momentum, weight decay) and AdamW (decoupled decay, bias
//! correction) on sharded and replicated parameters against the f64 rules in
//! `util::reference`; replicated parameters over one shared buffer update once
//! (and the raw SGD kernel refuses such a buffer); parameters without a
//! gradient are skipped; one optimiser steps any set of modules (state is
//! kept per parameter, not per name); state that no longer fits its
//! parameter is an error that changes nothing.

use super::TOL;
use crate::util::reference::{self, widen};
use crate::util::{Rng, assert_close, mesh, shared_mesh};
use wgpu_tp::kernels::optim::{SgdStep, sgd_step};
use wgpu_tp::nn::{AdamW, Parameter, Params, Sgd};
use wgpu_tp::{DTensor, Mesh, Placement};

/// Two parameters: a ragged `[7, 5]` one sharded on rows and a replicated `[5]` one.
#[derive(Params)]
struct Pair {
    w: Parameter,
    b: Parameter,
}

const W_SHAPE: [usize; 2] = [7, 5];
const B_SHAPE: [usize; 1] = [5];

impl Pair {
    fn new(m: &Mesh, w: &[f32], b: &[f32]) -> Pair {
        Pair {
            w: Parameter::from_master(m, &W_SHAPE, w, Placement::Shard(0), 1).unwrap(),
            b: Parameter::from_master(m, &B_SHAPE, b, Placement::Replicate, 1).unwrap(),
        }
    }

    /// Accumulate host gradients (as a backward pass would).
    fn backward(&mut self, gw: &[f32], gb: &[f32]) {
        let m = self.w.value.mesh().clone();
        self.w
            .accumulate_grad(DTensor::from_host(&m, &W_SHAPE, gw, Placement::Shard(0)).unwrap())
            .unwrap();
        self.b
            .accumulate_grad(DTensor::from_host(&m, &B_SHAPE, gb, Placement::Replicate).unwrap())
            .unwrap();
    }
}

#[test]
fn sgd_with_momentum_and_weight_decay_matches_f64_p1_3_4() {
    let mut rng = Rng::fresh("sgd_ref");
    let (lr, mu, wd) = (0.1, 0.9, 0.05);
    let w0 = rng.vec(35);
    let b0 = rng.vec(5);
    let grads: Vec<(Vec<f32>, Vec<f32>)> = (0..3).map(|_| (rng.vec(35), rng.vec(5))).collect();
    for &(mu, wd) in &[(mu, wd), (0.0, wd), (mu, 0.0)] {
        for &p in &[1, 3, 4] {
            let m = mesh(p);
            let mut model = Pair::new(&m, &w0, &b0);
            let mut opt = Sgd::new(lr as f32)
                .with_momentum(mu as f32)
                .with_weight_decay(wd as f32);
            let (mut rw, mut rb) = (widen(&w0), widen(&b0));
            let (mut bw, mut bb) = (Vec::new(), Vec::new());
            for (step, (gw, gb)) in grads.iter().enumerate() {
                model.backward(gw, gb);
                opt.step(&mut model).unwrap();
                model.zero_grad();
                reference::sgd(&mut rw, &mut bw, gw, lr, mu, wd);
                reference::sgd(&mut rb, &mut bb, gb, lr, mu, wd);
                let what = format!("SGD μ={mu} wd={wd} P={p} step {step}");
                assert_close(&format!("{what} w"), &model.w.master().unwrap(), &rw, TOL);
                assert_close(&format!("{what} b"), &model.b.master().unwrap(), &rb, TOL);
            }
        }
    }
}

#[test]
fn adamw_matches_f64_p1_3_4() {
    let mut rng = Rng::fresh("adamw_ref");
    let lr = 0.01;
    let w0 = rng.vec(35);
    let b0 = rng.vec(5);
    let grads: Vec<(Vec<f32>, Vec<f32>)> = (0..3).map(|_| (rng.vec(35), rng.vec(5))).collect();
    for &wd in &[0.1f32, 0.0] {
        for &p in &[1, 3, 4] {
            let m = mesh(p);
            let mut model = Pair::new(&m, &w0, &b0);
            let mut opt = AdamW::new(lr as f32).with_weight_decay(wd);
            let hp = (
                opt.beta1 as f64,
                opt.beta2 as f64,
                opt.eps as f64,
                wd as f64,
            );
            let (mut rw, mut rb) = (widen(&w0), widen(&b0));
            let (mut mw, mut vw) = (vec![0.0; 35], vec![0.0; 35]);
            let (mut mb, mut vb) = (vec![0.0; 5], vec![0.0; 5]);
            for (step, (gw, gb)) in grads.iter().enumerate() {
                model.backward(gw, gb);
                opt.step(&mut model).unwrap();
                model.zero_grad();
                let t = step as i32 + 1;
                reference::adamw(&mut rw, &mut mw, &mut vw, gw, t, lr, hp);
                reference::adamw(&mut rb, &mut mb, &mut vb, gb, t, lr, hp);
                let what = format!("AdamW wd={wd} P={p} step {t}");
                assert_close(&format!("{what} w"), &model.w.master().unwrap(), &rw, TOL);
                assert_close(&format!("{what} b"), &model.b.master().unwrap(), &rb, TOL);
            }
        }
    }
}

/// Every rank's shard of a replicated parameter, read back separately.
fn replicas(p: &Parameter) -> Vec<Vec<f32>> {
    p.value
        .shards()
        .iter()
        .map(|s| s.to_vec().unwrap())
        .collect()
}

#[test]
fn replicated_parameters_over_one_shared_buffer_update_once_p2_3_4_8() {
    // On a shared-device mesh an all-gather hands every rank the same buffer;
    // a parameter built from it must still see each optimiser step once.
    let mut rng = Rng::fresh("shared_replicated_param");
    let (w0, b0) = (rng.vec(35), rng.vec(5));
    let grads: Vec<(Vec<f32>, Vec<f32>)> = (0..2).map(|_| (rng.vec(35), rng.vec(5))).collect();
    for &p in &[2, 3, 4, 8] {
        let m = shared_mesh(p);
        for adam in [false, true] {
            let mut model = Pair::new(&m, &w0, &b0);
            model.b.value = DTensor::from_host(&m, &B_SHAPE, &b0, Placement::Shard(0))
                .unwrap()
                .redistribute(Placement::Replicate)
                .unwrap();
            assert!(
                model
                    .b
                    .value
                    .shards()
                    .iter()
                    .all(|s| s.is_shared_across_ranks()),
                "P={p}: an all-gather on a shared device should hand out one buffer"
            );
            let before = model.b.value.shards()[0].clone();
            let (mut sgd, mut adamw) = (Sgd::new(0.1).with_momentum(0.9), AdamW::new(0.01));
            let hp = (
                adamw.beta1 as f64,
                adamw.beta2 as f64,
                adamw.eps as f64,
                0.01,
            );
            let (mut rb, mut buf, mut mb, mut vb) =
                (widen(&b0), vec![], vec![0.0; 5], vec![0.0; 5]);
            for (step, (gw, gb)) in grads.iter().enumerate() {
                model.backward(gw, gb);
                if adam {
                    adamw.step(&mut model).unwrap();
                    reference::adamw(&mut rb, &mut mb, &mut vb, gb, step as i32 + 1, 0.01, hp);
                } else {
                    sgd.step(&mut model).unwrap();
                    reference::sgd(&mut rb, &mut buf, gb, 0.1, 0.9, 0.0);
                }
                model.zero_grad();
                for (r, v) in replicas(&model.b).iter().enumerate() {
                    let what = format!("adam={adam} P={p} step {step} rank {r}");
                    assert_close(&what, v, &rb, TOL);
                }
            }
            assert!(
                model
                    .b
                    .value
                    .shards()
                    .iter()
                    .all(|s| !s.is_shared_across_ranks())
            );
            // The all-gather's own result is untouched.
            assert_eq!(before.to_vec().unwrap(), b0, "adam={adam} P={p}");
        }
        // The raw kernel refuses a shared buffer instead of updating every rank.
        let shared = DTensor::from_host(&m, &B_SHAPE, &b0, Placement::Shard(0))
            .unwrap()
            .redistribute(Placement::Replicate)
            .unwrap();
        let w = &shared.shards()[1];
        let g = w.rank().upload(&B_SHAPE, &grads[0].1).unwrap();
        let spare = w.rank().zeros(&[1], wgpu_tp::DType::F32).unwrap();
        let step = SgdStep {
            lr: 0.1,
            momentum: 0.0,
            weight_decay: 0.0,
            first_step: true,
        };
        let err = sgd_step(w, &g, None, [&spare, &spare], step).unwrap_err();
        assert!(err.to_string().contains("deep_copy"), "{err}");
        assert_eq!(
            w.to_vec().unwrap(),
            b0,
            "P={p}: refused update must not write"
        );
        let own = w.deep_copy().unwrap();
        assert!(!own.is_shared_across_ranks());
        sgd_step(&own, &g, None, [&spare, &spare], step).unwrap();
        assert_eq!(shared.shards()[0].to_vec().unwrap(), b0, "P={p}");
    }
}

#[test]
fn optimiser_skips_parameters_without_gradient_p3() {
    let m = mesh(3);
    let mut rng = Rng::fresh("skip_no_grad");
    let (w0, b0) = (rng.vec(35), rng.vec(5));
    let mut model = Pair::new(&m, &w0, &b0);
    Sgd::new(0.1)
        .with_momentum(0.9)
        .with_weight_decay(0.1)
        .step(&mut model)
        .unwrap();
    AdamW::new(0.1).step(&mut model).unwrap();
    assert_eq!(model.w.master().unwrap(), w0);
    assert_eq!(model.b.master().unwrap(), b0);
}

/// The README's MLP at P = 4: `fc1`'s and `fc2`'s weight shards are both
/// [16, 16] and their bias shards both [16], so state kept by name would mix
/// them. One optimiser for both must step exactly as one per layer.
#[test]
fn one_optimiser_steps_two_modules_with_clashing_names_p4() {
    use wgpu_tp::nn::{
        ColumnParallelConfig, ColumnParallelLinear, InitRng, RowParallelConfig, RowParallelLinear,
    };
    let m = mesh(4);
    let mut rng = Rng::fresh("one_optimiser_two_modules");
    let x = rng.vec(8 * 16);
    let run = |shared: bool, adam: bool| {
        let mut init = InitRng::new(5);
        let mut fc1 =
            ColumnParallelLinear::new(&m, ColumnParallelConfig::new(16, 64), &mut init).unwrap();
        let mut fc2 =
            RowParallelLinear::new(&m, RowParallelConfig::new(64, 16), &mut init).unwrap();
        let (mut sgd1, mut sgd2) = (
            Sgd::new(0.1).with_momentum(0.9),
            Sgd::new(0.1).with_momentum(0.9),
        );
        let (mut adam1, mut adam2) = (AdamW::new(0.05), AdamW::new(0.05));
        for _ in 0..3 {
            let input = DTensor::from_host(&m, &[8, 16], &x, Placement::Replicate).unwrap();
            let y = fc2.forward(&fc1.forward(&input).unwrap()).unwrap();
            let dy = DTensor::from_host(&m, &[8, 16], &x, y.placement()).unwrap();
            y.backward_with(&dy).unwrap();
            match (adam, shared) {
                (false, true) => {
                    sgd1.step(&mut fc1).unwrap();
                    sgd1.step(&mut fc2).unwrap();
                }
                (false, false) => {
                    sgd1.step(&mut fc1).unwrap();
                    sgd2.step(&mut fc2).unwrap();
                }
                (true, true) => {
                    adam1.step(&mut fc1).unwrap();
                    adam1.step(&mut fc2).unwrap();
                }
                (true, false) => {
                    adam1.step(&mut fc1).unwrap();
                    adam2.step(&mut fc2).unwrap();
                }
            }
            fc1.zero_grad();
            fc2.zero_grad();
        }
        let mut out = fc1.master_weight().unwrap();
        out.extend(fc2.master_weight().unwrap());
        out
    };
    for adam in [false, true] {
        assert_eq!(run(true, adam), run(false, adam), "adam: {adam}");
    }
}

#[test]
fn optimiser_state_that_no_longer_matches_its_parameter_is_an_error() {
    let m = mesh(2);
    let mut rng = Rng::fresh("state_mismatch");
    let (w0, b0) = (rng.vec(35), rng.vec(5));
    let mut model = Pair::new(&m, &w0, &b0);
    model.backward(&rng.vec(35), &rng.vec(5));
    let mut sgd = Sgd::new(0.1).with_momentum(0.9);
    let mut adam = AdamW::new(0.1);
    sgd.step(&mut model).unwrap();
    adam.step(&mut model).unwrap();
    // Replace the value by one of another shape behind the optimisers' back.
    let w = vec![0.5; 6 * 5];
    model.w.value = DTensor::from_host(&m, &[6, 5], &w, Placement::Shard(0)).unwrap();
    model.w.zero_grad();
    model
        .w
        .accumulate_grad(DTensor::from_host(&m, &[6, 5], &w, Placement::Shard(0)).unwrap())
        .unwrap();
    let b_before = model.b.master().unwrap();
    for err in [
        sgd.step(&mut model).unwrap_err(),
        adam.step(&mut model).unwrap_err(),
    ] {
        assert!(err.to_string().contains("new optimiser"), "{err}");
    }
    assert_eq!(
        model.w.master().unwrap(),
        w,
        "a refused step changes nothing"
    );
    assert_eq!(
        model.b.master().unwrap(),
        b_before,
        "nor the other parameters"
    );
}
