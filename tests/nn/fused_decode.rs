//! Decoding with the fused epilogues: a GPT token runs no separate bias,
//! residual or activation kernel (c_fc's GELU is applied in the product's
//! store, each row-parallel bias and residual in one `add_row_add`, or on
//! one rank in the product's store), a
//! Llama token no separate SiLU or gate-times-up product (nor, on one
//! rank, residual add), and rotates its query and key in one dispatch, at
//! P = 1, 2, 4 (`rotary_pair` gives two rotaries' bits on every placement);
//! the gated MLP gives the separate operations' bits and gradients; the
//! column layer's
//! `forward_activation` gives `forward` + `activation`'s bits, recorded or
//! not, on every placement it takes. (Decoded tokens equal full
//! recomputation: tests/nn/gpt.rs, tests/models/llama.rs.)

use std::path::Path;

use crate::util::{
    Rng, WORLD_SIZES, count_lock, counting_mesh, counting_shared_mesh, kernel_calls as calls,
    meshes,
};
use wgpu_tp::models::{CausalLm, Gpt2Config, LlamaConfig};
use wgpu_tp::nn::{
    CausalDecoder, ColumnParallelConfig, ColumnParallelLinear, GatedMlp, GatedMlpConfig, InitRng,
    KvCache, Params, Sampling,
};
use wgpu_tp::{DTensor, Mapping, MatmulOptions, Placement, Trace, kernels::Activation, no_grad};

/// `f(module, x)` recorded: its value, x's gradient and every parameter's
/// gradient after backward from `dy` (the whole value's, placed like it).
fn recorded<M: Params>(
    module: &mut M,
    x: &DTensor,
    dy: &[f32],
    f: impl Fn(&M, &DTensor) -> wgpu_tp::Result<DTensor>,
) -> (Vec<f32>, Vec<f32>, Vec<Vec<f32>>) {
    module.zero_grad();
    let xg = x.detach().requires_grad();
    let y = f(module, &xg).unwrap();
    let dyd = DTensor::from_host(x.mesh(), y.shape(), dy, Placement::Replicate)
        .unwrap()
        .redistribute(y.placement())
        .unwrap();
    y.backward_with(&dyd).unwrap();
    let grads = (module.named_parameters().iter())
        .map(|(_, p)| p.master_grad().unwrap().unwrap())
        .collect();
    let dx = xg.grad().unwrap().to_host().unwrap();
    (y.to_host().unwrap(), dx, grads)
}

#[test]
fn a_decoded_gpt_token_runs_no_separate_bias_residual_or_gelu_p1_2_4() {
    let _counting = count_lock();
    let mut cfg = Gpt2Config::new(11, 8, 12, 3, 2);
    cfg.n_inner = Some(20);
    for p in [1, 2, 4] {
        let m = counting_mesh(p);
        let mut gpt = CausalLm::new(&m, cfg.clone(), 3).unwrap();
        gpt.set_mode(false, 0);
        m.start_trace().unwrap();
        let ids = no_grad(|| gpt.generate(&[1, 2, 3], 4, Sampling::Greedy)).unwrap();
        let trace = m.stop_trace().unwrap();
        assert_eq!(ids.len(), 4, "P={p}: the new tokens");
        for separate in ["elementwise::gelu", "elementwise::add_row"] {
            assert_eq!(calls(&trace, separate), 0, "P={p}: {separate}");
        }
        // Two per layer and forward pass (the prompt's and 3 tokens'), per
        // rank; on one rank none: the product's store adds both.
        let per_pass = (2 * cfg.n_layer * p) as u64;
        let fused = if p == 1 { 0 } else { 4 * per_pass };
        assert_eq!(calls(&trace, "elementwise::add_row_add"), fused, "P={p}");
        // The embedding's sum, one per pass and rank: no residual's.
        assert_eq!(calls(&trace, "elementwise::axpby"), 4 * p as u64, "P={p}");
    }
}

