//! Bad model directories (the Llama family, Gemma, Phi-3): each an `Error::Checkpoint` naming the key,
//! file or tensor, before any parameter is written, and the mesh still works.

use std::path::{Path, PathBuf};

use wgpu_tp::Error;
use wgpu_tp::models::CausalLm;

use crate::util::mesh;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/hf")
        .join(name)
}

/// A copy of fixture `name` in a fresh directory, `edit`ed.
fn copy(name: &str, case: &str, edit: impl FnOnce(&Path)) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("llama_bad")
        .join(case);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for e in std::fs::read_dir(fixture(name)).unwrap() {
        let e = e.unwrap();
        if !e.file_name().to_string_lossy().starts_with("reference") {
            std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
        }
    }
    edit(&dir);
    dir
}

/// Set `key` of `dir`'s config.json to `value` (JSON text; `None` removes it).
fn set(dir: &Path, key: &str, value: Option<&str>) {
    let path = dir.join("config.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let obj = v.as_object_mut().unwrap();
    match value {
        Some(t) => obj.insert(key.into(), serde_json::from_str(t).unwrap()),
        None => obj.remove(key),
    };
    std::fs::write(path, serde_json::to_string(&v).unwrap()).unwrap();
}

fn expect_error(case: &str, dir: &Path, needles: &[&str]) {
    let m = mesh(2);
    let err = match CausalLm::from_pretrained(&m, dir) {
        Ok(_) => panic!("{case}: loaded"),
        Err(e) => e,
    };
    assert!(matches!(err, Error::Checkpoint(_)), "{case}: {err:?}");
    let text = err.to_string();
    for n in needles {
        assert!(text.contains(n), "{case}: {text:?} should name {n:?}");
    }
    // The mesh still works: a good directory loads and runs.
    let good = CausalLm::from_pretrained(&m, fixture("llama_gqa")).unwrap();
    good.logits(&[1, 2, 3], 3).unwrap().to_host().unwrap();
}

#[test]
fn unsupported_configs_name_the_key() {
    let cases: [(&str, &str, Option<&str>, &[&str]); 6] = [
        (
            "model_type",
            "model_type",
            Some("\"gemma\""),
            &["model_type", "gemma"],
        ),
        (
            "longrope",
            "rope_parameters",
            Some(r#"{"rope_type": "longrope", "rope_theta": 10000.0}"#),
            &["longrope"],
        ),
        (
            "moe",
            "num_local_experts",
            Some("8"),
            &["num_local_experts"],
        ),
        (
            "quantized",
            "quantization_config",
            Some(r#"{"quant_method": "gptq"}"#),
            &["quantization_config"],
        ),
        (
            "heads",
            "num_key_value_heads",
            Some("3"),
            &["num_attention_heads", "num_key_value_heads"],
        ),
        ("act", "hidden_act", Some("\"gelu\""), &["hidden_act"]),
    ];
    for (case, key, value, needles) in cases {
        let dir = copy("llama_gqa", case, |d| set(d, key, value));
        expect_error(case, &dir, needles);
    }
    let dir = copy("llama_gqa", "causal_lm", |d| {
        set(d, "model_type", Some("\"bert\""))
    });
    let err = CausalLm::from_pretrained(&mesh(1), &dir)
        .unwrap_err()
        .to_string();
    assert!(err.contains("bert"), "{err}");
}

#[test]
fn bad_weights_name_the_file_and_tensor() {
    // A shape the config disagrees with.
    let dir = copy("llama_gqa", "shape", |d| {
        set(d, "intermediate_size", Some("48"))
    });
    expect_error(
        "shape",
        &dir,
        &["model.safetensors", "mlp.gate_proj.weight"],
    );
    // A missing shard of an index.
    let dir = copy("qwen2_bias_bf16", "shard", |d| {
        let index: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(d.join("model.safetensors.index.json")).unwrap(),
        )
        .unwrap();
        let file = index["weight_map"]
            .as_object()
            .unwrap()
            .values()
            .next()
            .unwrap()
            .as_str()
            .unwrap()
            .to_string();
        std::fs::remove_file(d.join(&file)).unwrap();
    });
    expect_error("missing shard", &dir, &["cannot open"]);
    // A truncated file.
    let dir = copy("mistral_window", "truncated", |d| {
        let p = d.join("model.safetensors");
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() / 2]).unwrap();
    });
    expect_error("truncated", &dir, &["model.safetensors"]);
    // A tied config whose lm_head differs from the embedding.
    let dir = copy("llama_gqa", "untied", |d| {
        set(d, "tie_word_embeddings", Some("true"))
    });
    expect_error(
        "untied head",
        &dir,
        &["lm_head.weight", "tie_word_embeddings"],
    );
}

