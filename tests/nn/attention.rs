//! `Gpt2Attention` as forward code on the tape (5 heads of 2 in a
//! width of 7, so P = 2, 3, 4 split the heads unevenly and P = 8 leaves
//! ranks without one): output, input gradient and every parameter's
//! gradient against an f64 reference, plain and sequence-parallel, on both
//! transports, with one collective of each pair each way; probability
//! dropout gives the same numbers at every world size; cached decoding
//! under `no_grad` equals the full forward's rows and communicates only
//! `c_proj`'s all-reduce.

use std::collections::BTreeMap;

use crate::util::transformer::{attention, attention_backward, linear, linear_backward};
use crate::util::{Rng, WORLD_SIZES, assert_close, count_lock, counting_meshes, mesh};
use wgpu_tp::models::{Gpt2Attention, Gpt2AttentionConfig};
use wgpu_tp::nn::{InitRng, KvCache, Params, Step};
use wgpu_tp::{Collective, DTensor, Mesh, Placement, no_grad};

const TOL: f64 = 1e-5;
const HIDDEN: usize = 7;
const HEADS: usize = 5;
const D: usize = 2;
const SEQ: usize = 3;
const BATCH: usize = 2;

/// A layer with random non-zero biases (so their gradients and the bias
/// paths matter).
fn layer(m: &Mesh, sp: bool, dropout: f32, seed: u64) -> Gpt2Attention {
    let mut cfg = Gpt2AttentionConfig::new(HIDDEN, HEADS);
    (cfg.head_dim, cfg.sequence_parallel) = (D, sp);
    (cfg.dropout, cfg.dropout_seed, cfg.dropout_layer) = (dropout, seed, 4);
    let mut attn = Gpt2Attention::new(m, cfg, &mut InitRng::new(seed)).unwrap();
    let mut rng = Rng::seeded(seed);
    for (name, p) in attn.named_parameters_mut() {
        if name.ends_with("bias") {
            let v: Vec<f32> = rng.vec(p.shape()[0]).iter().map(|v| 0.1 * v).collect();
            p.load_master(&v).unwrap();
        }
    }
    attn
}

/// Master values (f64) by name.
fn masters(attn: &Gpt2Attention) -> BTreeMap<String, Vec<f64>> {
    let f = |p: &wgpu_tp::nn::Parameter| p.master().unwrap().iter().map(|&v| v as f64).collect();
    attn.named_parameters()
        .into_iter()
        .map(|(n, p)| (n, f(p)))
        .collect()
}

/// f64 `(y, dx, gradients by name)` of the layer.
fn reference(
    p: &BTreeMap<String, Vec<f64>>,
    x: &[f64],
    dy: &[f64],
) -> (Vec<f64>, Vec<f64>, BTreeMap<String, Vec<f64>>) {
    let (n, qkv_w, hd) = (BATCH * SEQ, 3 * HEADS * D, HEADS * D);
    let qkv = linear(x, &p["c_attn.weight"], &p["c_attn.bias"], n, HIDDEN, qkv_w);
    let (out, probs) = attention(&qkv, BATCH, SEQ, HEADS, D);
    let y = linear(&out, &p["c_proj.weight"], &p["c_proj.bias"], n, hd, HIDDEN);
    let (d_out, dwp, dbp) = linear_backward(&out, &p["c_proj.weight"], dy, n, hd, HIDDEN);
    let d_qkv = attention_backward(&qkv, &probs, &d_out, BATCH, SEQ, HEADS, D);
    let (dx, dwa, dba) = linear_backward(x, &p["c_attn.weight"], &d_qkv, n, HIDDEN, qkv_w);
    let grads = [
        ("c_attn.weight", dwa),
        ("c_attn.bias", dba),
        ("c_proj.weight", dwp),
        ("c_proj.bias", dbp),
    ];
    let grads = grads.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    (y, dx, grads)
}

/// Calls since the last reset: (all-reduce, all-gather, reduce-scatter).
fn counts(m: &Mesh) -> (u64, u64, u64) {
    let c = |k| m.comm_calls(k);
    (
        c(Collective::AllReduce),
        c(Collective::AllGather),
        c(Collective::ReduceScatter),
    )
}

/// Forward of a tracked x, backward with dy: `(y, dx)`.
fn run(attn: &mut Gpt2Attention, x: &DTensor, dy: &[f32]) -> (DTensor, DTensor) {
    let x = x.requires_grad();
    let y = attn.forward(&x, Step::Sequences(SEQ)).unwrap();
    let dyd = DTensor::from_host(x.mesh(), y.shape(), dy, y.placement()).unwrap();
    y.backward_with(&dyd).unwrap();
    (y, x.grad().expect("x's gradient"))
}