#[test]
fn a_decoded_llama_token_runs_no_separate_silu_mul_residual_or_rotary_p1_2() {
    let _counting = count_lock();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf/llama_gqa");
    for p in [1, 2] {
        let m = counting_mesh(p);
        let model = CausalLm::from_pretrained(&m, &dir).unwrap();
        m.start_trace().unwrap();
        let ids = no_grad(|| model.generate(&[1, 2, 3], 3, Sampling::Greedy)).unwrap();
        let trace = m.stop_trace().unwrap();
        assert_eq!(ids.len(), 3, "P={p}: the new tokens");
        // SwiGLU's SiLU and its product with up are in the gate's store.
        for separate in ["elementwise::silu", "elementwise::mul"] {
            assert_eq!(calls(&trace, separate), 0, "P={p}: {separate}");
        }
        // Two residual adds per layer, pass (the prompt's and 2 tokens')
        // and rank after the all-reduce; on one rank none: the products'
        // stores add them.
        let layers = model.blocks().len();
        let want = if p == 1 { 0 } else { 2 * layers * 3 * p };
        assert_eq!(calls(&trace, "elementwise::axpby"), want as u64, "P={p}");
        // q and k rotated in one dispatch per layer, pass and rank; a
        // decoded token's inside its attention step on CPU adapters (head_dim
        // 8, whole vec8s), which is then one dispatch per layer and rank.
        assert_eq!(calls(&trace, "rope::rotary"), 0, "P={p}");
        let in_step = !m.ranks()[0].device().is_gpu();
        let (passes, steps) = if in_step { (1, 2) } else { (3, 0) };
        let pairs = calls(&trace, "rope::rotary_pair");
        assert_eq!(pairs, (layers * passes * p) as u64, "P={p}");
        let attend = calls(&trace, "attention_decode::attend_one");
        assert_eq!(attend, (layers * steps * p) as u64, "P={p}");
        let products: u64 = (trace.top_kernels(usize::MAX).iter())
            .filter(|k| k.name.starts_with("gemv_"))
            .map(|k| k.calls)
            .sum();
        assert!(products > 0, "P={p}: the small-M products ran");
    }
}

#[test]
fn the_gated_mlp_gives_the_separate_ops_bits_p1_2_3_4_8() {
    let mut rng = Rng::fresh("gated mlp fused");
    let (t, h, f) = (3, 13, 17);
    let (x, dy) = (rng.vec(t * h), rng.vec(t * h));
    for &p in WORLD_SIZES {
        for (transport, m) in meshes(p) {
            for sp in [false, true] {
                if sp && t % p != 0 && p > t {
                    continue;
                }
                let what = format!("{transport} P={p} sp {sp}");
                let mut cfg = GatedMlpConfig::new(h, f);
                (cfg.bias, cfg.sequence_parallel) = (sp, sp);
                let mut mlp = GatedMlp::new(&m, cfg, &mut InitRng::new(5)).unwrap();
                // Biases start at zero: random ones show where they are added.
                for (b, len) in [
                    (mlp.gate_proj.bias.as_mut(), f),
                    (mlp.up_proj.bias.as_mut(), f),
                    (mlp.down_proj.bias.as_mut(), h),
                ] {
                    if let Some(b) = b {
                        b.load_master(&rng.vec(len)).unwrap();
                    }
                }
                let xp = if sp {
                    Placement::Shard(0)
                } else {
                    Placement::Replicate
                };
                let xd = DTensor::from_host(&m, &[t, h], &x, xp).unwrap();
                let separate = |mlp: &GatedMlp, xd: &DTensor| {
                    let f = match sp {
                        true => Mapping::AllGatherToParallel(0),
                        false => Mapping::CopyToParallel,
                    };
                    let xg = f.forward(xd)?;
                    let gate = mlp
                        .gate_proj
                        .forward_mapped(&xg)?
                        .activation(Activation::Silu)?;
                    let up = mlp.up_proj.forward_mapped(&xg)?;
                    mlp.down_proj.forward(&gate.mul(&up)?)
                };
                let fused = no_grad(|| mlp.forward(&xd)).unwrap();
                let apart = no_grad(|| separate(&mlp, &xd)).unwrap();
                assert!(
                    fused.to_host().unwrap() == apart.to_host().unwrap(),
                    "{what}"
                );
                // Recorded: the same values and gradients.
                let fused = recorded(&mut mlp, &xd, &dy, |mlp, x| mlp.forward(x));
                let apart = recorded(&mut mlp, &xd, &dy, separate);
                assert!(fused == apart, "{what}: recorded");
            }
        }
    }
}

#[test]
fn linear_activation_mul_refuses_an_up_placed_unlike_the_product() {
    let m = crate::util::mesh(2);
    let mut rng = Rng::fresh("linear_activation_mul placement");
    let x = DTensor::from_host(&m, &[2, 8], &rng.vec(16), Placement::Replicate).unwrap();
    let w = DTensor::from_host(&m, &[6, 8], &rng.vec(48), Placement::Shard(0)).unwrap();
    let up = DTensor::from_host(&m, &[2, 6], &rng.vec(12), Placement::Replicate).unwrap();
    let opts = MatmulOptions::default();
    let e = no_grad(|| x.linear_activation_mul(&w, None, Activation::Silu, &up, opts)).unwrap_err();
    assert!(e.to_string().contains("placed"), "{e}");
    let up = up.redistribute(Placement::Shard(1)).unwrap();
    let fused = no_grad(|| x.linear_activation_mul(&w, None, Activation::Silu, &up, opts)).unwrap();
    let apart = no_grad(|| {
        x.linear_activation(&w, None, Activation::Silu, opts)?
            .mul(&up)
    })
    .unwrap();
    assert!(fused.to_host().unwrap() == apart.to_host().unwrap());
}

