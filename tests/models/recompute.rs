//! Activation recomputation (`Decoder::set_recompute`): the loss and every
//! gradient bit-identical to the plain tape for every family (GPT-2 with
//! its dropouts on), at P = 1..4, with LoRA adapters on a frozen base, and
//! through pipeline stages.

use std::path::{Path, PathBuf};

use wgpu_tp::Mesh;
use wgpu_tp::models::{CausalLm, LlamaConfig};
use wgpu_tp::nn::{LoraConfig, Params, Pipeline, PipelineStage};

use crate::util::{Rng, f32_bits, mesh, meshes};

fn dir(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

/// The loss's bits and every gradient's bits by name.
fn pass(
    model: &CausalLm,
    ids: &[i32],
    targets: &[i32],
    seq: usize,
) -> (u32, Vec<(String, Vec<u32>)>) {
    let loss = model.loss(ids, targets, seq).unwrap();
    let l = loss.to_host().unwrap()[0].to_bits();
    loss.backward().unwrap();
    let grads = model
        .named_parameters()
        .into_iter()
        .filter_map(|(n, p)| p.master_grad().unwrap().map(|g| (n, f32_bits(&g))))
        .collect();
    (l, grads)
}

fn same(what: &str, m: &mut CausalLm, ids: &[i32], targets: &[i32], seq: usize) {
    m.set_mode(true, 3);
    m.set_recompute(false);
    let plain = pass(m, ids, targets, seq);
    m.zero_grad();
    m.set_recompute(true);
    let again = pass(m, ids, targets, seq);
    m.zero_grad();
    assert_eq!(plain.0, again.0, "{what}: loss bits");
    assert!(!plain.1.is_empty(), "{what}: some gradients");
    assert_eq!(
        plain.1.len(),
        again.1.len(),
        "{what}: the same parameters get gradients"
    );
    for ((n, g), (_, h)) in plain.1.iter().zip(&again.1) {
        assert!(
            g == h,
            "{what}: {n}'s gradient is not bit-identical with recomputation"
        );
    }
}

#[test]
fn recomputation_gives_the_plain_tapes_gradients_bit_for_bit() {
    let mut rng = Rng::fresh("recompute");
    let fixtures = [
        "hf/llama_gqa",
        "hf/smollm2_like",
        "hf/qwen2_bias_bf16",
        "hf/qwen3_qknorm",
        "hf/mistral_window",
        "hf/gemma3_sliding",
        "hf/gemma2_softcap",
        "hf/phi3_longrope",
        "gpt2_tiny/f32",
    ];
    let seq = 7;
    for rel in fixtures {
        for p in 1..=4 {
            let m = mesh(p);
            let mut model = CausalLm::from_pretrained(&m, dir(rel)).unwrap();
            let vocab = model.decoder_config().spec().vocab;
            let ids: Vec<i32> = (0..2 * seq).map(|_| rng.below(vocab) as i32).collect();
            let targets: Vec<i32> = (0..2 * seq).map(|_| rng.below(vocab) as i32).collect();
            same(&format!("{rel} P={p}"), &mut model, &ids, &targets, seq);
        }
    }
    // Adapters on a frozen base: the blocks' input is not tracked.
    for (transport, m) in meshes(3) {
        let mut model = CausalLm::from_pretrained(&m, dir("hf/llama_gqa")).unwrap();
        model.load_adapter(dir("lora/llama_gqa")).unwrap();
        let ids: Vec<i32> = (0..14).map(|_| rng.below(61) as i32).collect();
        let targets: Vec<i32> = (0..14).map(|_| rng.below(61) as i32).collect();
        same(
            &format!("llama_gqa LoRA P=3 {transport}"),
            &mut model,
            &ids,
            &targets,
            7,
        );
    }
}

#[test]
fn recomputation_through_pipeline_stages_is_bit_identical() {
    let mut rng = Rng::fresh("recompute pipeline");
    let seed = rng.next_u64();
    let (seq, rows) = (4, 4);
    let ids: Vec<i32> = (0..rows * seq).map(|_| rng.below(13) as i32).collect();
    let targets: Vec<i32> = (0..rows * seq).map(|_| rng.below(13) as i32).collect();
    let config = LlamaConfig::new(13, 16, 24, 3, 4, 2);
    let m: Mesh = mesh(4).with_axes(&[("pp", 2), ("tp", 2)]).unwrap();
    let p = Pipeline::new(&m, "pp", 2).unwrap();
    let run = |recompute: bool| {
        let mut stages: Vec<CausalLm> = m
            .axis_groups("tp")
            .unwrap()
            .iter()
            .map(|g| {
                let mut s =
                    CausalLm::stage(g, config.clone(), seed, &p, Default::default()).unwrap();
                s.add_lora(&LoraConfig::new(2, 4.0, &["q_proj", "o_proj", "up_proj"]))
                    .unwrap();
                // Non-zero B, the same in both runs: a step of updates.
                for (_, prm) in s.named_parameters_mut() {
                    if !prm.is_frozen() {
                        let n = prm.shape().iter().product::<usize>();
                        let v: Vec<f32> =
                            (0..n).map(|i| ((i * 7 % 11) as f32 - 5.0) * 0.05).collect();
                        prm.load_master(&v).unwrap();
                    }
                }
                s.set_recompute(recompute);
                s
            })
            .collect();
        let mut refs: Vec<&mut dyn PipelineStage> = stages
            .iter_mut()
            .map(|s| s as &mut dyn PipelineStage)
            .collect();
        let batches = vec![(&ids[..], &targets[..]); 2];
        let losses = p.forward_backward(&mut refs, &batches, seq).unwrap();
        let grads: Vec<(String, Vec<u32>)> = stages
            .iter()
            .flat_map(|s| {
                s.named_parameters()
                    .into_iter()
                    .filter_map(|(n, p)| p.master_grad().unwrap().map(|g| (n, f32_bits(&g))))
                    .collect::<Vec<_>>()
            })
            .collect();
        (losses, grads)
    };
    let (plain, again) = (run(false), run(true));
    assert_eq!(plain.0, again.0, "losses");
    assert!(plain.1.len() >= 6, "adapter gradients: {}", plain.1.len());
    assert_eq!(plain.1, again.1, "gradients through the stages");
}
