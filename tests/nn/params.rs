//! `#[derive(Params)]` and the `Params` impls: a user struct built from the
//! public layers (nested struct, `Vec` of layers, `Option`, `Box`, skipped
//! and renamed fields) lists exactly the expected names, in field order, and
//! the mutable list reaches the real parameters; `Gpt`'s checkpoint names are
//! unchanged; one optimiser steps a `vec![&mut p1, &mut p2]`.

use crate::util::mesh;
use wgpu_tp::models::{CausalLm, Gpt2Config};
use wgpu_tp::nn::{
    ColumnParallelConfig, ColumnParallelLinear, Embedding, EmbeddingConfig, InitRng, LayerNorm,
    MlpConfig, NormConfig, ParallelMlp, Parameter, Params, RowParallelConfig, RowParallelLinear,
    Sgd,
};
use wgpu_tp::{DTensor, Mesh, Placement};

/// A nested struct with a renamed field.
#[derive(Params)]
struct Head {
    norm: LayerNorm,
    #[params(rename = "proj")]
    out: ColumnParallelLinear,
}

#[derive(Params)]
struct Net {
    embed: Embedding,
    blocks: Vec<ParallelMlp>,
    head: Head,
    extra: Option<Box<RowParallelLinear>>,
    missing: Option<RowParallelLinear>,
    #[params(skip)]
    steps: u64,
    #[params(skip)]
    label: String,
}

fn net(m: &Mesh) -> Net {
    let mut rng = InitRng::new(5);
    let mut no_bias = MlpConfig::new(4, 6);
    no_bias.bias = false;
    let mut out = ColumnParallelConfig::new(4, 10);
    out.bias = false;
    Net {
        embed: Embedding::new(m, EmbeddingConfig::new(10, 4), &mut rng).unwrap(),
        blocks: vec![
            ParallelMlp::new(m, MlpConfig::new(4, 6), &mut rng).unwrap(),
            ParallelMlp::new(m, no_bias, &mut rng).unwrap(),
        ],
        head: Head {
            norm: LayerNorm::new(m, NormConfig::new(4)).unwrap(),
            out: ColumnParallelLinear::new(m, out, &mut rng).unwrap(),
        },
        extra: Some(Box::new(
            RowParallelLinear::new(m, RowParallelConfig::new(4, 4), &mut rng).unwrap(),
        )),
        missing: None,
        steps: 0,
        label: "net".into(),
    }
}

const NET_NAMES: [&str; 12] = [
    "embed.weight",
    "blocks.0.c_fc.weight",
    "blocks.0.c_fc.bias",
    "blocks.0.c_proj.weight",
    "blocks.0.c_proj.bias",
    "blocks.1.c_fc.weight",
    "blocks.1.c_proj.weight",
    "head.norm.weight",
    "head.norm.bias",
    "head.proj.weight",
    "extra.weight",
    "extra.bias",
];

fn names(p: &dyn Params) -> Vec<String> {
    p.named_parameters().into_iter().map(|(n, _)| n).collect()
}

#[test]
fn derived_names_follow_fields_skip_rename_and_options_p2() {
    let m = mesh(2);
    let mut net = net(&m);
    assert_eq!(names(&net), NET_NAMES);
    let mutable: Vec<String> = net
        .named_parameters_mut()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(mutable, NET_NAMES, "same names and order, mutable");
    // Under a prefix, as a field of a bigger model would be.
    let mut under = Vec::new();
    net.visit_params("model", &mut |n, _| under.push(n));
    let want: Vec<String> = NET_NAMES.iter().map(|n| format!("model.{n}")).collect();
    assert_eq!(under, want);
    assert_eq!((net.steps, net.label.as_str()), (0, "net"));
    // The listed parameters are the layers' own, not copies.
    let listed = net.named_parameters();
    assert!(std::ptr::eq(listed[0].1, net.embed.weight()));
    assert!(std::ptr::eq(listed[9].1, &net.head.out.weight));
    assert!(std::ptr::eq(
        listed[11].1,
        net.extra.as_ref().unwrap().bias.as_ref().unwrap()
    ));
}

