//! Mixed precision (run where the adapter has `SHADER_F16`, reported as
//! skipped elsewhere): column- and row-parallel layers fed f16 inputs give
//! f16 outputs and input gradients within f16 rounding of an f64 reference
//! of the f16 operands, and f32 weight/bias gradients within f32's
//! tolerance, for every world size (shared-device mesh; host-staged at
//! P = 1 and 3), plainly and sequence-parallel. The f32 master weights keep
//! updates that f16 weights would round away. The ring overlap refuses f16.
//! LayerNorm, the vocab-parallel cross-entropy and the MLP (column → GELU →
//! row) take f16 too: statistics, softmax sums and element-wise maths in f32,
//! rounded only where the result is stored. A GPT with `dtype: F16`
//! (attention and dropout widened likewise) tracks the f32 GPT's loss and
//! gradients at every world size, gives the same loss with dropout on at
//! every world size, and generates the same with and without its cache.

use super::TOL;
use crate::util::reference::{self, LinearGrads, linear_grads};
use crate::util::round_f16 as round;
use crate::util::{
    Rng, WORLD_SIZES, assert_close, assert_close_f16, assert_close_f16_chain, f16_meshes,
    linear_results, mesh,
};
use wgpu_tp::half::f16;
use wgpu_tp::nn::{
    ColumnParallelConfig, ColumnParallelLinear, Overlap, Params, RowParallelConfig,
    RowParallelLinear, Sgd,
};
use wgpu_tp::{DTensor, DType, Error, Mesh, Placement};

/// Sizes (tokens, in, out): ragged, and one where some ranks hold nothing at P = 8.
const SIZES: &[(usize, usize, usize)] = &[(7, 13, 17), (5, 3, 6)];

/// The meshes a mixed-precision layer test runs on: the shared-device mesh
/// at every world size (one device compiles the f16 pipelines once), the
/// host-staged one at P = 1 and 3. `None` where f16 is unavailable.
fn f16_layer_meshes(test: &str) -> Option<Vec<(String, Mesh)>> {
    let mut out = Vec::new();
    for &p in WORLD_SIZES {
        let [(host_name, host), (shared_name, shared)] = f16_meshes(p, test)?;
        out.push((format!("{shared_name} P={p}"), shared));
        if p == 1 || p == 3 {
            out.push((format!("{host_name} P={p}"), host));
        }
    }
    Some(out)
}

/// Random `(x, W, b, dy)` for `[t, inp] → [t, out]`, and the f64 reference of
/// the layer on x, W and dy rounded to f16 (the bias stays f32).
fn case(rng: &mut Rng, (t, inp, out): (usize, usize, usize)) -> ([Vec<f32>; 4], LinearGrads) {
    let (x, w, b, dy) = (
        rng.vec(t * inp),
        rng.vec(out * inp),
        rng.vec(out),
        rng.vec(t * out),
    );
    let want = linear_grads(&round(&x), &round(&w), &b, &round(&dy), (t, inp, out));
    ([x, w, b, dy], want)
}

/// y and dx are f16 (within f16 rounding), dW and db f32 (f32 tolerance).
#[track_caller]
fn check(what: &str, y: &DTensor, dx: &DTensor, layer: &dyn Params, want: &LinearGrads) {
    assert_eq!((y.dtype(), dx.dtype()), (DType::F16, DType::F16), "{what}");
    for (name, p) in layer.named_parameters() {
        assert_eq!(p.value.dtype(), DType::F32, "{what}: master {name}");
    }
    let [y, dx, dw, db] = linear_results(y, dx, layer);
    assert_close_f16(&format!("{what}: y"), &y, &want.y);
    assert_close_f16(&format!("{what}: dx"), &dx, &want.dx);
    assert_close(&format!("{what}: dW"), &dw, &want.dw, TOL);
    assert_close(&format!("{what}: db"), &db, &want.db, TOL);
}

