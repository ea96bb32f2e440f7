//! `.gguf` model files of every architecture against
//! `tests/fixtures/gguf/<name>/reference.safetensors` (logits, loss and
//! greedy tokens that transformers computed in float64 from the same file,
//! dequantized by gguf-py; `make_gguf_fixtures.py`): quantized weights stay
//! quantized on the device at P = 1..4 on both transports, sequence
//! parallel too; quantized weights are frozen while the tape reaches the
//! rest; bad files are errors naming the file and the key or tensor, and
//! the mesh still works.

use std::path::{Path, PathBuf};

use wgpu_tp::models::{CausalLm, LoadOptions};
use wgpu_tp::nn::gguf::{GgufFile, GgufWriter, Value};
use wgpu_tp::nn::{Params, Sampling, Tokenizer};
use wgpu_tp::{DType, Mesh};

use crate::util::{Fixture, assert_close, mesh, meshes, rel_err};

const TOL: f64 = 1e-5;
/// Every fixture: the architectures and the tensor types among them (Q8_0,
/// Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, F16, BF16, F32).
pub(super) const MODELS: [&str; 8] = [
    "llama_q8_0",
    "smollm2_q4_k_m",
    "qwen2_mixed32",
    "qwen3_q5_k_m",
    "gpt2_q8_0",
    "gemma2_q8_0",
    "gemma3_q4_0",
    "phi3_q8_0",
];

/// The `.gguf` file of fixture `name`.
pub(super) fn file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/gguf")
        .join(name)
        .join("model.gguf")
}

/// What transformers computed for file `name`.
fn reference(name: &str) -> Fixture {
    Fixture::read(file(name).parent().unwrap())
}

fn load(mesh: &Mesh, name: &str, sequence_parallel: bool) -> CausalLm {
    let opts = LoadOptions::default().sequence_parallel(sequence_parallel);
    CausalLm::from_gguf_with(mesh, file(name), opts).unwrap()
}

/// Logits and loss of `name` on `mesh` against transformers.
fn check_model(what: &str, mesh: &Mesh, name: &str, sequence_parallel: bool) {
    let model = load(mesh, name, sequence_parallel);
    check_model_loaded(what, &model, name, TOL);
}

/// Logits and loss of `model` against transformers' on `name`.
fn check_model_loaded(what: &str, model: &CausalLm, name: &str, tol: f64) {
    let r = reference(name);
    let (ids, targets) = (r.get::<i32>("ids"), r.get::<i32>("targets"));
    let logits = wgpu_tp::no_grad(|| model.logits(&ids, r.seq)).unwrap();
    let (got, want) = (logits.to_host().unwrap(), r.get::<f64>("logits"));
    assert_close(&format!("{what} logits"), &got, &want, tol);
    let loss = model.loss(&ids, &targets, r.seq).unwrap();
    let (got, want) = (loss.to_host().unwrap(), r.get::<f64>("loss"));
    assert_close(&format!("{what} loss"), &got, &want, tol);
}

#[test]
fn every_architecture_matches_transformers_at_p_1_to_4() {
    for name in MODELS {
        for p in 1..=4 {
            for (transport, m) in meshes(p) {
                check_model(&format!("{name} P={p} {transport}"), &m, name, false);
            }
        }
    }
}

#[test]
fn sequence_parallel_and_more_ranks_than_heads() {
    for name in ["llama_q8_0", "smollm2_q4_k_m", "phi3_q8_0"] {
        for p in [2, 3] {
            check_model(
                &format!("{name} P={p} sequence-parallel"),
                &mesh(p),
                name,
                true,
            );
        }
    }
    // Two query heads on 3 ranks; Gemma 3's one head on 2.
    check_model("qwen3_q5_k_m P=3", &mesh(3), "qwen3_q5_k_m", false);
    check_model("gemma3_q4_0 P=2", &mesh(2), "gemma3_q4_0", false);
}

#[test]
fn greedy_tokens_equal_transformers() {
    for name in MODELS {
        let r = reference(name);
        let (prompt, want) = (r.get::<i32>("prompt"), r.get::<i32>("greedy"));
        for p in [1, 3] {
            let model = load(&mesh(p), name, false);
            let got = pollster::block_on(wgpu_tp::nn::generate(
                &model,
                &prompt,
                want.len(),
                Sampling::Greedy,
                &[],
                |_| Ok(()),
            ))
            .unwrap();
            assert_eq!(got, want, "{name} P={p}: greedy tokens");
        }
    }
}

#[test]
fn quantized_weights_are_frozen_and_the_rest_gets_gradients() {
    let r = reference("smollm2_q4_k_m");
    let (ids, targets) = (r.get::<i32>("ids"), r.get::<i32>("targets"));
    let model = load(&mesh(2), "smollm2_q4_k_m", false);
    model
        .loss(&ids, &targets, r.seq)
        .unwrap()
        .backward()
        .unwrap();
    let mut quantized = 0;
    for (n, p) in model.named_parameters() {
        let grad = p.master_grad().unwrap();
        if p.value.dtype().quant().is_some() {
            quantized += 1;
            assert!(grad.is_none(), "{n}: a quantized weight got a gradient");
        } else {
            let g = grad.unwrap_or_else(|| panic!("{n}: no gradient"));
            assert!(g.iter().any(|&v| v != 0.0), "{n}: a zero gradient");
        }
    }
    assert!(quantized >= 14, "{quantized} quantized weights");
}