#[test]
fn forward_activation_gives_forward_then_activation_bits_p1_2_3_4_8() {
    let mut rng = Rng::fresh("forward_activation");
    let (t, k, n) = (3, 13, 17);
    let (x, dy) = (rng.vec(t * k), rng.vec(t * n));
    for &p in WORLD_SIZES {
        for (transport, m) in meshes(p) {
            for (act, gather, sp) in [
                (Activation::Gelu, false, false),
                (Activation::Silu, true, false),
                (Activation::Relu, false, true),
            ] {
                let what = format!("{transport} P={p} {act:?} gather {gather} sp {sp}");
                let mut cfg = ColumnParallelConfig::new(k, n);
                (cfg.gather_output, cfg.sequence_parallel) = (gather, sp);
                let mut layer = ColumnParallelLinear::new(&m, cfg, &mut InitRng::new(9)).unwrap();
                let xp = if sp {
                    Placement::Shard(0)
                } else {
                    Placement::Replicate
                };
                let xd = DTensor::from_host(&m, &[t, k], &x, xp).unwrap();
                // Unrecorded (the fused store where the product is small).
                let fused = no_grad(|| layer.forward_activation(&xd, act)).unwrap();
                let two = no_grad(|| layer.forward(&xd)?.activation(act)).unwrap();
                assert_eq!(fused.placement(), two.placement(), "{what}");
                assert!(fused.to_host().unwrap() == two.to_host().unwrap(), "{what}");
                // Recorded: the same values and gradients.
                let fused = recorded(&mut layer, &xd, &dy, |l, x| l.forward_activation(x, act));
                let two = recorded(&mut layer, &xd, &dy, |l, x| l.forward(x)?.activation(act));
                assert!(fused == two, "{what}: recorded values and gradients");
            }
        }
    }
}

#[test]
fn rotary_pair_gives_two_rotaries_bits_on_every_placement_p1_2_3_4_8() {
    let mut rng = Rng::fresh("rotary_pair op");
    // 8 query heads and 8 key heads split over any P ≤ 8, or the keys held
    // whole (`Replicate`) beside split queries.
    let (rows, d, heads) = (3, 6, 8);
    let (q, k) = (rng.vec(rows * heads * d), rng.vec(rows * heads * d));
    let (cos, sin) = (rng.vec(rows * d / 2), rng.vec(rows * d / 2));
    for &p in WORLD_SIZES {
        for (transport, m) in meshes(p) {
            let table = |v: &[f32]| DTensor::from_host(&m, &[rows, d / 2], v, Placement::Replicate);
            let (c, s) = (table(&cos).unwrap(), table(&sin).unwrap());
            for kp in [Placement::Shard(1), Placement::Replicate] {
                let what = format!("{transport} P={p} k {kp:?}");
                // Whole heads per rank: shards in units of a head.
                let on = |v: &[f32], pl| {
                    DTensor::from_host_in_units(&m, &[rows, heads * d], v, pl, d).unwrap()
                };
                let (qd, kd) = (on(&q, Placement::Shard(1)), on(&k, kp));
                let (gq, gk) = no_grad(|| qd.rotary_pair(&kd, &c, &s, d)).unwrap();
                assert_eq!(
                    (gq.placement(), gk.placement()),
                    (Placement::Shard(1), kp),
                    "{what}"
                );
                let wq = qd.rotary(&c, &s, d).unwrap();
                let wk = kd.rotary(&c, &s, d).unwrap();
                assert!(gq.to_host().unwrap() == wq.to_host().unwrap(), "{what}: q");
                assert!(gk.to_host().unwrap() == wk.to_host().unwrap(), "{what}: k");
                // Recorded: the two operations, so gradients flow to both.
                let (ql, kl) = (qd.detach().requires_grad(), kd.detach().requires_grad());
                let (yq, yk) = ql.rotary_pair(&kl, &c, &s, d).unwrap();
                for y in [&yq, &yk] {
                    y.backward_with(&on(&vec![1.0; rows * heads * d], y.placement()))
                        .unwrap();
                }
                assert!(
                    ql.grad().is_some() && kl.grad().is_some(),
                    "{what}: gradients"
                );
            }
        }
    }
}

