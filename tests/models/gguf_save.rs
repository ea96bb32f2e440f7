//! `CausalLm::save_gguf`, the inverse of `from_gguf`: every GGUF fixture
//! loaded at P = 1 and 3 and written back holds the original's blocks and
//! F32 tensors byte for byte (in its own dominant type; every tensor when
//! quantized weights keep their types), the metadata our reader and
//! llama.cpp read, the tokenizer, and gives the same logits read back;
//! every Hugging Face fixture family (and a GPT-2 built in code) written as
//! F32 reads back with its logits, and as Q8_0 holds llama.cpp's blocks of
//! the same values; every quantized type is llama.cpp's requantization of
//! the dequantized weights; what llama.cpp cannot run is an error naming it.
//! `tests/fixtures/gguf/check_save_with_llamacpp.py` runs llama.cpp itself
//! on such files (through the ignored test at the end).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use safetensors::SafeTensors;
use wgpu_tp::models::{
    CausalLm, GgufSaveOptions, Gpt2Config, LoadOptions, config_from_json, gguf_config,
};
use wgpu_tp::nn::gguf::GgufFile;
use wgpu_tp::nn::{GgufVocab, Sampling, Tokenizer};
use wgpu_tp::quant::{QuantType, dequantize_rows, quantize_rows};
use wgpu_tp::{DType, Mesh};

use super::gguf::{MODELS, file as gguf_file};
use crate::util::{assert_close, mesh};

fn hf_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/hf")
        .join(name)
}

/// A fresh empty directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("gguf_save")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The reference inputs of a GGUF fixture: token ids, their sequence
/// length, the greedy prompt and how many tokens transformers generated.
struct Inputs {
    ids: Vec<i32>,
    seq: usize,
    prompt: Vec<i32>,
    new: usize,
}

impl Inputs {
    fn read(name: &str) -> Inputs {
        let dir = gguf_file(name).parent().unwrap().to_path_buf();
        let meta: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
                .unwrap();
        let bytes = std::fs::read(dir.join("reference.safetensors")).unwrap();
        let st = SafeTensors::deserialize(&bytes).unwrap();
        let get =
            |k: &str| -> Vec<i32> { bytemuck::pod_collect_to_vec(st.tensor(k).unwrap().data()) };
        Inputs {
            ids: get("ids"),
            seq: meta["seq"].as_u64().unwrap() as usize,
            prompt: get("prompt"),
            new: get("greedy").len(),
        }
    }
}

fn logits(model: &CausalLm, ids: &[i32], seq: usize) -> Vec<f32> {
    wgpu_tp::no_grad(|| model.logits(ids, seq))
        .unwrap()
        .to_host()
        .unwrap()
}

fn greedy(model: &CausalLm, prompt: &[i32], new: usize) -> Vec<i32> {
    pollster::block_on(wgpu_tp::nn::generate(
        model,
        prompt,
        new,
        Sampling::Greedy,
        &[],
        |_| Ok(()),
    ))
    .unwrap()
}

/// The quantized type most of `file`'s tensors have.
fn dominant(file: &GgufFile) -> QuantType {
    let mut counts: HashMap<QuantType, usize> = HashMap::new();
    for t in file.tensors() {
        if let DType::Quant(q) = t.dtype() {
            *counts.entry(q).or_default() += 1;
        }
    }
    let most = counts.values().copied().max().unwrap();
    // Ties in ggml's type order.
    QuantType::ALL
        .into_iter()
        .find(|q| counts.get(q) == Some(&most))
        .unwrap()
}

/// The tokenizer metadata of `file` as llama.cpp takes it (`add_bos_token`
/// and `add_eos_token` its defaults where absent), but the SentencePiece
/// scores, which a tokenizer writes as its merge ranks, not the file's
/// values.
fn vocab(file: &GgufFile) -> GgufVocab {
    let v = GgufVocab::from_gguf(file).unwrap();
    let bos = v.model == "llama" || v.pre.as_deref() == Some("llama-bpe");
    GgufVocab {
        scores: None,
        add_bos_token: Some(v.add_bos_token.unwrap_or(bos)),
        add_eos_token: Some(v.add_eos_token.unwrap_or(false)),
        ..v
    }
}

