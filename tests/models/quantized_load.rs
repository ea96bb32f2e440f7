//! Models quantized as they load (`LoadOptions::weights(DType::Quant(..))`)
//! from safetensors, for every family: each weight matrix holds exactly the
//! blocks llama.cpp's reference quantizer makes of the f32 weight (or its
//! fallback type where the row is no whole number of blocks), everything
//! else stays f32; logits equal an f32 model holding the dequantized
//! weights within 1e-5 at P = 1..3; the quantized weights are frozen while
//! an optimiser trains the rest.

use std::path::{Path, PathBuf};

use wgpu_tp::models::{CausalLm, LoadOptions, config_from_json};
use wgpu_tp::nn::{AdamW, Params};
use wgpu_tp::quant::{QuantType, dequantize_rows, quantize_rows};
use wgpu_tp::{DType, Mesh, no_grad};

use crate::util::{assert_close, mesh, meshes};

fn fixtures() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut out = vec![root.join("gpt2_tiny/f32")];
    for name in [
        "llama_gqa",
        "qwen2_bias_bf16",
        "gemma3_sliding",
        "phi3_longrope",
    ] {
        out.push(root.join("hf").join(name));
    }
    out
}

fn load(mesh: &Mesh, dir: &Path, dtype: DType) -> CausalLm {
    CausalLm::from_pretrained_with(mesh, dir, LoadOptions::default().weights(dtype)).unwrap()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Every family at sizes whose rows are whole K-quant blocks (256), with a
/// ragged 40-wide ffn in one: built from a seed, quantized after building.
fn configs() -> Vec<(&'static str, String)> {
    let llama = |t: &str, extra: &str| {
        format!(
            r#"{{"model_type": "{t}", "vocab_size": 67, "hidden_size": 256, "intermediate_size": 512,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "max_position_embeddings": 64, "rms_norm_eps": 1e-5{extra}}}"#
        )
    };
    vec![
        ("llama", llama("llama", "")),
        ("qwen2", llama("qwen2", r#", "intermediate_size": 40"#)),
        (
            "gemma2",
            llama("gemma2", r#", "head_dim": 64, "query_pre_attn_scalar": 64"#),
        ),
        ("phi3", llama("phi3", "")),
        (
            "gpt2",
            r#"{"model_type": "gpt2", "vocab_size": 67, "n_embd": 256, "n_layer": 2, "n_head": 4,
            "n_positions": 64}"#
                .to_string(),
        ),
    ]
}

#[test]
fn k_quants_of_every_family_equal_f32_holding_the_dequantized_weights() {
    for (family, json) in configs() {
        for p in [1, 3] {
            let mesh = &meshes(p)[1].1;
            let what = format!("{family} q4_k P={p}");
            let config = || config_from_json(&json, family).unwrap();
            let opts = LoadOptions::default();
            let q = DType::Quant(QuantType::Q4K);
            let narrow = CausalLm::new_with(mesh, config(), 5, opts.weights(q)).unwrap();
            let wide = CausalLm::new_with(mesh, config(), 5, opts).unwrap();
            compare(&what, QuantType::Q4K, narrow, wide);
        }
    }
}

/// `narrow` holds `wide`'s weights quantized to `q`: `wide` takes them
/// dequantized, then both must agree.
fn compare(what: &str, q: QuantType, narrow: CausalLm, mut wide: CausalLm) {
    let mut quantized = 0;
    for (_, param) in wide.named_parameters_mut() {
        let &[rows, k] = param.shape() else { continue };
        let Some(q) = q.for_row(k) else { continue };
        let m = param.master().unwrap();
        let blocks = quantize_rows(q, &m, rows, k).unwrap();
        param
            .load_master(&dequantize_rows(q, &blocks, rows, k).unwrap())
            .unwrap();
    }
    for ((name, n), (_, w)) in narrow
        .named_parameters()
        .into_iter()
        .zip(wide.named_parameters())
    {
        let want = match n.shape() {
            &[_, k] => q.for_row(k).map_or(DType::F32, DType::Quant),
            _ => DType::F32,
        };
        assert_eq!(n.value.dtype(), want, "{what}: {name}");
        quantized += usize::from(want != DType::F32);
        assert_eq!(
            bits(&n.master().unwrap()),
            bits(&w.master().unwrap()),
            "{what}: {name}"
        );
    }
    assert!(quantized >= 2, "{what}: {quantized} quantized weights");
    let ids: Vec<i32> = (0..14).map(|i| (i * 7 + 3) % 30).collect();
    let a = no_grad(|| narrow.logits(&ids, 7)).unwrap();
    let b = no_grad(|| wide.logits(&ids, 7)).unwrap();
    let want: Vec<f64> = b.to_host().unwrap().iter().map(|&v| v as f64).collect();
    assert_close(
        &format!("{what}: logits"),
        &a.to_host().unwrap(),
        &want,
        1e-5,
    );
}

#[test]
fn quantized_on_load_equals_f32_holding_the_dequantized_weights() {
    for q in [QuantType::Q8_0, QuantType::Q4_0, QuantType::Q4K] {
        for dir in fixtures() {
            for p in 1..=3 {
                let all = meshes(p);
                let picked = if p == 2 { &all[..] } else { &all[1..] };
                for (transport, mesh) in picked {
                    let what = format!("{} {q} P={p} {transport}", dir.display());
                    let narrow = load(mesh, &dir, DType::Quant(q));
                    let wide = load(mesh, &dir, DType::F32);
                    compare(&what, q, narrow, wide);
                }
            }
        }
    }
}
#[test]
fn quantized_weights_stay_frozen_while_the_rest_trains() {
    let dir = &fixtures()[1];
    let mut model = load(&mesh(2), dir, DType::Quant(QuantType::Q8_0));
    let before: Vec<Vec<f32>> = model
        .named_parameters()
        .iter()
        .map(|(_, p)| p.master().unwrap())
        .collect();
    let ids: Vec<i32> = (0..14).map(|i| (i * 5 + 1) % 30).collect();
    model.loss(&ids, &ids, 7).unwrap().backward().unwrap();
    AdamW::new(1e-2).step(&mut model).unwrap();
    for ((name, p), old) in model.named_parameters().into_iter().zip(before) {
        let changed = p.master().unwrap() != old;
        let frozen = p.value.dtype().quant().is_some();
        assert_eq!(
            changed, !frozen,
            "{name}: changed {changed}, quantized {frozen}"
        );
    }
}
