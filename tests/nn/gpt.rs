//! The transformer: `Gpt2Block` and a GPT-2 `CausalLm` (3 heads, so P = 2 and 4
//! split them unevenly and a rank of 4 holds none) equal an f64 reference
//! and the P = 1 run, forward and backward, plain and sequence-parallel, on
//! both transports, with the communication docs/MATH.md §14 states; cached
//! decoding equals full recomputation; checkpoints move between world sizes.

use std::collections::BTreeMap;

use crate::util::transformer::{self, Dims, Params};
use crate::util::{Rng, assert_close, count_lock, counting_mesh, counting_shared_mesh};
use wgpu_tp::models::{CausalLm, Gpt2Config, LoadOptions};
use wgpu_tp::nn::{
    BlockBuild, DecoderConfig, Init, InitRng, Params as _, Sampling, Step, Stream,
    from_safetensors_bytes, to_safetensors_bytes,
};
use wgpu_tp::{Collective, DTensor, Mesh, Placement};

const TOL: f64 = 1e-5;
const HIDDEN: usize = 12;
const HEADS: usize = 3;
const FFN: usize = 20;

fn dims() -> Dims {
    Dims {
        hidden: HIDDEN,
        heads: HEADS,
        ffn: FFN,
        eps: 1e-5,
    }
}

fn config() -> Gpt2Config {
    let mut cfg = Gpt2Config::new(11, 8, HIDDEN, HEADS, 2);
    cfg.n_inner = Some(FFN);
    cfg
}

/// A GPT-2 of `cfg`, sequence-parallel or not.
fn gpt(m: &Mesh, cfg: Gpt2Config, sp: bool, seed: u64) -> CausalLm {
    CausalLm::new_with(m, cfg, seed, LoadOptions::default().sequence_parallel(sp)).unwrap()
}

/// Every parameter's master value in f64, by name.
fn masters(m: &impl wgpu_tp::nn::Params) -> Params {
    m.named_parameters()
        .into_iter()
        .map(|(n, p)| (n, p.master().unwrap().iter().map(|&v| v as f64).collect()))
        .collect()
}

fn master_grads(m: &impl wgpu_tp::nn::Params) -> BTreeMap<String, Vec<f32>> {
    m.named_parameters()
        .into_iter()
        .map(|(n, p)| {
            (
                n,
                p.master_grad()
                    .unwrap()
                    .expect("every parameter has a gradient"),
            )
        })
        .collect()
}

/// Calls of each kind since the last reset, as (all-reduce, all-gather, reduce-scatter).
fn counts(m: &Mesh) -> (u64, u64, u64) {
    let c = |k| m.comm_calls(k);
    (
        c(Collective::AllReduce),
        c(Collective::AllGather),
        c(Collective::ReduceScatter),
    )
}

fn meshes(p: usize) -> Vec<(&'static str, Mesh)> {
    let mut v = vec![("host-staged", counting_mesh(p))];
    if p > 1 {
        v.push(("shared-device", counting_shared_mesh(p)));
    }
    v
}