/// The same tensors, shapes and metadata as the reader sees them; the
/// names of tensors of the same type whose bytes differ.
fn compare(what: &str, orig: &GgufFile, saved: &GgufFile) -> Vec<String> {
    let names = |f: &GgufFile| -> Vec<String> {
        let mut n: Vec<String> = f.tensors().iter().map(|t| t.name().to_string()).collect();
        n.sort();
        n
    };
    assert_eq!(names(orig), names(saved), "{what}: the tensors");
    assert_eq!(
        gguf_config(orig).unwrap(),
        gguf_config(saved).unwrap(),
        "{what}: the config the metadata stands for"
    );
    assert_eq!(vocab(orig), vocab(saved), "{what}: the tokenizer metadata");
    for key in ["general.architecture", "general.quantization_version"] {
        assert_eq!(orig.get(key), saved.get(key), "{what}: {key}");
    }
    let arch = orig.string("general.architecture").unwrap().unwrap();
    for (k, v) in orig.metadata() {
        if k.starts_with(&format!("{arch}.")) {
            assert_eq!(Some(v), saved.get(k), "{what}: key {k}");
        }
    }
    let mut differ = Vec::new();
    for t in orig.tensors() {
        let s = saved.tensor(t.name()).unwrap();
        assert_eq!(t.shape(), s.shape(), "{what}: shape of {}", t.name());
        if t.dtype() == s.dtype()
            && orig.tensor_bytes(t.name()).unwrap() != saved.tensor_bytes(t.name()).unwrap()
        {
            differ.push(t.name().to_string());
        }
    }
    differ
}

#[test]
fn gguf_files_write_back_byte_identical_at_p_1_and_3() {
    for name in MODELS {
        let path = gguf_file(name);
        let orig = GgufFile::open(&path).unwrap();
        let tokenizer = Tokenizer::from_gguf(&path).unwrap();
        let q = dominant(&orig);
        let inputs = Inputs::read(name);
        for p in [1, 3] {
            let m = mesh(p);
            let model = CausalLm::from_gguf(&m, &path).unwrap();
            let want = logits(&model, &inputs.ids, inputs.seq);
            let dir = scratch(&format!("{name}_p{p}"));

            // In the dominant type: its blocks and the F32 tensors unchanged,
            // other quantized types requantized.
            let file = dir.join("dominant.gguf");
            model
                .save_gguf(&file, DType::Quant(q), Some(&tokenizer))
                .unwrap();
            let saved = GgufFile::open(&file).unwrap();
            let what = format!("{name} P={p} as {q}");
            let differ = compare(&what, &orig, &saved);
            assert!(differ.is_empty(), "{what}: {differ:?} differ");
            for t in orig.tensors() {
                let vector = t.dtype() == DType::F32 && t.shape().len() == 1;
                let kept = t.dtype() == DType::Quant(q) || vector;
                let s = saved.tensor(t.name()).unwrap();
                assert!(
                    !kept || s.dtype() == t.dtype(),
                    "{what}: {} is {}, was {}",
                    t.name(),
                    s.dtype(),
                    t.dtype()
                );
            }

            // Every quantized weight keeping its type (the mixed file's F16 and
            // BF16 weights, f32 masters, as F32): every tensor of the same
            // type unchanged, and the same model read back.
            let keep = match name {
                "qwen2_mixed32" => DType::F32,
                _ => DType::Quant(q),
            };
            let file = dir.join("kept.gguf");
            let opts = GgufSaveOptions::new(keep)
                .tokenizer(&tokenizer)
                .keep_quantized(true)
                .name(name);
            model.save_gguf_with(&file, &opts).unwrap();
            let saved = GgufFile::open(&file).unwrap();
            let what = format!("{name} P={p} keeping types");
            assert!(compare(&what, &orig, &saved).is_empty(), "{what}");
            assert_eq!(saved.string("general.name").unwrap(), Some(name));
            // Named by the type most weight matrices have.
            let mostly = match (keep, q) {
                (DType::F32, _) => 0,
                (_, QuantType::Q4_0) => 2,
                (_, QuantType::Q8_0) => 7,
                (_, QuantType::Q4K) => 14,
                (_, QuantType::Q5K) => 16,
                _ => panic!("{what}: a fixture mostly {q}"),
            };
            assert_eq!(
                saved.u32("general.file_type").unwrap(),
                Some(mostly),
                "{what}: general.file_type"
            );
            for t in orig.tensors() {
                let s = saved.tensor(t.name()).unwrap();
                if !matches!(t.dtype(), DType::F16 | DType::BF16) {
                    assert_eq!(s.dtype(), t.dtype(), "{what}: type of {}", t.name());
                }
            }
            let back = CausalLm::from_gguf(&m, &file).unwrap();
            assert_eq!(
                logits(&back, &inputs.ids, inputs.seq),
                want,
                "{what}: logits read back"
            );
            let t = Tokenizer::from_gguf(&file).unwrap();
            let text = "Hello wörld,  the end";
            assert_eq!(t.encode(text).unwrap(), tokenizer.encode(text).unwrap());
            assert_eq!(
                t.chat_template().is_some(),
                tokenizer.chat_template().is_some(),
                "{what}: chat template"
            );
        }
    }
}

