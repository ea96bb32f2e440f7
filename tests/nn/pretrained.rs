//! Hugging Face GPT-2 directories: `save_pretrained` writes HF's layout
//! (`Conv1D` weights `[in, out]`, names without a prefix, F32, a tied head,
//! `config.json` with `model_type: "gpt2"`), `from_pretrained` reads it back
//! at any world size.

use std::path::PathBuf;

use crate::util::{Rng, masters, mesh};
use safetensors::{Dtype, SafeTensors};
use wgpu_tp::nn::{Gpt, GptConfig, HfGpt2Config, Module};

/// A fresh empty directory under the target dir for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pretrained").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The tiny GPT-2 of the fixtures: vocab 37, n_ctx 16, width 24, 3 heads, 2 layers.
fn tiny_config() -> GptConfig {
    GptConfig::new(37, 16, 24, 3, 2)
}

const CONV1D: [&str; 4] = [
    "attn.c_attn.weight",
    "attn.c_proj.weight",
    "mlp.c_fc.weight",
    "mlp.c_proj.weight",
];

#[test]
fn save_pretrained_writes_hf_layout() {
    let mut rng = Rng::fresh("save_pretrained_layout");
    let gpt = Gpt::new(&mesh(3), tiny_config(), rng.next_u64()).unwrap();
    let dir = scratch("layout");
    gpt.save_pretrained(&dir).unwrap();
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let want = masters(&gpt);
    assert_eq!(st.len(), want.len(), "one tensor per parameter, no lm_head");
    for ((name, v), (_, p)) in want.iter().zip(gpt.named_parameters()) {
        let t = st.tensor(name).unwrap();
        assert_eq!(t.dtype(), Dtype::F32, "{name}");
        let got: Vec<f32> = bytemuck::pod_collect_to_vec(t.data());
        if CONV1D.iter().any(|s| name.ends_with(s)) {
            let (out, inp) = (p.shape()[0], p.shape()[1]);
            assert_eq!(t.shape(), [inp, out], "{name} is Conv1D [in, out]");
            for o in 0..out {
                for i in 0..inp {
                    assert_eq!(got[i * out + o], v[o * inp + i], "{name}[{o}, {i}]");
                }
            }
        } else {
            assert_eq!(t.shape(), p.shape(), "{name}");
            assert_eq!(&got, v, "{name}");
        }
    }
    let text = std::fs::read_to_string(dir.join("config.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["model_type"], "gpt2");
    assert_eq!(json["architectures"][0], "GPT2LMHeadModel");
    assert_eq!(json["n_embd"], 24);
    assert_eq!(json["n_head"], 3);
    assert_eq!(json["n_layer"], 2);
    assert_eq!(json["n_positions"], 16);
    assert_eq!(json["vocab_size"], 37);
    assert!(json["n_inner"].is_null(), "ffn = 4·n_embd is written as null");
    assert_eq!(json["activation_function"], "gelu_new");
    assert_eq!(json["layer_norm_epsilon"], 1e-5);
    let parsed = HfGpt2Config::from_json(&text, "config.json").unwrap();
    let back = parsed.to_gpt_config().unwrap();
    assert_eq!(
        (back.vocab, back.n_ctx, back.hidden, back.heads, back.layers, back.ffn),
        (37, 16, 24, 3, 2, 96)
    );
}

#[test]
fn save_pretrained_round_trips_across_world_sizes() {
    let mut rng = Rng::fresh("save_pretrained_round_trip");
    let mut cfg = tiny_config();
    cfg.ffn = 40;
    let gpt = Gpt::new(&mesh(3), cfg, rng.next_u64()).unwrap();
    let dir = scratch("round_trip");
    gpt.save_pretrained(&dir).unwrap();
    let want = masters(&gpt);
    for p in [1, 2, 4] {
        let back = Gpt::from_pretrained(&mesh(p), &dir).unwrap();
        assert_eq!(back.config().ffn, 40);
        assert_eq!(masters(&back), want, "P={p}");
    }
}