#[test]
fn unsupported_gemma_and_phi3_variants_name_the_key() {
    // (fixture, case, key, value, what the error names)
    type Case<'a> = (&'a str, &'a str, &'a str, Option<&'a str>, &'a [&'a str]);
    let cases: [Case; 9] = [
        (
            "gemma3_sliding",
            "gemma multimodal",
            "model_type",
            Some("\"gemma3\""),
            &["vision_config", "gemma3_text"],
        ),
        (
            "gemma3_sliding",
            "gemma vision",
            "vision_config",
            Some(r#"{"hidden_size": 8}"#),
            &["vision_config"],
        ),
        (
            "gemma2_softcap",
            "gemma softcap",
            "attn_logit_softcapping",
            Some("-1.0"),
            &["attn_logit_softcapping"],
        ),
        (
            "gemma3_sliding",
            "gemma bidirectional",
            "use_bidirectional_attention",
            Some("true"),
            &["use_bidirectional_attention"],
        ),
        (
            "gemma3_sliding",
            "gemma gelu",
            "hidden_activation",
            Some("\"gelu\""),
            &["hidden_activation"],
        ),
        (
            "gemma3_sliding",
            "gemma layer types",
            "layer_types",
            Some(r#"["full_attention"]"#),
            &["layer_types"],
        ),
        (
            "phi3_longrope",
            "phi3 short factors",
            "rope_parameters",
            Some(
                r#"{"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                    "short_factor": [1.0, 1.0, 1.0], "long_factor": [2.0, 2.0],
                    "original_max_position_embeddings": 4}"#,
            ),
            &["short_factor"],
        ),
        (
            "phi3_longrope",
            "phi3 odd rotary width",
            "rope_parameters",
            Some(
                r#"{"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.375}"#,
            ),
            &["partial_rotary_factor"],
        ),
        (
            "phi3_window",
            "phi3 act",
            "hidden_act",
            Some("\"gelu\""),
            &["hidden_act"],
        ),
    ];
    for (fixture, case, key, value, needles) in cases {
        let dir = copy(fixture, case, |d| set(d, key, value));
        expect_error(case, &dir, needles);
    }
    // A fused tensor the config disagrees with names it.
    let dir = copy("phi3_window", "phi3 fused", |d| {
        set(d, "num_key_value_heads", Some("2"))
    });
    expect_error("fused", &dir, &["qkv_proj.weight", "has shape"]);
}

/// `qwen2_bias_bf16` (four shards) with its index edited by `edit`.
fn index_case(case: &str, edit: impl FnOnce(&mut serde_json::Value)) -> PathBuf {
    copy("qwen2_bias_bf16", case, |d| {
        let path = d.join("model.safetensors.index.json");
        let mut index: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        edit(&mut index);
        std::fs::write(path, index.to_string()).unwrap();
    })
}

#[test]
fn hostile_indexes_are_errors() {
    let first = "model.embed_tokens.weight";
    // Shard names that leave the directory.
    for (case, file) in [
        ("parent", "../model.safetensors"),
        ("absolute", "/etc/passwd"),
        ("hidden", ".model.safetensors"),
        ("backslash", "..\\model.safetensors"),
    ] {
        let dir = index_case(case, |v| v["weight_map"][first] = file.into());
        expect_error(case, &dir, &[first, "is not a file name in this directory"]);
    }
    // A tensor said to be in a shard that does not hold it, a tensor no
    // shard holds, a shard that is not there, a map that is not a map.
    let dir = index_case("wrong_shard", |v| {
        v["weight_map"][first] = "model-00004-of-00004.safetensors".into()
    });
    expect_error("wrong shard", &dir, &[first, "does not hold it"]);
    let dir = index_case("phantom", |v| {
        v["weight_map"]["model.phantom"] = "model-00001-of-00004.safetensors".into()
    });
    expect_error("phantom", &dir, &["model.phantom", "does not hold it"]);
    let dir = index_case("absent_shard", |v| {
        v["weight_map"][first] = "model-00009-of-00009.safetensors".into()
    });
    expect_error("absent shard", &dir, &["model-00009-of-00009.safetensors"]);
    let dir = index_case("not_a_map", |v| v["weight_map"] = serde_json::json!([1, 2]));
    expect_error("not a map", &dir, &["has no weight_map object"]);
    // A hundred thousand entries naming tensors that are nowhere.
    let dir = index_case("many", |v| {
        let map = v["weight_map"].as_object_mut().unwrap();
        for i in 0..100_000 {
            map.insert(format!("t{i}"), "model-00001-of-00004.safetensors".into());
        }
    });
    expect_error("many", &dir, &["does not hold it"]);
    // Nested past serde_json's limit, and past the size limit.
    let dir = copy("qwen2_bias_bf16", "deep", |d| {
        let deep = "[".repeat(100_000) + &"]".repeat(100_000);
        let text = format!("{{\"weight_map\": {deep}}}");
        std::fs::write(d.join("model.safetensors.index.json"), text).unwrap();
    });
    expect_error("deep", &dir, &["not valid JSON", "recursion limit"]);
    let dir = copy("qwen2_bias_bf16", "huge", |d| {
        let f = std::fs::File::create(d.join("model.safetensors.index.json")).unwrap();
        f.set_len(65 << 20).unwrap();
    });
    expect_error("huge", &dir, &["68157440 bytes", "max_json_bytes"]);
}