#[test]
fn every_quantized_type_is_llama_cpps_requantization() {
    // SmolLM2-like: rows of 256 and 512, so the K-quants apply whole.
    let path = gguf_file("smollm2_q4_k_m");
    let orig = GgufFile::open(&path).unwrap();
    let m = mesh(2);
    let model = CausalLm::from_gguf(&m, &path).unwrap();
    let inputs = Inputs::read("smollm2_q4_k_m");
    let dir = scratch("every_type");
    for q in QuantType::ALL {
        let file = dir.join(format!("{q}.gguf"));
        model.save_gguf(&file, DType::Quant(q), None).unwrap();
        let saved = GgufFile::open(&file).unwrap();
        for t in orig.tensors() {
            let s = saved.tensor(t.name()).unwrap();
            let (DType::Quant(from), &[rows, k]) = (t.dtype(), t.shape()) else {
                assert_eq!(s.dtype(), t.dtype(), "{q}: {}", t.name());
                continue;
            };
            assert_eq!(s.dtype(), DType::Quant(q), "{q}: {}", t.name());
            // The same blocks where the type is the same, else the dequantized
            // weight requantized, as llama.cpp's quantizer does.
            let blocks = orig.tensor_bytes(t.name()).unwrap();
            let want = match from == q {
                true => blocks.to_vec(),
                false => {
                    let values = dequantize_rows(from, blocks, rows, k).unwrap();
                    quantize_rows(q, &values, rows, k).unwrap()
                }
            };
            assert!(
                saved.tensor_bytes(t.name()).unwrap() == want,
                "{q}: {} is not the {from} weight's blocks or requantization",
                t.name()
            );
        }
        let back = CausalLm::from_gguf(&m, &file).unwrap();
        let got = logits(&back, &inputs.ids, inputs.seq);
        assert!(got.iter().all(|v| v.is_finite()), "{q}: logits");
    }
}

/// A Hugging Face fixture's model, its config patched where llama.cpp has
/// no equivalent (so the file stands for the same model).
fn hf_model(m: &Mesh, name: &str, patch: impl Fn(&mut serde_json::Value)) -> CausalLm {
    let dir = hf_fixture(name);
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    patch(&mut json);
    let config = config_from_json(&json.to_string(), name).unwrap();
    CausalLm::from_pretrained_as(m, config, &dir, LoadOptions::default()).unwrap()
}