#[test]
fn gpt_matches_f64_and_serial_plain_and_sequence_parallel_p1_2_3_4() {
    let _counting = count_lock();
    let mut rng = Rng::fresh("gpt");
    let seed = rng.next_u64();
    let (seq, batch, layers) = (5, 2, 2);
    let ids: Vec<i32> = (0..seq * batch).map(|_| rng.below(11) as i32).collect();
    let targets: Vec<i32> = (0..seq * batch).map(|_| rng.below(11) as i32).collect();
    for sp in [false, true] {
        let mut serial: Option<(f32, BTreeMap<String, Vec<f32>>)> = None;
        for p in [1, 2, 3, 4] {
            for (transport, m) in meshes(p) {
                let what = format!("gpt P={p} sp={sp} {transport}");
                let gpt = gpt(&m, config(), sp, seed);
                m.reset_comm_stats();
                let loss_t = gpt.loss(&ids, &targets, seq).unwrap();
                let loss = loss_t.to_host().unwrap()[0];
                let fwd = counts(&m);
                m.reset_comm_stats();
                loss_t.backward().unwrap();
                let bwd = counts(&m);
                let l = layers as u64;
                if p > 1 && !sp {
                    assert_eq!(fwd, (2 * l + 4, 0, 0), "{what}: forward collectives");
                    assert_eq!(bwd, (2 * l + 1, 0, 0), "{what}: backward collectives");
                } else if p > 1 {
                    assert_eq!(fwd, (4, 2 * l + 1, 2 * l), "{what}: forward collectives");
                    assert_eq!(bwd, (2 * l + 1, 2 * l + 1, 2 * l + 1), "{what}: backward");
                }
                let (want_loss, want) = transformer::gpt_loss_and_grads(
                    &masters(&gpt),
                    &ids,
                    &targets,
                    seq,
                    layers,
                    dims(),
                );
                assert_close(&format!("{what} loss"), &[loss], &[want_loss], TOL);
                let grads = master_grads(&gpt);
                assert_eq!(
                    grads.len(),
                    want.len(),
                    "{what}: one gradient per parameter"
                );
                for (name, g) in &grads {
                    assert_close(&format!("{what} d{name}"), g, &want[name], TOL);
                }
                match &serial {
                    None => serial = Some((loss, grads)),
                    Some((l1, g1)) => {
                        assert_close(&format!("{what} loss vs P=1"), &[loss], &[*l1 as f64], TOL);
                        for (name, g) in &grads {
                            let w: Vec<f64> = g1[name].iter().map(|&v| v as f64).collect();
                            assert_close(&format!("{what} d{name} vs P=1"), g, &w, TOL);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn block_matches_f64_with_two_all_reduces_each_way_p1_2_3_4() {
    let _counting = count_lock();
    let mut rng = Rng::fresh("block");
    let (seq, batch) = (4, 2);
    let n = seq * batch;
    let x = rng.vec(n * HIDDEN);
    let dy = rng.vec(n * HIDDEN);
    let seed = rng.next_u64();
    for sp in [false, true] {
        for p in [1, 2, 3, 4] {
            for (transport, m) in meshes(p) {
                let what = format!("block P={p} sp={sp} {transport}");
                let build = BlockBuild {
                    random: true,
                    init: Init::default(),
                    sequence_parallel: sp,
                    seed,
                };
                let mut rng_init = InitRng::new(seed);
                let mut block = config().block(&m, 0, &build, &mut rng_init).unwrap();
                // Non-trivial norm parameters, so their gradients matter.
                for (name, param) in block.named_parameters_mut() {
                    if name.starts_with("ln_") {
                        let v: Vec<f32> = rng.vec(HIDDEN).iter().map(|v| v + 1.0).collect();
                        param.load_master(&v).unwrap();
                    }
                }
                let placement = if sp {
                    Placement::Shard(0)
                } else {
                    Placement::Replicate
                };
                let xd = DTensor::from_host(&m, &[n, HIDDEN], &x, placement)
                    .unwrap()
                    .requires_grad();
                m.reset_comm_stats();
                let mut stream = Stream::new(xd.clone());
                block.forward(&mut stream, Step::Sequences(seq)).unwrap();
                let y = stream.value().unwrap();
                let fwd = counts(&m);
                let dyd = DTensor::from_host(&m, &[n, HIDDEN], &dy, placement).unwrap();
                m.reset_comm_stats();
                y.backward_with(&dyd).unwrap();
                let dx = xd.grad().unwrap();
                let bwd = counts(&m);
                if p > 1 && !sp {
                    assert_eq!((fwd, bwd), ((2, 0, 0), (2, 0, 0)), "{what}: collectives");
                } else if p > 1 {
                    // Column layers gather tokens, row layers reduce-scatter them;
                    // the two norms all-reduce their parameter gradients.
                    assert_eq!((fwd, bwd), ((0, 2, 2), (2, 2, 2)), "{what}: collectives");
                }
                assert_eq!(y.placement(), placement, "{what}");
                let params = masters(&block);
                let x64: Vec<f64> = x.iter().map(|&v| v as f64).collect();
                let dy64: Vec<f64> = dy.iter().map(|&v| v as f64).collect();
                let (want_y, cache) = transformer::block(&params, "", &x64, batch, seq, dims());
                let mut want_grads = Params::new();
                let want_dx = transformer::block_backward(
                    &params,
                    "",
                    &cache,
                    &dy64,
                    batch,
                    seq,
                    dims(),
                    &mut want_grads,
                );
                assert_close(&format!("{what} y"), &y.to_host().unwrap(), &want_y, TOL);
                assert_close(&format!("{what} dx"), &dx.to_host().unwrap(), &want_dx, TOL);
                for (name, g) in master_grads(&block) {
                    assert_close(&format!("{what} d{name}"), &g, &want_grads[&name], TOL);
                }
            }
        }
    }
}

#[test]
fn cached_decoding_equals_full_recomputation_p1_3_4() {
    let mut rng = Rng::fresh("decode");
    let seed = rng.next_u64();
    let prompt: Vec<i32> = (0..3).map(|_| rng.below(11) as i32).collect();
    let mut tokens: Option<Vec<i32>> = None;
    for p in [1, 3, 4] {
        let m = crate::util::mesh(p);
        let gpt = CausalLm::new(&m, config(), seed).unwrap();
        for sampling in [
            Sampling::Greedy,
            Sampling::TopK {
                k: 4,
                temperature: 0.9,
                seed,
            },
        ] {
            let cached = gpt.generate(&prompt, 5, sampling).unwrap();
            let full = gpt.generate_uncached(&prompt, 5, sampling).unwrap();
            assert_eq!(cached, full, "P={p} {sampling:?}: cached vs recomputed");
            assert_eq!(
                gpt.generate(&prompt, 5, sampling).unwrap(),
                cached,
                "same seed, same run"
            );
            if sampling == Sampling::Greedy {
                match &tokens {
                    None => tokens = Some(cached),
                    Some(t) => assert_eq!(&cached, t, "P={p}: greedy tokens vs P=1"),
                }
            }
        }
        // Bad requests are errors, and the model still works afterwards.
        assert!(gpt.generate(&[], 1, Sampling::Greedy).is_err());
        assert!(gpt.generate(&[11], 1, Sampling::Greedy).is_err());
        assert!(
            gpt.generate(&prompt, 8, Sampling::Greedy).is_err(),
            "past n_ctx"
        );
        let bad_k = Sampling::TopK {
            k: 0,
            temperature: 1.0,
            seed: 0,
        };
        assert!(gpt.generate(&prompt, 1, bad_k).is_err());
        assert_eq!(
            gpt.generate(&prompt, 5, Sampling::Greedy).unwrap(),
            tokens.clone().unwrap()
        );
    }
}

#[test]
fn decoding_communicates_only_the_row_all_reduces_p3() {
    let _counting = count_lock();
    let m = counting_mesh(3);
    let gpt = CausalLm::new(&m, config(), 7).unwrap();
    m.reset_comm_stats();
    gpt.generate(&[1, 2], 3, Sampling::Greedy).unwrap();
    // Per step: the embedding's all-reduce and two per block (row layers).
    let stats = m.comm_stats();
    assert_eq!(stats.len(), 1, "only all-reduces: {stats:?}");
    assert_eq!(m.comm_calls(Collective::AllReduce), 3 * (1 + 2 * 2));
}

#[test]
fn gpt2_names_and_checkpoints_move_between_world_sizes() {
    let names: Vec<String> = {
        let m = crate::util::mesh(1);
        let gpt = CausalLm::new(&m, config(), 3).unwrap();
        gpt.named_parameters().into_iter().map(|(n, _)| n).collect()
    };
    let mut want = vec!["wte.weight".to_string(), "wpe.weight".to_string()];
    for i in 0..2 {
        for p in [
            "ln_1.weight",
            "ln_1.bias",
            "attn.c_attn.weight",
            "attn.c_attn.bias",
            "attn.c_proj.weight",
            "attn.c_proj.bias",
            "ln_2.weight",
            "ln_2.bias",
            "mlp.c_fc.weight",
            "mlp.c_fc.bias",
            "mlp.c_proj.weight",
            "mlp.c_proj.bias",
        ] {
            want.push(format!("h.{i}.{p}"));
        }
    }
    want.extend(["ln_f.weight".to_string(), "ln_f.bias".to_string()]);
    assert_eq!(names, want, "GPT-2 naming, no separate lm_head (tied)");

    let ids = [1, 4, 2, 9, 0, 3];
    let logits = |gpt: &mut CausalLm| gpt.logits(&ids, 3).unwrap().to_host().unwrap();
    let saved_at_3 = {
        let m = crate::util::mesh(3);
        let mut gpt = CausalLm::new(&m, config(), 11).unwrap();
        (to_safetensors_bytes(&gpt).unwrap(), logits(&mut gpt))
    };
    for p in [1, 2, 4] {
        let m = crate::util::mesh(p);
        let mut gpt = CausalLm::new(&m, config(), 99).unwrap();
        from_safetensors_bytes(&mut gpt, &saved_at_3.0).unwrap();
        let w: Vec<f64> = saved_at_3.1.iter().map(|&v| v as f64).collect();
        assert_close(
            &format!("logits after loading a P=3 checkpoint at P={p}"),
            &logits(&mut gpt),
            &w,
            TOL,
        );
    }
}

#[test]
fn dropout_gives_the_same_numbers_at_any_world_size_p1_3_4() {
    let mut rng = Rng::fresh("gpt_dropout");
    let seed = rng.next_u64();
    let ids: Vec<i32> = (0..8).map(|_| rng.below(11) as i32).collect();
    let targets: Vec<i32> = (0..8).map(|_| rng.below(11) as i32).collect();
    let mut cfg = config();
    (cfg.resid_pdrop, cfg.embd_pdrop, cfg.attn_pdrop) = (0.25, 0.25, 0.2);
    let mut serial: Option<(f32, BTreeMap<String, Vec<f32>>)> = None;
    for p in [1, 3, 4] {
        for sp in [false, true] {
            let what = format!("dropout P={p} sp={sp}");
            let m = crate::util::mesh(p);
            let mut gpt = gpt(&m, cfg.clone(), sp, seed);
            gpt.set_mode(true, 5);
            let loss_t = gpt.loss(&ids, &targets, 4).unwrap();
            let loss = loss_t.to_host().unwrap()[0];
            loss_t.backward().unwrap();
            let grads = master_grads(&gpt);
            // Another step draws other masks; evaluation mode draws none.
            gpt.zero_grad();
            gpt.set_mode(true, 6);
            let other = gpt.loss(&ids, &targets, 4).unwrap().to_host().unwrap()[0];
            gpt.set_mode(false, 5);
            let eval = gpt.loss(&ids, &targets, 4).unwrap().to_host().unwrap()[0];
            assert_ne!(loss, other, "{what}: step 6 vs step 5");
            assert_ne!(loss, eval, "{what}: training vs evaluation");
            match &serial {
                None => serial = Some((loss, grads)),
                Some((l1, g1)) => {
                    assert_close(&format!("{what} loss vs P=1"), &[loss], &[*l1 as f64], TOL);
                    for (name, g) in &grads {
                        let w: Vec<f64> = g1[name].iter().map(|&v| v as f64).collect();
                        assert_close(&format!("{what} d{name} vs P=1"), g, &w, TOL);
                    }
                }
            }
        }
    }
    // The probability dropout is really on: without it the loss differs.
    let m = crate::util::mesh(1);
    let mut gpt = gpt(
        &m,
        Gpt2Config {
            attn_pdrop: 0.0,
            ..cfg
        },
        false,
        seed,
    );
    gpt.set_mode(true, 5);
    let without = gpt.loss(&ids, &targets, 4).unwrap().to_host().unwrap()[0];
    assert_ne!(
        serial.unwrap().0,
        without,
        "attention dropout had no effect"
    );
}