#[test]
fn column_parallel_in_f16_matches_f64_every_world_size() {
    let Some(meshes) = f16_layer_meshes("column f16") else {
        return;
    };
    let mut rng = Rng::fresh("column_f16");
    for &size @ (t, inp, out) in SIZES {
        let ([x, w, b, dy], want) = case(&mut rng, size);
        for (i, (kind, m)) in meshes.iter().enumerate() {
            // Sequence parallel on every other mesh; gather_output where plain.
            let sp = i % 2 == 1;
            let mut cfg = ColumnParallelConfig::new(inp, out);
            cfg.sequence_parallel = sp;
            cfg.gather_output = !sp && i % 4 == 0;
            let x_place = if sp {
                Placement::Shard(0)
            } else {
                Placement::Replicate
            };
            let layer = ColumnParallelLinear::from_master(m, cfg, &w, Some(&b)).unwrap();
            let xd = DTensor::from_host_f16(m, &[t, inp], &x, x_place)
                .unwrap()
                .requires_grad();
            let y = layer.forward(&xd).unwrap();
            let dyd = DTensor::from_host_f16(m, &[t, out], &dy, y.placement()).unwrap();
            y.backward_with(&dyd).unwrap();
            let dx = xd.grad().unwrap();
            assert_eq!(dx.placement(), x_place);
            check(
                &format!("column {kind} sp={sp} {t}x{inp}x{out}"),
                &y,
                &dx,
                &layer,
                &want,
            );
        }
    }
}

#[test]
fn row_parallel_in_f16_matches_f64_every_world_size() {
    let Some(meshes) = f16_layer_meshes("row f16") else {
        return;
    };
    let mut rng = Rng::fresh("row_f16");
    for &size @ (t, inp, out) in SIZES {
        let ([x, w, b, dy], want) = case(&mut rng, size);
        for (i, (kind, m)) in meshes.iter().enumerate() {
            let sp = i % 2 == 1;
            let mut cfg = RowParallelConfig::new(inp, out);
            cfg.sequence_parallel = sp;
            // A parallel input (Shard(1); always with SP) on some meshes, a
            // replicated one scattered on others.
            cfg.input_is_parallel = sp || i % 3 != 0;
            let x_place = if cfg.input_is_parallel {
                Placement::Shard(1)
            } else {
                Placement::Replicate
            };
            let layer = RowParallelLinear::from_master(m, cfg, &w, Some(&b)).unwrap();
            let xd = DTensor::from_host_f16(m, &[t, inp], &x, x_place)
                .unwrap()
                .requires_grad();
            let y = layer.forward(&xd).unwrap();
            let dyd = DTensor::from_host_f16(m, &[t, out], &dy, y.placement()).unwrap();
            y.backward_with(&dyd).unwrap();
            let dx = xd.grad().unwrap();
            check(
                &format!("row {kind} sp={sp} {t}x{inp}x{out}"),
                &y,
                &dx,
                &layer,
                &want,
            );
        }
    }
}

#[test]
fn f32_masters_keep_updates_f16_weights_would_lose() {
    let Some([(_, m), _]) = f16_meshes(3, "f32 masters") else {
        return;
    };
    let mut rng = Rng::fresh("f16_masters");
    let (t, inp, out) = (7, 13, 17);
    let ([x, w, b, dy], _) = case(&mut rng, (t, inp, out));
    // Weights near 1, so one f16 step (2^-10) dwarfs lr·g.
    let w: Vec<f32> = w.iter().map(|v| 1.0 + 0.25 * v).collect();
    let mut layer =
        ColumnParallelLinear::from_master(&m, ColumnParallelConfig::new(inp, out), &w, Some(&b))
            .unwrap();
    let y = layer
        .forward(&DTensor::from_host_f16(&m, &[t, inp], &x, Placement::Replicate).unwrap())
        .unwrap();
    let dyd = DTensor::from_host_f16(&m, &[t, out], &dy, y.placement()).unwrap();
    y.backward_with(&dyd).unwrap();
    let g = layer.weight.master_grad().unwrap().unwrap();
    let lr = 1e-5;
    Sgd::new(lr).step(&mut layer).unwrap();
    let after = layer.master_weight().unwrap();
    let (mut kept, mut f16_lost) = (0, 0);
    for i in 0..w.len() {
        let want = w[i] - lr * g[i];
        // One f32 rounding either way (the kernel may fuse the multiply-add).
        let ulp = f32::EPSILON * w[i].abs();
        assert!(
            (after[i] - want).abs() <= ulp,
            "master {i}: {} vs {want}",
            after[i]
        );
        kept += usize::from(after[i] != w[i]);
        f16_lost += usize::from(f16::from_f32(after[i]) == f16::from_f32(w[i]));
    }
    let n = w.len();
    assert!(kept * 10 >= n * 9, "the f32 masters moved ({kept} of {n})");
    assert!(
        f16_lost * 10 >= n * 9,
        "f16 weights would have lost most updates ({f16_lost} of {n})"
    );
}