/// The patch each Hugging Face fixture needs, and what llama.cpp lacks.
fn patches(name: &str) -> (fn(&mut serde_json::Value), Option<&'static str>) {
    fn none(_: &mut serde_json::Value) {}
    match name {
        // llama.cpp scales Gemma's attention by head_dim^-1/2.
        "gemma2_softcap" | "gemma3_sliding" => (
            |c| c["query_pre_attn_scalar"] = c["head_dim"].clone(),
            Some("query_pre_attn_scalar"),
        ),
        // llama.cpp's llama attends to the whole context (its phi3 too, but
        // the file keeps phi3's window: allow_unsupported_window).
        "mistral_window" => (
            |c| c["sliding_window"] = serde_json::Value::Null,
            Some("sliding_window"),
        ),
        "phi3_window" => (none, Some("sliding_window")),
        // Our reader takes Llama 3's factors of the released models only
        // (an original context of 8192, some wavelength past it).
        "llama_gqa" => (
            |c| {
                c["rope_parameters"]["original_max_position_embeddings"] = 8192.into();
                c["rope_parameters"]["rope_theta"] = 500000.0.into();
            },
            None,
        ),
        _ => (none, None),
    }
}

/// `file`'s tensor `name` as f32 (an F32 tensor).
fn f32s(file: &GgufFile, name: &str) -> Vec<f32> {
    bytemuck::pod_collect_to_vec(file.tensor_bytes(name).unwrap())
}

/// `model` written as F32 and read back: the same logits (to 1e-5), the
/// same config; written as Q8_0: each Q8_0 tensor llama.cpp's blocks of
/// the F32 file's values (rows not of whole blocks F16), read back. The
/// number of Q8_0 tensors.
fn check_f32_and_q8_0(
    what: &str,
    m: &Mesh,
    model: &CausalLm,
    (ids, seq): (&[i32], usize),
    opts: GgufSaveOptions<'_>,
) -> usize {
    let dir = scratch(&what.replace([' ', '='], "_"));
    let want = logits(model, ids, seq);
    let f32_path = dir.join("f32.gguf");
    let as_type = |dtype| GgufSaveOptions { dtype, ..opts };
    model
        .save_gguf_with(&f32_path, &as_type(DType::F32))
        .unwrap();
    let back = CausalLm::from_gguf(m, &f32_path).unwrap();
    let want64: Vec<f64> = want.iter().map(|&v| v as f64).collect();
    assert_close(
        &format!("{what}: F32 file's logits"),
        &logits(&back, ids, seq),
        &want64,
        1e-5,
    );
    // Sizes alike (Mistral comes back as the Llama it is in GGUF).
    let sizes = |m: &CausalLm| {
        m.decoder_config()
            .describe()
            .split_once(": ")
            .unwrap()
            .1
            .to_string()
    };
    assert_eq!(sizes(&back), sizes(model), "{what}: the config read back");
    assert_eq!(back.is_tied(), model.is_tied(), "{what}: tied");
    let f32_file = GgufFile::open(&f32_path).unwrap();
    assert_eq!(
        f32_file.tensor("output.weight").is_some(),
        !model.is_tied(),
        "{what}: output.weight exactly when untied"
    );

    let q8_path = dir.join("q8_0.gguf");
    model
        .save_gguf_with(&q8_path, &as_type(DType::Quant(QuantType::Q8_0)))
        .unwrap();
    let q8_file = GgufFile::open(&q8_path).unwrap();
    let mut quantized = 0;
    for t in q8_file.tensors() {
        let f = f32_file.tensor(t.name()).unwrap();
        assert_eq!(t.shape(), f.shape(), "{what}: shape of {}", t.name());
        match t.dtype() {
            DType::Quant(QuantType::Q8_0) => {
                quantized += 1;
                let &[rows, k] = t.shape() else {
                    panic!("{what}: {} is not 2-D", t.name())
                };
                let blocks =
                    quantize_rows(QuantType::Q8_0, &f32s(&f32_file, t.name()), rows, k).unwrap();
                assert!(
                    q8_file.tensor_bytes(t.name()).unwrap() == blocks,
                    "{what}: {} is not llama.cpp's Q8_0 of the values",
                    t.name()
                );
            }
            DType::F32 => assert_eq!(
                q8_file.tensor_bytes(t.name()).unwrap(),
                f32_file.tensor_bytes(t.name()).unwrap(),
                "{what}: {}",
                t.name()
            ),
            DType::F16 => {
                // Rows that are not whole blocks, as llama.cpp keeps them.
                assert!(t.shape()[1] % 32 != 0, "{what}: {} is F16", t.name());
                let want: Vec<u8> = (f32s(&f32_file, t.name()).iter())
                    .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
                    .collect();
                assert!(
                    q8_file.tensor_bytes(t.name()).unwrap() == want,
                    "{what}: {}",
                    t.name()
                );
            }
            other => panic!("{what}: {} is {other}", t.name()),
        }
    }
    let back = CausalLm::from_gguf(m, &q8_path).unwrap();
    let got = logits(&back, ids, seq);
    assert!(got.iter().all(|v| v.is_finite()), "{what}: Q8_0 logits");
    quantized
}