/// Logits of a prompt and two tokens decoded one by one, with the traces
/// of those two tokens.
fn llama_logits(m: &wgpu_tp::Mesh, cfg: &LlamaConfig) -> (Vec<Vec<f32>>, Vec<Trace>) {
    decoded_logits(m, &CausalLm::new(m, cfg.clone(), 9).unwrap())
}

/// [`llama_logits`] of any decoder.
fn decoded_logits(m: &wgpu_tp::Mesh, model: &dyn CausalDecoder) -> (Vec<Vec<f32>>, Vec<Trace>) {
    let mut caches = vec![KvCache::default(); model.num_caches()];
    let (mut logits, mut traces) = (Vec::new(), Vec::new());
    for (i, ids) in [&[1, 5, 2][..], &[7], &[3]].into_iter().enumerate() {
        if i > 0 {
            m.start_trace().unwrap();
        }
        let y = no_grad(|| model.decode_logits(ids, &mut caches)).unwrap();
        logits.push(y.to_host().unwrap());
        if i > 0 {
            traces.push(m.stop_trace().unwrap());
        }
    }
    (logits, traces)
}

#[test]
fn shared_ranks_fold_add_and_norm_each_llama_branch_in_one_dispatch_p2_3_4_8() {
    let _counting = count_lock();
    // head_dim 8: the one-token attention step rotates in place.
    let mut cfg = LlamaConfig::new(29, 64, 40, 2, 8, 4);
    cfg.max_position_embeddings = 16;
    let layers = cfg.num_hidden_layers as u64;
    for p in [2, 3, 4, 8] {
        let alone = llama_logits(&counting_mesh(p), &cfg);
        let shared_mesh = counting_shared_mesh(p);
        let shared = llama_logits(&shared_mesh, &cfg);
        assert!(
            alone.0 == shared.0,
            "P={p}: logits differ from a device per rank"
        );
        let dev = shared_mesh.ranks()[0].device();
        let fused = !dev.is_gpu() && dev.limits().max_storage_buffers_per_shader_stage >= 10;
        for (t, trace) in shared.1.iter().enumerate() {
            let what = format!("P={p} token {t}");
            // Each branch's all-reduce adds the residual and norms what
            // follows (the next layer's, the last one the final norm); only
            // the first layer's input norm runs apart.
            let want = if fused { 2 * layers } else { 0 };
            assert_eq!(calls(trace, "fold_norm::fold_norm_rows"), want, "{what}");
            if fused {
                assert_eq!(calls(trace, "norm_rows::forward_rows"), 1, "{what}");
            }
            assert_eq!(
                calls(trace, "elementwise::axpby"),
                0,
                "{what}: residual adds"
            );
            // Past four partial sums a first fold pass, for each branch and
            // both of the embedding's (two passes alone).
            if fused && p > 4 {
                let first = calls(trace, "copy_fold::fold_flat4");
                assert_eq!(first, 2 * layers + 2, "{what}");
            }
        }
    }
}

#[test]
fn shared_ranks_decode_gpt_attention_steps_together_p2_3_4_8() {
    let _counting = count_lock();
    // head_dim 4: the one-token attention step takes it.
    let cfg = Gpt2Config::new(23, 16, 32, 8, 2);
    for p in [2, 3, 4, 8] {
        let gpt = |m: &wgpu_tp::Mesh| {
            let mut g = CausalLm::new(m, cfg.clone(), 4).unwrap();
            g.set_mode(false, 0);
            g
        };
        let (am, sm) = (counting_mesh(p), counting_shared_mesh(p));
        let alone = decoded_logits(&am, &gpt(&am));
        let shared = decoded_logits(&sm, &gpt(&sm));
        assert!(
            alone.0 == shared.0,
            "P={p}: logits differ from a device per rank"
        );
        let dev = sm.ranks()[0].device();
        let size = (dev.limits().max_storage_buffers_per_shader_stage as usize / 8).min(4);
        let grouped = size >= 2 && !dev.is_gpu();
        for (t, trace) in shared.1.iter().enumerate() {
            let groups: u64 = (trace.top_kernels(usize::MAX).iter())
                .filter(|k| k.name.starts_with("attention_decode_group"))
                .map(|k| k.calls)
                .sum();
            let want = if grouped {
                cfg.n_layer * (p / size + usize::from(p % size >= 2))
            } else {
                0
            };
            assert_eq!(
                groups, want as u64,
                "P={p} token {t}: {size} ranks a dispatch"
            );
        }
    }
}