#[test]
fn ring_overlap_refuses_f16_and_the_layer_stays_usable() {
    let Some([(_, m), _]) = f16_meshes(2, "ring f16") else {
        return;
    };
    let (t, inp, out) = (6, 5, 4);
    let mut cfg = ColumnParallelConfig::new(inp, out);
    cfg.sequence_parallel = true;
    cfg.overlap = Overlap::Ring;
    let layer = ColumnParallelLinear::new(&m, cfg, &mut wgpu_tp::nn::InitRng::new(3)).unwrap();
    let x = vec![0.5; t * inp];
    let x16 = DTensor::from_host_f16(&m, &[t, inp], &x, Placement::Shard(0)).unwrap();
    match layer.forward(&x16) {
        Err(Error::InvalidArgument { message, .. }) => assert!(message.contains("Ring")),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    let x32 = DTensor::from_host(&m, &[t, inp], &x, Placement::Shard(0)).unwrap();
    let y = layer.forward(&x32).unwrap();
    assert_eq!((y.dtype(), y.shape()), (DType::F32, &[t, out][..]));
    // An f16 gradient reaches the ring's VJP widened to the output's f32.
    let x32 = x32.requires_grad();
    let y = layer.forward(&x32).unwrap();
    let dy16 = DTensor::from_host_f16(&m, &[t, out], &vec![1.0; t * out], y.placement()).unwrap();
    y.backward_with(&dy16).unwrap();
    assert_eq!(x32.grad().unwrap().dtype(), DType::F32);
    assert_eq!(layer.weight.grad().unwrap().dtype(), DType::F32);
}

fn round64(x: &[f64]) -> Vec<f64> {
    x.iter().map(|&v| f16::from_f64(v).to_f64()).collect()
}

#[test]
fn layer_norm_in_f16_normalises_in_f32() {
    let Some(meshes) = f16_layer_meshes("layer norm f16") else {
        return;
    };
    let mut rng = Rng::fresh("norm_f16");
    let (t, d) = (7, 13);
    for (i, (kind, m)) in meshes.iter().enumerate() {
        let (x, dy) = (round(&rng.vec(t * d)), round(&rng.vec(t * d)));
        let (g, b) = (rng.vec(d), rng.vec(d));
        let cfg = wgpu_tp::nn::NormConfig::new(d);
        let ln = wgpu_tp::nn::LayerNorm::from_master(m, cfg, &g, Some(&b)).unwrap();
        let place = if i % 2 == 1 {
            Placement::Shard(0)
        } else {
            Placement::Replicate
        };
        let xd = DTensor::from_host_f16(m, &[t, d], &x, place)
            .unwrap()
            .requires_grad();
        let y = ln.forward(&xd).unwrap();
        y.backward_with(&DTensor::from_host_f16(m, &[t, d], &dy, place).unwrap())
            .unwrap();
        let dx = xd.grad().unwrap();
        assert_eq!((y.dtype(), dx.dtype()), (DType::F16, DType::F16));
        let w64 = |v: &[f32]| v.iter().map(|&a| a as f64).collect::<Vec<_>>();
        let (y_ref, xhat, rstd) =
            crate::util::transformer::layer_norm(&w64(&x), &w64(&g), &w64(&b), d, cfg.eps as f64);
        let (dx_ref, dg_ref, db_ref) =
            crate::util::transformer::layer_norm_backward(&xhat, &rstd, &w64(&g), &w64(&dy), d);
        let what = format!("layer norm f16 {kind} {place:?}");
        assert_close_f16(&format!("{what}: y"), &y.to_host().unwrap(), &y_ref);
        assert_close_f16(&format!("{what}: dx"), &dx.to_host().unwrap(), &dx_ref);
        let grads: Vec<Vec<f32>> = ln
            .named_parameters()
            .iter()
            .map(|(_, p)| p.master_grad().unwrap().unwrap())
            .collect();
        assert_close(&format!("{what}: dγ"), &grads[0], &dg_ref, TOL);
        assert_close(&format!("{what}: dβ"), &grads[1], &db_ref, TOL);
    }
}

#[test]
fn cross_entropy_of_f16_logits_sums_in_f32() {
    use wgpu_tp::nn::{CrossEntropyConfig, Reduction, VocabParallelCrossEntropy};
    let Some(meshes) = f16_layer_meshes("cross-entropy f16") else {
        return;
    };
    let mut rng = Rng::fresh("ce_f16");
    let (t, v) = (7, 17);
    for (kind, m) in &meshes {
        let z = round(&rng.vec(t * v).iter().map(|a| 4.0 * a).collect::<Vec<_>>());
        let targets: Vec<i32> = (0..t).map(|_| rng.below(v) as i32).collect();
        let cfg = CrossEntropyConfig {
            reduction: Reduction::Sum,
            ..Default::default()
        };
        let ce = VocabParallelCrossEntropy::new(cfg).unwrap();
        let zd = DTensor::from_host_f16(m, &[t, v], &z, Placement::Shard(1))
            .unwrap()
            .requires_grad();
        let loss = ce.forward(&zd, &targets).unwrap();
        loss.backward().unwrap();
        let dz = zd.grad().unwrap();
        assert_eq!((loss.dtype(), dz.dtype()), (DType::F32, DType::F16));
        let want = reference::cross_entropy(&z, (v, v), &targets, 0.0, None, &vec![1.0; t]);
        let total: f64 = want.loss.iter().sum();
        let what = format!("cross-entropy f16 {kind}");
        assert_close(
            &format!("{what}: loss"),
            &loss.to_host().unwrap(),
            &[total],
            TOL,
        );
        assert_close_f16(&format!("{what}: dz"), &dz.to_host().unwrap(), &want.grad);
    }
}

#[test]
fn mlp_in_f16_rounds_only_where_it_stores() {
    use wgpu_tp::nn::{InitRng, MlpConfig, ParallelMlp};
    let Some(meshes) = f16_layer_meshes("mlp f16") else {
        return;
    };
    let mut rng = Rng::fresh("mlp_f16");
    let (t, h, f) = (5, 8, 12);
    for (kind, m) in &meshes {
        let mut mlp = ParallelMlp::new(m, MlpConfig::new(h, f), &mut InitRng::new(7)).unwrap();
        let w1 = mlp.c_fc.master_weight().unwrap();
        let w2 = mlp.c_proj.master_weight().unwrap();
        // Non-zero biases so their path is checked too.
        let (b1, b2) = (rng.vec(f), rng.vec(h));
        mlp.c_fc.bias.as_mut().unwrap().load_master(&b1).unwrap();
        mlp.c_proj.bias.as_mut().unwrap().load_master(&b2).unwrap();
        let (x, dy) = (round(&rng.vec(t * h)), round(&rng.vec(t * h)));
        let xd = DTensor::from_host_f16(m, &[t, h], &x, Placement::Replicate)
            .unwrap()
            .requires_grad();
        let y = mlp.forward(&xd).unwrap();
        y.backward_with(&DTensor::from_host_f16(m, &[t, h], &dy, Placement::Replicate).unwrap())
            .unwrap();
        let dx = xd.grad().unwrap();
        assert_eq!((y.dtype(), dx.dtype()), (DType::F16, DType::F16));
        // The f64 model of the f16 run: operands rounded where the layer stores them.
        let (w1h, w2h) = (round(&w1), round(&w2));
        let pre = round64(&reference::linear(&x, &w1h, Some(&b1), t, h, f));
        let act = round64(&pre.iter().map(|&p| reference::gelu(p)).collect::<Vec<_>>());
        let y_ref = reference::linear(&act, &w2h, Some(&b2), t, f, h);
        let d_act = round64(&reference::gemm(&dy, &w2h, t, f, h, false, false));
        let d_pre = round64(
            &d_act
                .iter()
                .zip(&pre)
                .map(|(g, &p)| g * reference::gelu_grad(p))
                .collect::<Vec<_>>(),
        );
        let dx_ref = reference::gemm(&d_pre, &w1h, t, h, f, false, false);
        let dw1_ref = reference::gemm(&d_pre, &x, f, h, t, true, false);
        let dw2_ref = reference::gemm(&dy, &act, h, f, t, true, false);
        let what = format!("mlp f16 {kind}");
        assert_close_f16_chain(&format!("{what}: y"), &y.to_host().unwrap(), &y_ref);
        assert_close_f16_chain(&format!("{what}: dx"), &dx.to_host().unwrap(), &dx_ref);
        let g1 = mlp.c_fc.weight.master_grad().unwrap().unwrap();
        let g2 = mlp.c_proj.weight.master_grad().unwrap().unwrap();
        assert_close_f16_chain(&format!("{what}: dW1"), &g1, &dw1_ref);
        assert_close_f16_chain(&format!("{what}: dW2"), &g2, &dw2_ref);
    }
}

#[test]
fn gpt_in_f16_tracks_the_f32_model_at_every_world_size() {
    use wgpu_tp::models::{CausalLm, Gpt2Config, LoadOptions};
    use wgpu_tp::nn::Sampling;
    let Some(meshes) = f16_layer_meshes("gpt f16") else {
        return;
    };
    let mut rng = Rng::fresh("gpt_f16");
    let mut cfg = Gpt2Config::new(11, 8, 12, 3, 2);
    cfg.n_inner = Some(20);
    let (ids, targets) = crate::util::token_batch(&mut rng, cfg.vocab_size, 16);
    let seed = rng.next_u64();
    // The f32 model (itself held to an f64 reference in nn::gpt).
    let full = CausalLm::new(&mesh(1), cfg.clone(), seed).unwrap();
    let loss32_t = full.loss(&ids, &targets, 8).unwrap();
    let loss32 = loss32_t.to_host().unwrap()[0] as f64;
    loss32_t.backward().unwrap();
    let grads32 = crate::util::master_grads(&full);
    let mut dropout_loss: Option<f64> = None;
    for (i, (kind, m)) in meshes.iter().enumerate() {
        let sp = i % 2 == 1;
        let opts16 = LoadOptions::default()
            .activations(DType::F16)
            .sequence_parallel(sp);
        let what = format!("gpt f16 {kind} sp={sp}");
        // Dropout (embeddings, residuals, attention probabilities) on f16
        // activations: the same masks at every world size, so the loss with
        // dropout on matches across meshes too.
        let with_dropout = Gpt2Config {
            resid_pdrop: 0.2,
            embd_pdrop: 0.2,
            attn_pdrop: 0.1,
            ..cfg.clone()
        };
        let mut dropped = CausalLm::new_with(m, with_dropout, seed, opts16).unwrap();
        dropped.set_mode(true, 3);
        let loss = dropped.loss(&ids, &targets, 8).unwrap();
        let l = loss.to_host().unwrap()[0] as f64;
        loss.backward().unwrap();
        let first = *dropout_loss.get_or_insert(l);
        assert!(
            (l - first).abs() <= 2e-4 * first,
            "{what}: loss with dropout {l} vs {first} on the first mesh"
        );
        // At GPT-2's init the logits are tiny and the loss barely moves; the
        // gradients show the masks.
        let moved = crate::util::master_grads(&dropped)
            .iter()
            .zip(&grads32)
            .map(|((_, g16), (_, g32))| crate::util::rel_err(g16, &reference::widen(g32)))
            .fold(0.0f64, f64::max);
        eprintln!("[mixed precision] {what}: dropout moved the gradients by {moved:.2e}");
        assert!(
            moved > 0.05,
            "{what}: dropout changed nothing ({moved:.2e})"
        );
        let gpt = CausalLm::new_with(m, cfg.clone(), seed, opts16).unwrap();
        let logits = gpt.logits(&ids, 8).unwrap();
        assert_eq!(logits.dtype(), DType::F16, "{what}");
        let loss = gpt.loss(&ids, &targets, 8).unwrap();
        assert_eq!(loss.dtype(), DType::F32, "{what}");
        let loss16 = loss.to_host().unwrap()[0] as f64;
        let e = (loss16 - loss32).abs() / loss32;
        eprintln!("[mixed precision] {what}: loss {loss16:.6} vs f32 {loss32:.6} ({e:.2e})");
        // Observed 2.5e-6 (small logits at GPT-2's init); 2e-4 leaves room for
        // seeds, not for a wrong path.
        assert!(e <= 2e-4, "{what}: loss {loss16} vs f32 {loss32}");
        loss.backward().unwrap();
        let mut worst = 0.0f64;
        for ((name, g16), (_, g32)) in crate::util::master_grads(&gpt).iter().zip(&grads32) {
            let e = crate::util::rel_err(g16, &reference::widen(g32));
            worst = worst.max(e);
            // Observed ≈ 1e-3 (two f16 roundoffs through two blocks).
            assert!(e <= 1e-2, "{what}: gradient {name} off by {e:.2e}");
        }
        eprintln!("[mixed precision] {what}: worst gradient error vs f32 {worst:.2e}");
        for (name, p) in gpt.named_parameters() {
            assert_eq!(p.value.dtype(), DType::F32, "{what}: master {name}");
        }
        if !sp {
            // The key/value cache in f16 gives what recomputing everything gives.
            let out = gpt.generate(&ids[..3], 4, Sampling::Greedy).unwrap();
            let again = gpt
                .generate_uncached(&ids[..3], 4, Sampling::Greedy)
                .unwrap();
            assert_eq!(out, again, "{what}: cached vs uncached generation");
        }
    }
}