/// Every Hugging Face fixture.
const HF_MODELS: [&str; 9] = [
    "llama_gqa",
    "smollm2_like",
    "qwen2_bias_bf16",
    "qwen3_qknorm",
    "mistral_window",
    "gemma3_sliding",
    "gemma2_softcap",
    "phi3_longrope",
    "phi3_window",
];

/// A GPT-2 of drawn weights (no fixture directory has one).
fn drawn_gpt2(m: &Mesh) -> CausalLm {
    let mut config = Gpt2Config::new(50, 16, 32, 2, 2);
    config.eos_token_id = Some(49);
    // GGUF keeps ε as an f32: one it holds exactly, so the config reads back equal.
    config.layer_norm_epsilon = 2f64.powi(-17);
    CausalLm::new(m, config, 7).unwrap()
}

#[test]
fn hugging_face_models_write_as_f32_and_q8_0() {
    let ids: Vec<i32> = (0..12).map(|i| (i * 7 + 3) % 50).collect();
    let mut quantized = 0;
    for (i, name) in HF_MODELS.iter().enumerate() {
        let p = [1, 2, 3][i % 3];
        let m = mesh(p);
        let (patch, _) = patches(name);
        let model = hf_model(&m, name, patch);
        // Phi-3's window stays in the file for our reader.
        let opts = GgufSaveOptions::new(DType::F32).allow_unsupported_window(true);
        quantized += check_f32_and_q8_0(&format!("{name} P={p}"), &m, &model, (&ids, 6), opts);
    }
    // GPT-2 (no fixture directory): drawn weights, written at P = 2.
    let m = mesh(2);
    let model = drawn_gpt2(&m);
    let opts = GgufSaveOptions::new(DType::F32);
    quantized += check_f32_and_q8_0("gpt2 P=2", &m, &model, (&ids, 6), opts);
    // The fixtures' widths are mostly not whole blocks of 32.
    assert!(quantized >= 40, "{quantized} Q8_0 tensors");
    let file = scratch("gpt2_meta").join("model.gguf");
    model.save_gguf(&file, DType::F16, None).unwrap();
    let f = GgufFile::open(&file).unwrap();
    assert_eq!(f.u32("gpt2.context_length").unwrap(), Some(16));
    assert_eq!(
        f.tensor("position_embd.weight").unwrap().dtype(),
        DType::F32
    );
    assert_eq!(
        f.tensor("blk.0.attn_qkv.weight").unwrap().dtype(),
        DType::F16
    );
    assert_eq!(f.u32("tokenizer.ggml.eos_token_id").unwrap(), Some(49));
}