#[test]
fn float_matrices_keep_the_files_types() {
    let m = mesh(2);
    let model = load(&m, "qwen2_mixed32", false);
    let gguf = GgufFile::open(file("qwen2_mixed32")).unwrap();
    let count = |d: DType| {
        gguf.tensors()
            .iter()
            .filter(|t| t.dtype() == d && t.shape().len() == 2)
            .count()
    };
    let held = |d: DType| {
        model
            .named_parameters()
            .iter()
            .filter(|(_, p)| p.value.dtype() == d)
            .count()
    };
    assert!(count(DType::BF16) > 0 && count(DType::F16) > 0);
    assert_eq!(held(DType::BF16), count(DType::BF16));
    assert_eq!(held(DType::F16), 0, "F16 widens to f32");
    // Asked for Q8_0, they are quantized as they load.
    let q8 = DType::Quant(wgpu_tp::quant::QuantType::Q8_0);
    let opts = LoadOptions::default().weights(q8);
    let model = CausalLm::from_gguf_with(&m, file("qwen2_mixed32"), opts).unwrap();
    let floats = model
        .named_parameters()
        .iter()
        .filter(|(_, p)| p.shape().len() == 2 && p.value.dtype().quant().is_none())
        .count();
    assert_eq!(floats, 0, "every matrix quantized");
    // Q8_0 of the file's float weights: near, not equal.
    let r = reference("qwen2_mixed32");
    let logits = wgpu_tp::no_grad(|| model.logits(&r.get::<i32>("ids"), r.seq)).unwrap();
    let err = rel_err(&logits.to_host().unwrap(), &r.get::<f64>("logits"));
    assert!(err < 0.05, "Q8_0 logits {err} from the file's");
}

#[test]
fn the_tokenizer_and_template_come_from_the_file() {
    let t = Tokenizer::from_gguf(file("smollm2_q4_k_m")).unwrap();
    let text = "Hello wörld,  the end";
    let ids = t.encode(text).unwrap();
    assert_eq!(t.decode(&ids).unwrap(), text);
    let meta = GgufFile::open(file("smollm2_q4_k_m")).unwrap();
    let template = meta.string("tokenizer.chat_template").unwrap();
    assert_eq!(t.chat_template().is_some(), template.is_some());
}

/// `name`'s file rewritten: each metadata entry through `meta` (dropped on
/// `None`), each tensor through `tensor` (name, shape, type, bytes;
/// dropped on `None`).
fn rewrite(
    name: &str,
    label: &str,
    meta: impl Fn(&str, &Value) -> Option<Value>,
    tensor: impl Fn(&str, Vec<usize>, DType, Vec<u8>) -> Option<(Vec<usize>, DType, Vec<u8>)>,
) -> PathBuf {
    let src = GgufFile::open(file(name)).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata() {
        if let Some(v) = meta(k, v) {
            w.metadata(k.clone(), v).unwrap();
        }
    }
    for t in src.tensors() {
        let bytes = src.tensor_bytes(t.name()).unwrap().to_vec();
        if let Some((shape, dtype, bytes)) = tensor(t.name(), t.shape().to_vec(), t.dtype(), bytes)
        {
            w.tensor(t.name(), &shape, dtype, move || Ok(bytes))
                .unwrap();
        }
    }
    let dir = std::env::temp_dir().join(format!("wgpu-tp-gguf-{label}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("model.gguf");
    w.write(&path).unwrap();
    path
}

#[test]
fn bad_files_are_errors_naming_file_and_key_and_the_mesh_still_works() {
    let m = mesh(2);
    let name = "llama_q8_0";
    let keep = |_: &str, v: &Value| Some(v.clone());
    let all = |_: &str, s, d, b| Some((s, d, b));
    let expect = |path: &Path, needles: &[&str]| {
        let err = CausalLm::from_gguf(&m, path)
            .expect_err("an error")
            .to_string();
        for n in needles {
            assert!(err.contains(n), "{err:?} should name {n:?}");
        }
    };
    // Truncated: the tensor data cut short.
    let bytes = std::fs::read(file(name)).unwrap();
    let dir = std::env::temp_dir().join(format!("wgpu-tp-gguf-cut-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cut = dir.join("model.gguf");
    std::fs::write(&cut, &bytes[..bytes.len() - 1000]).unwrap();
    expect(&cut, &["model.gguf"]);
    // An architecture the crate does not run.
    let arch = rewrite(
        name,
        "arch",
        |k, v| match k {
            "general.architecture" => Some(Value::String("mamba".into())),
            _ => Some(v.clone()),
        },
        all,
    );
    expect(&arch, &["general.architecture", "mamba"]);
    // Metadata of the wrong kind.
    let kind = rewrite(
        name,
        "kind",
        |k, v| match k {
            "llama.block_count" => Some(Value::String("two".into())),
            _ => Some(v.clone()),
        },
        all,
    );
    expect(&kind, &["llama.block_count"]);
    // A required key missing.
    let missing = rewrite(
        name,
        "missing",
        |k, v| (k != "llama.embedding_length").then(|| v.clone()),
        all,
    );
    expect(&missing, &["llama.embedding_length"]);
    // A tensor whose shape disagrees with the metadata.
    let shape = rewrite(name, "shape", keep, |n, s, d, b| match n {
        "blk.1.ffn_down.weight" => Some((vec![s[0] / 2, s[1]], d, b[..b.len() / 2].to_vec())),
        _ => Some((s, d, b)),
    });
    expect(&shape, &["blk.1.ffn_down.weight", "shape"]);
    // A tensor missing.
    let gone = rewrite(name, "gone", keep, |n, s, d, b| {
        (n != "blk.0.attn_v.weight").then_some((s, d, b))
    });
    expect(&gone, &["v_proj"]);
    // No such file.
    expect(
        Path::new("/nonexistent/model.gguf"),
        &["/nonexistent/model.gguf"],
    );
    // The mesh still works.
    check_model("llama_q8_0 P=2 after errors", &m, name, false);
}