#[test]
fn attention_matches_f64_on_the_tape_plain_and_sequence_parallel() {
    let _counting = count_lock();
    let mut rng = Rng::fresh("attention_layer");
    let n = BATCH * SEQ;
    let (x, dy, seed) = (rng.vec(n * HIDDEN), rng.vec(n * HIDDEN), rng.next_u64());
    let wide = |v: &[f32]| v.iter().map(|&a| a as f64).collect::<Vec<_>>();
    for sp in [false, true] {
        for &p in WORLD_SIZES {
            for (transport, m) in counting_meshes(p) {
                let what = format!("attention P={p} sp={sp} {transport}");
                // `&mut`: forward takes `&mut self` until the linear layers are taped.
                let attn = &mut layer(&m, sp, 0.0, seed);
                let place = if sp {
                    Placement::Shard(0)
                } else {
                    Placement::Replicate
                };
                let xd = DTensor::from_host(&m, &[n, HIDDEN], &x, place)
                    .unwrap()
                    .requires_grad();
                m.reset_comm_stats();
                let y = attn.forward(&xd, Step::Sequences(SEQ)).unwrap();
                let fwd = counts(&m);
                let dyd = DTensor::from_host(&m, &[n, HIDDEN], &dy, place).unwrap();
                m.reset_comm_stats();
                y.backward_with(&dyd).unwrap();
                let bwd = counts(&m);
                match (p, sp) {
                    (1, _) => assert_eq!((fwd, bwd), ((0, 0, 0), (0, 0, 0)), "{what}"),
                    (_, false) => assert_eq!((fwd, bwd), ((1, 0, 0), (1, 0, 0)), "{what}"),
                    (_, true) => assert_eq!((fwd, bwd), ((0, 1, 1), (0, 1, 1)), "{what}"),
                }
                let (want_y, want_dx, want) = reference(&masters(attn), &wide(&x), &wide(&dy));
                assert_eq!(y.placement(), place, "{what}");
                assert_close(&format!("{what} y"), &y.to_host().unwrap(), &want_y, TOL);
                let dx = xd.grad().unwrap();
                assert_close(&format!("{what} dx"), &dx.to_host().unwrap(), &want_dx, TOL);
                for (name, param) in attn.named_parameters() {
                    let g = param.master_grad().unwrap().expect("a gradient");
                    assert_close(&format!("{what} d{name}"), &g, &want[&name], TOL);
                }
            }
        }
    }
}

#[test]
fn probability_dropout_gives_the_same_numbers_at_every_world_size() {
    let mut rng = Rng::fresh("attention_dropout");
    let n = BATCH * SEQ;
    let (x, dy, seed) = (rng.vec(n * HIDDEN), rng.vec(n * HIDDEN), rng.next_u64());
    // (y, dx, parameter gradients) at P = 1.
    type Run = (Vec<f32>, Vec<f32>, Vec<Vec<f32>>);
    let mut serial: Option<Run> = None;
    for p in [1, 2, 3] {
        let m = mesh(p);
        let mut attn = layer(&m, false, 0.3, seed);
        attn.set_mode(true, 5);
        let xd = DTensor::from_host(&m, &[n, HIDDEN], &x, Placement::Replicate).unwrap();
        let (y, dx) = run(&mut attn, &xd, &dy);
        let grads = attn
            .named_parameters()
            .iter()
            .map(|(_, p)| p.master_grad().unwrap().unwrap())
            .collect();
        let got = (y.to_host().unwrap(), dx.to_host().unwrap(), grads);
        match &serial {
            None => {
                // Evaluation mode drops nothing: dropout did change the output.
                attn.set_mode(false, 5);
                let plain = no_grad(|| attn.forward(&xd, Step::Sequences(SEQ))).unwrap();
                assert_ne!(plain.to_host().unwrap(), got.0, "dropout dropped something");
                serial = Some(got);
            }
            Some(s) => {
                let close = |what: &str, a: &[f32], b: &[f32]| {
                    let b: Vec<f64> = b.iter().map(|&v| v as f64).collect();
                    assert_close(&format!("P={p} {what} vs P=1"), a, &b, TOL);
                };
                close("y", &got.0, &s.0);
                close("dx", &got.1, &s.1);
                for (a, b) in got.2.iter().zip(&s.2) {
                    close("gradient", a, b);
                }
            }
        }
    }
}

#[test]
fn cached_decoding_under_no_grad_equals_the_full_rows_p1_2_3_4() {
    let _counting = count_lock();
    let mut rng = Rng::fresh("attention_decode_layer");
    let (total, seed) = (5, rng.next_u64());
    let x = rng.vec(total * HIDDEN);
    for p in [1, 2, 3, 4] {
        for (transport, m) in counting_meshes(p) {
            let what = format!("decode P={p} {transport}");
            let attn = layer(&m, false, 0.0, seed);
            let xd = DTensor::from_host(&m, &[total, HIDDEN], &x, Placement::Replicate).unwrap();
            let full = no_grad(|| attn.forward(&xd, Step::Sequences(total)))
                .unwrap()
                .to_host()
                .unwrap();
            let mut cache = KvCache::default();
            let mut start = 0;
            for n in [2, 1, 2] {
                let rows = &x[start * HIDDEN..(start + n) * HIDDEN];
                let step = DTensor::from_host(&m, &[n, HIDDEN], rows, Placement::Replicate);
                m.reset_comm_stats();
                let y = no_grad(|| attn.forward(&step.unwrap(), Step::Cached(&mut cache))).unwrap();
                let calls = if p > 1 { (1, 0, 0) } else { (0, 0, 0) };
                assert_eq!(counts(&m), calls, "{what}: only c_proj's all-reduce");
                assert!(!y.is_tracked(), "{what}: nothing recorded");
                let want: Vec<f64> = full[start * HIDDEN..(start + n) * HIDDEN]
                    .iter()
                    .map(|&v| v as f64)
                    .collect();
                assert_close(
                    &format!("{what} rows {start}.."),
                    &y.to_host().unwrap(),
                    &want,
                    TOL,
                );
                start += n;
                assert_eq!(cache.len(), start, "{what}");
            }
        }
    }
}