#[test]
fn what_llama_cpp_cannot_run_is_an_error_naming_it() {
    let m = mesh(2);
    let dir = scratch("errors");
    let path = dir.join("model.gguf");
    let expect = |model: &CausalLm, dtype: DType, needles: &[&str]| {
        let err = model
            .save_gguf(&path, dtype, None)
            .expect_err("an error")
            .to_string();
        for n in needles {
            assert!(err.contains(n), "{err:?} should name {n:?}");
        }
        assert!(!path.exists(), "nothing written");
    };
    for name in [
        "gemma2_softcap",
        "gemma3_sliding",
        "mistral_window",
        "phi3_window",
    ] {
        let (_, needle) = patches(name);
        let model = hf_model(&m, name, |_| {});
        expect(&model, DType::F32, &[needle.unwrap()]);
    }
    // Allowed, Mistral's window is not in the file (llama.cpp has none).
    let model = hf_model(&m, "mistral_window", |_| {});
    let opts = GgufSaveOptions::new(DType::F32).allow_unsupported_window(true);
    model.save_gguf_with(&path, &opts).unwrap();
    let file = GgufFile::open(&path).unwrap();
    assert!(
        file.metadata()
            .iter()
            .all(|(k, _)| !k.contains("sliding_window"))
    );
    std::fs::remove_file(&path).unwrap();
    let model = hf_model(&m, "smollm2_like", |_| {});
    expect(&model, DType::I32, &["I32"]);
    // A tokenizer of more tokens than the embedding has rows.
    let tokenizer = Tokenizer::from_gguf(gguf_file("llama_q8_0")).unwrap();
    let err = model
        .save_gguf(&path, DType::F32, Some(&tokenizer))
        .expect_err("an error")
        .to_string();
    assert!(
        err.contains("320 tokens") && err.contains("67 rows"),
        "{err}"
    );
    // Drawn models of a fixture's config, changed.
    let drawn = |name: &str, change: &dyn Fn(&mut serde_json::Value)| {
        let text = std::fs::read_to_string(hf_fixture(name).join("config.json")).unwrap();
        let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
        change(&mut json);
        let config = config_from_json(&json.to_string(), name).unwrap();
        CausalLm::new(&m, config, 1).unwrap()
    };
    // A Qwen3 with attention biases, which llama.cpp's qwen3 has not.
    let model = drawn("qwen3_qknorm", &|c| c["attention_bias"] = true.into());
    expect(&model, DType::F32, &["blk.0.attn_q.bias", "qwen3"]);
    // An untied Gemma 2, whose head llama.cpp never loads.
    let model = drawn("gemma2_softcap", &|c| {
        c["query_pre_attn_scalar"] = c["head_dim"].clone();
        c["tie_word_embeddings"] = false.into();
    });
    expect(&model, DType::F32, &["untied gemma2 head"]);
    // The mesh still works.
    let model = hf_model(&m, "smollm2_like", |_| {});
    model.save_gguf(&path, DType::F32, None).unwrap();
    CausalLm::from_gguf(&m, &path).unwrap();
}

/// `model` written to `out` as `opts` say, read back, and our greedy tokens
/// from `inputs.prompt` with our logits along them (f32, `[tokens,
/// vocab]`) beside it: the entry of `index.json` that says so.
fn write_for_llamacpp(
    m: &Mesh,
    model: &CausalLm,
    out: &Path,
    name: &str,
    variant: &str,
    opts: &GgufSaveOptions<'_>,
    inputs: &Inputs,
) -> serde_json::Value {
    let file = out.join(format!("{name}-{variant}.gguf"));
    model.save_gguf_with(&file, opts).unwrap();
    let back = CausalLm::from_gguf(m, &file).unwrap();
    let ours = greedy(&back, &inputs.prompt, inputs.new);
    let seq: Vec<i32> = inputs.prompt.iter().chain(&ours).copied().collect();
    let seq = &seq[..seq.len() - 1];
    let values = logits(&back, seq, seq.len());
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let logits_file = format!("{name}-{variant}.logits");
    std::fs::write(out.join(&logits_file), bytes).unwrap();
    serde_json::json!({
        "fixture": name,
        "variant": variant,
        "file": file.file_name().unwrap().to_str().unwrap(),
        "prompt": inputs.prompt,
        "greedy": ours,
        "logits": logits_file,
    })
}