#[test]
fn mutation_through_named_parameters_mut_reaches_the_layers_p2() {
    let m = mesh(2);
    let mut net = net(&m);
    // Parameter k becomes all k (through `&mut dyn Params`: object safe).
    let model: &mut dyn Params = &mut net;
    for (k, (_, p)) in model.named_parameters_mut().into_iter().enumerate() {
        let n: usize = p.shape().iter().product();
        p.load_master(&vec![k as f32; n]).unwrap();
    }
    let all = |v: Vec<f32>, k: f32| v.iter().all(|&x| x == k);
    assert!(all(net.embed.master_weight().unwrap(), 0.0));
    assert!(all(
        net.blocks[0].c_proj.master_bias().unwrap().unwrap(),
        4.0
    ));
    assert!(all(net.blocks[1].c_proj.master_weight().unwrap(), 6.0));
    assert!(all(
        net.head.norm.bias.as_ref().unwrap().master().unwrap(),
        8.0
    ));
    assert!(all(net.head.out.master_weight().unwrap(), 9.0));
    assert!(all(
        net.extra.as_ref().unwrap().master_bias().unwrap().unwrap(),
        11.0
    ));
    // Gradients everywhere, then the provided zero_grad clears them all.
    for (_, p) in net.named_parameters_mut() {
        let g = DTensor::from_host(
            p.value.mesh(),
            p.shape(),
            &vec![1.0; p.shape().iter().product()],
            p.value.placement(),
        )
        .unwrap();
        p.accumulate_grad(g).unwrap();
    }
    assert!(net.head.out.weight.grad().is_some());
    net.zero_grad();
    assert!(
        net.named_parameters()
            .iter()
            .all(|(_, p)| p.grad().is_none())
    );
}

#[test]
fn gpt_names_are_the_checkpoint_names_p2() {
    let m = mesh(2);
    let mut gpt = CausalLm::new(&m, Gpt2Config::new(11, 8, 12, 3, 2), 0).unwrap();
    let want = [
        "wte.weight",
        "wpe.weight",
        "h.0.ln_1.weight",
        "h.0.ln_1.bias",
        "h.0.attn.c_attn.weight",
        "h.0.attn.c_attn.bias",
        "h.0.attn.c_proj.weight",
        "h.0.attn.c_proj.bias",
        "h.0.ln_2.weight",
        "h.0.ln_2.bias",
        "h.0.mlp.c_fc.weight",
        "h.0.mlp.c_fc.bias",
        "h.0.mlp.c_proj.weight",
        "h.0.mlp.c_proj.bias",
        "h.1.ln_1.weight",
        "h.1.ln_1.bias",
        "h.1.attn.c_attn.weight",
        "h.1.attn.c_attn.bias",
        "h.1.attn.c_proj.weight",
        "h.1.attn.c_proj.bias",
        "h.1.ln_2.weight",
        "h.1.ln_2.bias",
        "h.1.mlp.c_fc.weight",
        "h.1.mlp.c_fc.bias",
        "h.1.mlp.c_proj.weight",
        "h.1.mlp.c_proj.bias",
        "ln_f.weight",
        "ln_f.bias",
    ];
    assert_eq!(names(&gpt), want);
    let mutable: Vec<String> = gpt
        .named_parameters_mut()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(mutable, want);
}

fn param(m: &Mesh, shape: &[usize], v: &[f32], placement: Placement) -> Parameter {
    Parameter::from_master(m, shape, v, placement, 1).unwrap()
}

fn grad(p: &mut Parameter, g: &[f32]) {
    let g = DTensor::from_host(p.value.mesh(), p.shape(), g, p.value.placement()).unwrap();
    p.accumulate_grad(g).unwrap();
}

#[test]
fn one_optimiser_steps_a_vec_of_borrowed_parameters_p2() {
    let m = mesh(2);
    let w: Vec<f32> = (0..12).map(|i| i as f32).collect();
    let mut p1 = param(&m, &[4, 3], &w, Placement::Shard(0));
    let mut p2 = param(&m, &[3], &[1.0, 2.0, 3.0], Placement::Replicate);
    let mut other = param(&m, &[3], &[5.0; 3], Placement::Replicate);
    grad(&mut p1, &[1.0; 12]);
    grad(&mut p2, &[2.0, 4.0, 6.0]);
    grad(&mut other, &[1.0; 3]);
    let mut set = vec![&mut p1, &mut p2];
    assert_eq!(names(&set), ["0", "1"], "a list is named by index");
    let mut sgd = Sgd::new(0.5);
    sgd.step(&mut set).unwrap();
    set.zero_grad();
    let want: Vec<f32> = w.iter().map(|x| x - 0.5).collect();
    assert_eq!(p1.master().unwrap(), want);
    assert_eq!(p2.master().unwrap(), [0.0; 3]);
    assert!(p1.grad().is_none() && p2.grad().is_none());
    // A parameter outside the set keeps its value and gradient.
    assert_eq!(other.master().unwrap(), [5.0; 3]);
    assert!(other.grad().is_some());
    // A single borrowed parameter and an array of them are sets too.
    sgd.step(&mut [&mut other]).unwrap();
    assert_eq!(other.master().unwrap(), [4.5; 3]);
}
