//! Models loaded with weights kept in bf16 (`LoadOptions::weights`), GPT-2
//! and the Llama family, at P = 1..4 (both transports at 2): every weight
//! matrix is bf16 and everything else f32; logits (prefill: the widened
//! GEMM) and cached greedy decoding (the small-M GEMM reading bf16, the
//! lookup and the tied head as stored) equal, bit for bit, an f32 model
//! whose weights were rounded to bf16 on the host; and greedy tokens equal
//! the unrounded f32 model's wherever its logits are not within bf16's
//! rounding of a tie.

use std::path::{Path, PathBuf};

use wgpu_tp::models::{CausalLm, LoadOptions};
use wgpu_tp::nn::{AdamW, Params, Sampling};
use wgpu_tp::{DType, Mesh, no_grad};

use crate::util::{mesh, meshes, round_bf16};

/// (directory, prompt): GPT-2's tiny fixture and three of the Llama family
/// (GQA with an untied head; tied 9/3 heads; Qwen2's q/k/v biases).
fn fixtures() -> Vec<(PathBuf, Vec<i32>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut out = vec![(root.join("gpt2_tiny/f32"), vec![6, 27, 18, 25])];
    for name in ["llama_gqa", "smollm2_like", "qwen2_bias_bf16"] {
        out.push((root.join("hf").join(name), vec![3, 17, 5, 40, 11]));
    }
    out
}

fn load(mesh: &Mesh, dir: &Path, dtype: DType) -> CausalLm {
    CausalLm::from_pretrained_with(mesh, dir, LoadOptions::default().weights(dtype)).unwrap()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The first `n` greedy tokens after `prompt`, cached (past any eos id).
fn greedy(m: &mut CausalLm, prompt: &[i32], n: usize) -> Vec<i32> {
    let run = wgpu_tp::nn::generate(&*m, prompt, n, Sampling::Greedy, &[], |_| Ok(()));
    pollster::block_on(run).unwrap()
}

#[test]
fn bf16_weights_equal_f32_weights_rounded_to_bf16() {
    for (dir, prompt) in fixtures() {
        for p in 1..=4 {
            // Both transports at P = 2; P = 1 simulated, P = 3 and 4 on the
            // shared device (one device compiles the bf16 pipelines once).
            let all = meshes(p);
            let picked = match p {
                1 => &all[..1],
                2 => &all[..],
                _ => &all[1..],
            };
            for (transport, mesh) in picked {
                let what = format!("{} P={p} {transport}", dir.display());
                let mut narrow = load(mesh, &dir, DType::BF16);
                let mut wide = load(mesh, &dir, DType::F32);
                for (name, param) in wide.named_parameters_mut() {
                    if param.shape().len() >= 2 {
                        let m = param.master().unwrap();
                        param.load_master(&round_bf16(&m)).unwrap();
                    }
                    let _ = name;
                }
                for ((name, n), (_, w)) in narrow
                    .named_parameters()
                    .into_iter()
                    .zip(wide.named_parameters())
                {
                    let want = if n.shape().len() >= 2 {
                        DType::BF16
                    } else {
                        DType::F32
                    };
                    assert_eq!(n.value.dtype(), want, "{what}: {name}");
                    assert_eq!(
                        bits(&n.master().unwrap()),
                        bits(&w.master().unwrap()),
                        "{what}: {name}"
                    );
                }
                // Prefill-sized products (more rows than the small-M kernel takes).
                let ids: Vec<i32> = (0..14).map(|i| (i * 7 + 3) % 30).collect();
                let a = no_grad(|| narrow.logits(&ids, 7)).unwrap();
                let b = no_grad(|| wide.logits(&ids, 7)).unwrap();
                assert_eq!(
                    bits(&a.to_host().unwrap()),
                    bits(&b.to_host().unwrap()),
                    "{what}: logits"
                );
                let (a, b) = (
                    greedy(&mut narrow, &prompt, 8),
                    greedy(&mut wide, &prompt, 8),
                );
                assert_eq!(a, b, "{what}: cached greedy tokens");
            }
        }
    }
}

/// Greedy tokens of the bf16 model equal the unrounded f32 model's up to
/// the first step whose top two f32 logits are within 2 % of the largest
/// logit (bf16 keeps 8 bits: about 0.4 % per weight).
#[test]
fn bf16_greedy_decoding_equals_f32_away_from_ties() {
    let m = mesh(2);
    for (dir, prompt) in fixtures() {
        let mut narrow = load(&m, &dir, DType::BF16);
        let mut wide = load(&m, &dir, DType::F32);
        let n = 8;
        let want = greedy(&mut wide, &prompt, n);
        let got = greedy(&mut narrow, &prompt, n);
        // Every position's f32 logits along the f32 continuation.
        let seq: Vec<i32> = prompt.iter().chain(&want).copied().collect();
        let logits = no_grad(|| wide.logits(&seq, seq.len()))
            .unwrap()
            .to_host()
            .unwrap();
        let vocab = wide.vocab_size();
        let mut compared = 0;
        for step in 0..n {
            let row = &logits[(prompt.len() - 1 + step) * vocab..][..vocab];
            let mut sorted = row.to_vec();
            sorted.sort_by(|a, b| b.total_cmp(a));
            let scale = row.iter().fold(0f32, |a, v| a.max(v.abs()));
            if sorted[0] - sorted[1] < 0.02 * scale {
                break;
            }
            assert_eq!(got[step], want[step], "{}: step {step}", dir.display());
            compared += 1;
        }
        eprintln!("{}: {compared} of {n} greedy steps compared", dir.display());
    }
}

/// A model loaded in bf16 is for generation: an optimiser refuses it with
/// an error saying how to train, and nothing changes; stored back as f32
/// (exact) it trains.
#[test]
fn bf16_weights_refuse_optimiser_steps_until_stored_as_f32() {
    let m = mesh(2);
    let dir = &fixtures()[0].0;
    let mut model = load(&m, dir, DType::BF16);
    let ids: Vec<i32> = (0..14).map(|i| (i * 5 + 1) % 30).collect();
    assert_eq!(model.model_type(), "gpt2", "the first fixture is GPT-2");
    let gpt = &mut model;
    let before: Vec<Vec<f32>> = gpt
        .named_parameters()
        .iter()
        .map(|(_, p)| p.master().unwrap())
        .collect();
    gpt.loss(&ids, &ids, 7).unwrap().backward().unwrap();
    let mut opt = AdamW::new(1e-2);
    let err = opt.step(gpt).unwrap_err();
    assert!(
        err.to_string().contains("bf16") && err.to_string().contains("f32"),
        "{err}"
    );
    let after: Vec<Vec<f32>> = gpt
        .named_parameters()
        .iter()
        .map(|(_, p)| p.master().unwrap())
        .collect();
    assert_eq!(before, after);
    gpt.store_weights_as(DType::F32).unwrap();
    assert_eq!(
        gpt.named_parameters()
            .iter()
            .map(|(_, p)| p.master().unwrap())
            .collect::<Vec<_>>(),
        before
    );
    gpt.loss(&ids, &ids, 7).unwrap().backward().unwrap();
    opt.step(gpt).unwrap();
}