/// A byte-level vocabulary of `n` tokens, one printable ASCII character
/// each, no merges: what llama.cpp needs to load a model that has no
/// tokenizer of its own.
fn characters(n: usize) -> Tokenizer {
    let vocab = GgufVocab {
        model: "gpt2".into(),
        pre: Some("gpt-2".into()),
        tokens: (0..n as u32)
            .map(|i| char::from_u32(0x21 + i).unwrap().to_string())
            .collect(),
        token_types: Some(vec![GgufVocab::NORMAL; n]),
        merges: Some(Vec::new()),
        ..GgufVocab::default()
    };
    Tokenizer::from_gguf_vocab(&vocab, "characters").unwrap()
}

/// Files for `check_save_with_llamacpp.py`: every GGUF fixture written
/// back (types kept, dequantized to F32, requantized to Q8_0 and Q4_K), and
/// every Hugging Face fixture and a drawn GPT-2 as F32 and Q8_0, each with
/// our greedy tokens from that file and our logits along them, into
/// `$WGPU_TP_GGUF_OUT`.
#[test]
#[ignore = "run by tests/fixtures/gguf/check_save_with_llamacpp.py"]
fn write_files_for_llamacpp() {
    let out = PathBuf::from(std::env::var("WGPU_TP_GGUF_OUT").expect("WGPU_TP_GGUF_OUT"));
    std::fs::create_dir_all(&out).unwrap();
    let m = mesh(2);
    let mut index = Vec::new();
    for name in MODELS {
        let path = gguf_file(name);
        let q = dominant(&GgufFile::open(&path).unwrap());
        let tokenizer = Tokenizer::from_gguf(&path).unwrap();
        let model = CausalLm::from_gguf(&m, &path).unwrap();
        let inputs = Inputs::read(name);
        let variants = [
            (
                "kept",
                GgufSaveOptions::new(DType::Quant(q)).keep_quantized(true),
            ),
            ("f32", GgufSaveOptions::new(DType::F32)),
            ("q8_0", GgufSaveOptions::new(DType::Quant(QuantType::Q8_0))),
            ("q4_k", GgufSaveOptions::new(DType::Quant(QuantType::Q4K))),
        ];
        for (variant, opts) in variants {
            let opts = opts.tokenizer(&tokenizer).name(name);
            let entry = write_for_llamacpp(&m, &model, &out, name, variant, &opts, &inputs);
            index.push(entry);
        }
    }
    // The Hugging Face fixtures (their RoPE scalings, windows, biases, fused
    // projections) and a GPT-2, with a tokenizer of one character a token.
    let mut models: Vec<(String, CausalLm)> = Vec::new();
    for name in HF_MODELS {
        let (patch, _) = patches(name);
        models.push((name.to_string(), hf_model(&m, name, patch)));
    }
    models.push(("gpt2_drawn".into(), drawn_gpt2(&m)));
    for (name, model) in &models {
        let vocab = model.decoder_config().spec().vocab;
        let tokenizer = characters(vocab);
        let inputs = Inputs {
            ids: Vec::new(),
            seq: 0,
            prompt: vec![3, 1, 4, 1, 5],
            new: 8,
        };
        for (variant, dtype) in [("f32", DType::F32), ("q8_0", DType::Quant(QuantType::Q8_0))] {
            // No general.name: llama.cpp looks "</s>" up in any vocabulary of
            // a model whose name says phi3.
            let opts = GgufSaveOptions::new(dtype)
                .tokenizer(&tokenizer)
                .allow_unsupported_window(true);
            let mut entry = write_for_llamacpp(&m, model, &out, name, variant, &opts, &inputs);
            if name == "phi3_window" {
                // llama.cpp's phi3 attends to the whole context: the same
                // model at the positions the window does not cut.
                entry["window"] = 5.into();
            }
            index.push(entry);
        }
    }
    let text = serde_json::to_string_pretty(&index).unwrap();
    std::fs::write(out.join("index.json"), text).unwrap();
}
