//! Optimisers, initialisers and checkpoints: SGD (momentum, weight decay) and
//! AdamW (decoupled decay, bias correction) on sharded and replicated
//! parameters against an f64 host implementation; gradient accumulation and
//! zero-grad; seeded, world-size-independent initialisers with the right
//! statistics; safetensors checkpoints that reshard across world sizes and
//! reject bad files without touching the model.

use crate::util::reference::widen;
use crate::util::{Rng, assert_close, mesh, shared_mesh};
use safetensors::{Dtype, tensor::TensorView};
use wgpu_tp::kernels::optim::{SgdStep, sgd_step};
use wgpu_tp::nn::{
    AdamW, ColumnParallelConfig, ColumnParallelLinear, EmbeddingConfig, Init, InitRng,
    MlpLanguageModel, MlpLmConfig, Module, Parameter, RowParallelConfig, RowParallelLinear, Sgd,
    VocabParallelEmbedding, from_safetensors_bytes, load_safetensors, save_safetensors,
    to_safetensors_bytes,
};
use wgpu_tp::{DTensor, Error, Mesh, Placement};

const TOL: f64 = 1e-5;

// ---------------------------------------------------------------------------
// Optimisers
// ---------------------------------------------------------------------------

/// Two parameters: a ragged `[7, 5]` one sharded on rows and a replicated `[5]` one.
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

impl Module for Pair {
    fn named_parameters(&self) -> Vec<(String, &Parameter)> {
        vec![("w".into(), &self.w), ("b".into(), &self.b)]
    }

    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Parameter)> {
        vec![("w".into(), &mut self.w), ("b".into(), &mut self.b)]
    }
}

/// f64 SGD (PyTorch rule, dampening 0): `g += wd·p; buf = μ·buf + g (buf = g
/// at first); p -= lr·buf`.
fn sgd_ref(p: &mut [f64], buf: &mut Vec<f64>, g: &[f32], lr: f64, mu: f64, wd: f64) {
    let first = buf.is_empty();
    if first {
        buf.resize(p.len(), 0.0);
    }
    for i in 0..p.len() {
        let gi = g[i] as f64 + wd * p[i];
        let d = if mu != 0.0 {
            buf[i] = if first { gi } else { mu * buf[i] + gi };
            buf[i]
        } else {
            gi
        };
        p[i] -= lr * d;
    }
}

/// f64 AdamW (PyTorch rule) at step `t` (from 1).
#[allow(clippy::too_many_arguments)]
fn adamw_ref(
    p: &mut [f64],
    m: &mut [f64],
    v: &mut [f64],
    g: &[f32],
    t: i32,
    lr: f64,
    (b1, b2, eps, wd): (f64, f64, f64, f64),
) {
    for i in 0..p.len() {
        let gi = g[i] as f64;
        p[i] *= 1.0 - lr * wd;
        m[i] = b1 * m[i] + (1.0 - b1) * gi;
        v[i] = b2 * v[i] + (1.0 - b2) * gi * gi;
        let mh = m[i] / (1.0 - b1.powi(t));
        let vh = v[i] / (1.0 - b2.powi(t));
        p[i] -= lr * mh / (vh.sqrt() + eps);
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
                sgd_ref(&mut rw, &mut bw, gw, lr, mu, wd);
                sgd_ref(&mut rb, &mut bb, gb, lr, mu, wd);
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
                adamw_ref(&mut rw, &mut mw, &mut vw, gw, t, lr, hp);
                adamw_ref(&mut rb, &mut mb, &mut vb, gb, t, lr, hp);
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
                    adamw_ref(&mut rb, &mut mb, &mut vb, gb, step as i32 + 1, 0.01, hp);
                } else {
                    sgd.step(&mut model).unwrap();
                    sgd_ref(&mut rb, &mut buf, gb, 0.1, 0.9, 0.0);
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

fn grads(model: &dyn Module) -> Vec<(String, Vec<f32>)> {
    model
        .named_parameters()
        .into_iter()
        .map(|(n, p)| (n, p.master_grad().unwrap().expect("a gradient")))
        .collect()
}

#[test]
fn gradients_accumulate_until_zero_grad_p3() {
    let mut rng = Rng::fresh("grad_accum");
    let cfg = MlpLmConfig {
        vocab: 26,
        hidden: 12,
        ffn: 20,
    };
    let batch = |rng: &mut Rng| -> (Vec<i32>, Vec<i32>) {
        (
            (0..9).map(|_| rng.below(26) as i32).collect(),
            (0..9).map(|_| rng.below(26) as i32).collect(),
        )
    };
    let (b1, b2) = (batch(&mut rng), batch(&mut rng));
    let m = mesh(3);
    // Separately: g1, then (after zero_grad) g2.
    let mut model = MlpLanguageModel::new(&m, cfg, 11).unwrap();
    model.forward(&b1.0, &b1.1).unwrap();
    model.backward().unwrap();
    let g1 = grads(&model);
    model.zero_grad();
    assert!(
        model
            .named_parameters()
            .iter()
            .all(|(_, p)| p.grad.is_none() && p.master_grad().unwrap().is_none()),
        "zero_grad leaves no gradient"
    );
    model.forward(&b2.0, &b2.1).unwrap();
    model.backward().unwrap();
    let g2 = grads(&model);
    // Accumulated: two backward calls without zero_grad.
    let mut acc = MlpLanguageModel::new(&m, cfg, 11).unwrap();
    for b in [&b1, &b2] {
        acc.forward(&b.0, &b.1).unwrap();
        acc.backward().unwrap();
    }
    for (((n, a), (_, x)), (_, y)) in grads(&acc).iter().zip(&g1).zip(&g2) {
        let want: Vec<f64> = x
            .iter()
            .zip(y)
            .map(|(x, y)| *x as f64 + *y as f64)
            .collect();
        assert_close(&format!("accumulated {n}"), a, &want, TOL);
    }
    // Layer-level zero_grad too.
    acc.fc1.zero_grad();
    assert!(acc.fc1.weight.grad.is_none() && acc.fc1.bias.as_ref().unwrap().grad.is_none());
    assert!(acc.fc2.weight.grad.is_some());
}

// ---------------------------------------------------------------------------
// Initialisers
// ---------------------------------------------------------------------------

const INITS: &[Init] = &[
    Init::Normal {
        mean: 0.1,
        std: 0.5,
    },
    Init::Uniform {
        low: -0.3,
        high: 0.7,
    },
    Init::TruncNormal {
        mean: 0.0,
        std: 1.0,
        a: -0.5,
        b: 1.5,
    },
    Init::XavierNormal { gain: 1.5 },
    Init::XavierUniform { gain: 1.0 },
    Init::KaimingNormal,
    Init::KaimingUniform,
    Init::Zeros,
    Init::Ones,
];

#[test]
fn seeded_initialisers_give_the_serial_master_p1_3_4() {
    let mut rng = Rng::fresh("init_seeded");
    let seed = rng.next_u64();
    for &init in INITS {
        let mut firsts: Option<(Vec<f32>, Vec<f32>, Vec<f32>)> = None;
        for &p in &[1, 4, 3] {
            let m = mesh(p);
            let mut r = InitRng::new(seed);
            let mut ccfg = ColumnParallelConfig::new(11, 13);
            ccfg.init = init;
            let col = ColumnParallelLinear::new(&m, ccfg, &mut r).unwrap();
            let mut rcfg = RowParallelConfig::new(13, 11);
            rcfg.init = init;
            let row = RowParallelLinear::new(&m, rcfg, &mut r).unwrap();
            let mut ecfg = EmbeddingConfig::new(10, 6);
            ecfg.init = init;
            let emb = VocabParallelEmbedding::new(&m, ecfg, &mut r).unwrap();
            let got = (
                col.master_weight().unwrap(),
                row.master_weight().unwrap(),
                emb.master_weight().unwrap(),
            );
            // The master is exactly what the initialiser draws, in order.
            let mut r2 = InitRng::new(seed);
            assert_eq!(got.0, init.sample(&mut r2, 13, 11), "{init:?} column P={p}");
            assert_eq!(got.1, init.sample(&mut r2, 11, 13), "{init:?} row P={p}");
            assert_eq!(
                got.2,
                init.sample(&mut r2, 10, 6),
                "{init:?} embedding P={p}"
            );
            match &firsts {
                None => firsts = Some(got),
                Some(f) => assert_eq!(&got, f, "{init:?}: P={p} differs from P=1"),
            }
        }
    }
    // A different seed gives different weights.
    let a = Init::default().sample(&mut InitRng::new(seed), 4, 4);
    let b = Init::default().sample(&mut InitRng::new(seed.wrapping_add(1)), 4, 4);
    assert_ne!(a, b);
}

fn mean_std(x: &[f32]) -> (f64, f64) {
    let n = x.len() as f64;
    let mean = x.iter().map(|&v| v as f64).sum::<f64>() / n;
    let var = x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

#[test]
fn initialiser_statistics_match_their_formulas() {
    let mut rng = Rng::fresh("init_stats");
    let mut r = InitRng::new(rng.next_u64());
    // 256 × 1024 = 262144 draws: the sample std is within ~0.15% (1σ) of the
    // truth, the mean within std/512; the bounds below are ≥ 6σ.
    let (fo, fi) = (256usize, 1024usize);
    let n = (fo * fi) as f64;
    let check = |what: &str, x: &[f32], mean: f64, std: f64| {
        let (m, s) = mean_std(x);
        assert!(
            (m - mean).abs() <= 6.0 * std / n.sqrt(),
            "{what}: mean {m}, want {mean}"
        );
        assert!((s / std - 1.0).abs() <= 0.01, "{what}: std {s}, want {std}");
    };
    let x = Init::Normal {
        mean: 0.25,
        std: 2.0,
    }
    .sample(&mut r, fo, fi);
    check("Normal", &x, 0.25, 2.0);

    let x = Init::Uniform {
        low: -0.5,
        high: 1.5,
    }
    .sample(&mut r, fo, fi);
    assert!(
        x.iter().all(|&v| (-0.5..1.5).contains(&v)),
        "Uniform bounds"
    );
    check("Uniform", &x, 0.5, 2.0 / 12f64.sqrt());

    let (a, b) = (-0.5f32, 1.0f32);
    let x = Init::TruncNormal {
        mean: 0.2,
        std: 1.0,
        a,
        b,
    }
    .sample(&mut r, fo, fi);
    assert!(
        x.iter().all(|&v| (a..=b).contains(&v)),
        "TruncNormal inside [a, b]"
    );
    // Closed form of N(0.2, 1) truncated to [-0.5, 1]: α = -0.7, β = 0.8.
    let (al, be) = (-0.7f64, 0.8f64);
    let pdf = |x: f64| (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
    // Φ(0.8) − Φ(−0.7) with Φ from a fine trapezoid rule.
    let z = {
        let k = 20000;
        let h = (be - al) / k as f64;
        (0..=k)
            .map(|i| {
                let w = if i == 0 || i == k { 0.5 } else { 1.0 };
                w * pdf(al + i as f64 * h)
            })
            .sum::<f64>()
            * h
    };
    let tmean = 0.2 + (pdf(al) - pdf(be)) / z;
    let tvar = 1.0 + (al * pdf(al) - be * pdf(be)) / z - ((pdf(al) - pdf(be)) / z).powi(2);
    check("TruncNormal", &x, tmean, tvar.sqrt());

    let xavier = (2.0 / (fi + fo) as f64).sqrt();
    let x = Init::XavierNormal { gain: 1.5 }.sample(&mut r, fo, fi);
    check("XavierNormal", &x, 0.0, 1.5 * xavier);
    let x = Init::XavierUniform { gain: 2.0 }.sample(&mut r, fo, fi);
    let bound = 2.0 * (6.0 / (fi + fo) as f64).sqrt();
    assert!(x.iter().all(|&v| (v as f64).abs() <= bound * (1.0 + 1e-6)));
    check("XavierUniform", &x, 0.0, 2.0 * xavier);
    let kaiming = (2.0 / fi as f64).sqrt();
    let x = Init::KaimingNormal.sample(&mut r, fo, fi);
    check("KaimingNormal", &x, 0.0, kaiming);
    let x = Init::KaimingUniform.sample(&mut r, fo, fi);
    let bound = (6.0 / fi as f64).sqrt();
    assert!(x.iter().all(|&v| (v as f64).abs() <= bound * (1.0 + 1e-6)));
    check("KaimingUniform", &x, 0.0, kaiming);

    assert!(Init::Zeros.sample(&mut r, 3, 7).iter().all(|&v| v == 0.0));
    assert!(Init::Ones.sample(&mut r, 3, 7).iter().all(|&v| v == 1.0));
    assert_eq!(Init::Ones.sample(&mut r, 3, 7).len(), 21);
    // Megatron's default N(0, 0.02²).
    let x = Init::default().sample(&mut r, fo, fi);
    check("default", &x, 0.0, 0.02);
}

// ---------------------------------------------------------------------------
// Checkpoints
// ---------------------------------------------------------------------------

const LM: MlpLmConfig = MlpLmConfig {
    vocab: 50,
    hidden: 12,
    ffn: 20,
};

const NAMES: &[&str] = &[
    "embed.weight",
    "fc1.weight",
    "fc1.bias",
    "fc2.weight",
    "fc2.bias",
    "head.weight",
];

fn masters(model: &dyn Module) -> Vec<(String, Vec<f32>)> {
    model
        .named_parameters()
        .into_iter()
        .map(|(n, p)| (n, p.master().unwrap()))
        .collect()
}

/// A P = 4 model whose biases are non-zero too (one SGD step on random data).
fn trained_p4(rng: &mut Rng) -> MlpLanguageModel {
    let m = mesh(4);
    let mut model = MlpLanguageModel::new(&m, LM, rng.next_u64()).unwrap();
    let ids: Vec<i32> = (0..9).map(|_| rng.below(LM.vocab) as i32).collect();
    let tg: Vec<i32> = (0..9).map(|_| rng.below(LM.vocab) as i32).collect();
    model.forward(&ids, &tg).unwrap();
    model.backward().unwrap();
    Sgd::new(1.0).step(&mut model).unwrap();
    model.zero_grad();
    model
}

#[test]
fn checkpoint_saved_on_p4_loads_on_p3_and_p1() {
    let mut rng = Rng::fresh("ckpt_reshard");
    let src = trained_p4(&mut rng);
    let want = masters(&src);
    let names: Vec<&str> = want.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, NAMES);
    assert!(
        want.iter().all(|(_, v)| v.iter().any(|&x| x != 0.0)),
        "every parameter moved"
    );
    let bytes = to_safetensors_bytes(&src).unwrap();
    // The file holds the master tensors under those names, F32, logical shapes.
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    for ((name, p), (_, v)) in src.named_parameters().iter().zip(&want) {
        let t = st.tensor(name).unwrap();
        assert_eq!(t.dtype(), Dtype::F32);
        assert_eq!(t.shape(), p.shape());
        assert_eq!(bytemuck::pod_collect_to_vec::<u8, f32>(t.data()), *v);
    }
    for &p in &[3, 1] {
        let mut dst = MlpLanguageModel::new(&mesh(p), LM, 12345).unwrap();
        from_safetensors_bytes(&mut dst, &bytes).unwrap();
        assert_eq!(masters(&dst), want, "bytes loaded onto P={p}");
    }
    // Through a file as well.
    let path = std::env::temp_dir().join(format!(
        "wgpu-tp-ckpt-{}-{}.safetensors",
        std::process::id(),
        rng.next_u64()
    ));
    save_safetensors(&src, &path).unwrap();
    let mut dst = MlpLanguageModel::new(&mesh(3), LM, 777).unwrap();
    let loaded = load_safetensors(&mut dst, &path);
    let _ = std::fs::remove_file(&path);
    loaded.unwrap();
    assert_eq!(masters(&dst), want, "file loaded onto P=3");
    assert!(matches!(
        load_safetensors(&mut dst, std::env::temp_dir().join("wgpu-tp-no-such-file")),
        Err(Error::Io(_))
    ));
}

/// Serialise `(name, dtype, shape, bytes)` with the safetensors crate directly.
fn write(tensors: &[(String, Dtype, Vec<usize>, Vec<u8>)]) -> Vec<u8> {
    let views: Vec<(String, TensorView)> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize(views, None).unwrap()
}

#[test]
fn bad_checkpoints_are_errors_and_leave_the_model_unchanged_p3() {
    let mut rng = Rng::fresh("ckpt_bad");
    let src = trained_p4(&mut rng);
    let good: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = src
        .named_parameters()
        .into_iter()
        .map(|(n, p)| {
            let v = p.master().unwrap();
            (
                n,
                Dtype::F32,
                p.shape().to_vec(),
                bytemuck::cast_slice(&v).to_vec(),
            )
        })
        .collect();
    let mut dst = MlpLanguageModel::new(&mesh(3), LM, 99).unwrap();
    let before = masters(&dst);
    // Sanity: the good file loads (on a scratch model).
    let mut scratch = MlpLanguageModel::new(&mesh(3), LM, 98).unwrap();
    from_safetensors_bytes(&mut scratch, &write(&good)).unwrap();

    let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
    // Missing: drop the last tensor (after others that would load fine).
    cases.push(("missing head.weight".into(), write(&good[..5])));
    // Wrong shape: fc2.weight transposed.
    let mut t = good.clone();
    t[3].2 = vec![t[3].2[1], t[3].2[0]];
    cases.push(("wrong shape".into(), write(&t)));
    // Wrong dtypes: fc1.bias as F64 (same element count), head.weight as F16.
    let mut t = good.clone();
    let b: Vec<f64> = bytemuck::pod_collect_to_vec::<u8, f32>(&t[2].3)
        .iter()
        .map(|&v| v as f64)
        .collect();
    t[2].1 = Dtype::F64;
    t[2].3 = bytemuck::cast_slice(&b).to_vec();
    cases.push(("F64 tensor".into(), write(&t)));
    let mut t = good.clone();
    let n = t[5].3.len() / 4;
    t[5].1 = Dtype::F16;
    t[5].3 = vec![0u8; n * 2];
    cases.push(("F16 tensor".into(), write(&t)));
    // An extra tensor.
    let mut t = good.clone();
    t.push(("fc3.weight".into(), Dtype::F32, vec![2], vec![0u8; 8]));
    cases.push(("extra tensor".into(), write(&t)));
    // Not a safetensors file at all.
    cases.push(("garbage".into(), b"not a checkpoint".to_vec()));

    for (what, bytes) in cases {
        match from_safetensors_bytes(&mut dst, &bytes) {
            Err(Error::Checkpoint(msg)) => eprintln!("{what}: {msg}"),
            other => panic!("{what}: expected Error::Checkpoint, got {other:?}"),
        }
        assert_eq!(masters(&dst), before, "{what}: the model changed");
    }
}

#[test]
fn one_optimiser_on_two_models_with_clashing_names_is_an_error() {
    use wgpu_tp::nn::{ColumnParallelConfig, ColumnParallelLinear, InitRng, Sgd};
    let m = mesh(2);
    let mut rng = InitRng::new(3);
    let mut a = ColumnParallelLinear::new(&m, ColumnParallelConfig::new(4, 6), &mut rng).unwrap();
    let mut b = ColumnParallelLinear::new(&m, ColumnParallelConfig::new(5, 6), &mut rng).unwrap();
    for (layer, inp) in [(&mut a, 4usize), (&mut b, 5)] {
        let x =
            DTensor::from_host(&m, &[2, inp], &vec![1.0; 2 * inp], Placement::Replicate).unwrap();
        let y = layer.forward(&x).unwrap();
        let dy = DTensor::from_host(&m, &[2, 6], &[1.0; 12], y.placement()).unwrap();
        layer.backward(&dy).unwrap();
    }
    let mut opt = Sgd::new(0.1).with_momentum(0.9);
    opt.step(&mut a).unwrap();
    let before = b.master_weight().unwrap();
    let err = opt.step(&mut b).unwrap_err();
    assert!(err.to_string().contains("one optimiser per model"), "{err}");
    assert_eq!(
        b.master_weight().unwrap(),
        before,
        "the refused step changed nothing"
    );
}
