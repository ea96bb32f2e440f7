//! Hugging Face GPT-2 directories. The fixtures under
//! `tests/fixtures/gpt2_tiny/` (written by `tests/fixtures/gpt2_reference.py`
//! with the logits of an independent f64 numpy GPT-2) load at P = 1..4 on
//! both transports and give those logits and greedy tokens: HF's own layout
//! (F32, mask buffers), a `transformer.`-prefixed F16 file with
//! `lm_head.weight`, and a sharded BF16 one. `save_pretrained` writes HF's
//! layout (`Conv1D` `[in, out]`, no prefix, F32, tied head) and reads back
//! across world sizes. Bad directories are errors naming file and tensor,
//! change no model, and leave the mesh usable.

use std::path::{Path, PathBuf};

mod bad_dirs;
mod config;

use crate::util::{Rng, assert_close, masters, mesh, meshes};
use safetensors::{Dtype, SafeTensors};
use wgpu_tp::models::{CausalLm, Gpt2Config, LoadOptions};
use wgpu_tp::nn::{ConfigFile, Params, Sampling};

const TOL: f64 = 1e-5;
const VARIANTS: [&str; 3] = ["f32", "f16_prefixed", "bf16_sharded"];

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/gpt2_tiny")
        .join(name)
}

/// What `gpt2_reference.py` computed in f64.
struct Reference {
    ids: Vec<i32>,
    seq: usize,
    prompt: Vec<i32>,
    json: serde_json::Value,
}

impl Reference {
    fn read() -> Reference {
        let text = std::fs::read_to_string(fixture("reference.json")).unwrap();
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        let ints = |v: &serde_json::Value| -> Vec<i32> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_i64().unwrap() as i32)
                .collect()
        };
        Reference {
            ids: ints(&json["ids"]),
            seq: json["seq"].as_u64().unwrap() as usize,
            prompt: ints(&json["prompt"]),
            json,
        }
    }

    fn logits(&self, variant: &str) -> Vec<f64> {
        let v = self.json[variant]["logits"].as_array().unwrap();
        v.iter().map(|x| x.as_f64().unwrap()).collect()
    }

    fn greedy(&self, variant: &str) -> Vec<i32> {
        let v = self.json[variant]["greedy"].as_array().unwrap();
        v.iter().map(|x| x.as_i64().unwrap() as i32).collect()
    }

    /// `gpt`'s logits of the reference ids equal `variant`'s f64 logits.
    fn check(&self, what: &str, gpt: &mut CausalLm, variant: &str) {
        let got = gpt.logits(&self.ids, self.seq).unwrap().to_host().unwrap();
        assert_close(what, &got, &self.logits(variant), TOL);
    }
}

/// A fresh empty directory under the target dir for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("pretrained")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The tiny GPT-2 of the fixtures: vocab 37, n_ctx 16, width 24, 3 heads, 2 layers.
fn tiny_config() -> Gpt2Config {
    Gpt2Config::new(37, 16, 24, 3, 2)
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
    let gpt = CausalLm::new(&mesh(3), tiny_config(), rng.next_u64()).unwrap();
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
    assert!(
        json["n_inner"].is_null(),
        "ffn = 4·n_embd is written as null"
    );
    assert_eq!(json["activation_function"], "gelu_new");
    assert_eq!(json["layer_norm_epsilon"], 1e-5);
    let back = Gpt2Config::from_json(&text, "config.json").unwrap();
    assert_eq!(back, tiny_config());
}

#[test]
fn save_pretrained_round_trips_across_world_sizes() {
    let mut rng = Rng::fresh("save_pretrained_round_trip");
    let mut cfg = tiny_config();
    cfg.n_inner = Some(40);
    let gpt = CausalLm::new(&mesh(3), cfg, rng.next_u64()).unwrap();
    let dir = scratch("round_trip");
    gpt.save_pretrained(&dir).unwrap();
    let want = masters(&gpt);
    for p in [1, 2, 4] {
        let back = CausalLm::from_pretrained(&mesh(p), &dir).unwrap();
        assert_eq!(back.config::<Gpt2Config>().unwrap().ffn(), 40);
        assert_eq!(masters(&back), want, "P={p}");
    }
}

#[test]
fn fixtures_match_f64_gpt2_p1_2_3_4_both_transports() {
    let reference = Reference::read();
    let new = reference.greedy("f32").len();
    for variant in VARIANTS {
        for p in [1, 2, 3, 4] {
            for (transport, m) in meshes(p) {
                let what = format!("{variant} P={p} {transport}");
                let mut gpt = CausalLm::from_pretrained(&m, fixture(variant)).unwrap();
                let c = gpt.config::<Gpt2Config>().unwrap();
                assert_eq!(
                    (
                        c.vocab_size,
                        c.n_positions,
                        c.n_embd,
                        c.n_head,
                        c.n_layer,
                        c.ffn()
                    ),
                    (37, 16, 24, 3, 2, 96)
                );
                reference.check(&what, &mut gpt, variant);
                // The reference does not stop at the eos id (36).
                let tokens = pollster::block_on(wgpu_tp::nn::generate(
                    &gpt,
                    &reference.prompt,
                    new,
                    Sampling::Greedy,
                    &[],
                    |_| Ok(()),
                ))
                .unwrap();
                assert_eq!(tokens, reference.greedy(variant), "{what}: greedy tokens");
            }
        }
    }
}

#[test]
fn fixtures_hold_the_same_model_in_three_layouts() {
    // The prefixed F16 and sharded BF16 files are the F32 weights rounded,
    // so the test above compares three different files, not one three times.
    let m = mesh(1);
    let f32s = masters(&CausalLm::from_pretrained(&m, fixture("f32")).unwrap());
    for (variant, ulp) in [
        ("f16_prefixed", 2f32.powi(-11)),
        ("bf16_sharded", 2f32.powi(-8)),
    ] {
        let other = masters(&CausalLm::from_pretrained(&m, fixture(variant)).unwrap());
        let mut differ = 0;
        for ((name, a), (_, b)) in f32s.iter().zip(&other) {
            for (x, y) in a.iter().zip(b) {
                assert!(
                    (x - y).abs() <= ulp * x.abs().max(1e-4),
                    "{variant} {name}: {x} vs {y}"
                );
                differ += (x != y) as usize;
            }
        }
        assert!(
            differ > 1000,
            "{variant}: only {differ} values were rounded"
        );
    }
}

#[test]
fn load_pretrained_into_a_sequence_parallel_model() {
    let reference = Reference::read();
    let mut cfg = Gpt2Config::read(fixture("f32/config.json")).unwrap();
    let sp = LoadOptions::default().sequence_parallel(true);
    for (transport, m) in meshes(3) {
        let mut gpt = CausalLm::new_with(&m, cfg.clone(), 7, sp).unwrap();
        gpt.set_mode(false, 0);
        gpt.load_pretrained(fixture("f32")).unwrap();
        reference.check(
            &format!("sequence-parallel P=3 {transport}"),
            &mut gpt,
            "f32",
        );
    }
    // Sizes the weights cannot show (here the heads) must agree too.
    cfg.n_head = 4;
    let mut gpt = CausalLm::new(&mesh(2), cfg, 7).unwrap();
    let before = masters(&gpt);
    let err = gpt.load_pretrained(fixture("f32")).unwrap_err().to_string();
    assert!(
        err.contains("config.json") && err.contains("from_pretrained"),
        "{err}"
    );
    assert_eq!(masters(&gpt), before, "a refused load changes nothing");
}

#[test]
fn save_pretrained_at_p3_loads_at_p2_with_the_same_logits() {
    let reference = Reference::read();
    for variant in ["f32", "f16_prefixed"] {
        let gpt = CausalLm::from_pretrained(&mesh(3), fixture(variant)).unwrap();
        let dir = scratch(&format!("p3_to_p2_{variant}"));
        gpt.save_pretrained(&dir).unwrap();
        let names: Vec<String> =
            SafeTensors::deserialize(&std::fs::read(dir.join("model.safetensors")).unwrap())
                .unwrap()
                .names()
                .iter()
                .map(|n| n.to_string())
                .collect();
        assert!(
            names
                .iter()
                .all(|n| !n.starts_with("transformer.") && n != "lm_head.weight"),
            "{names:?}"
        );
        for (transport, m) in meshes(2) {
            let mut back = CausalLm::from_pretrained(&m, &dir).unwrap();
            assert_eq!(masters(&back), masters(&gpt), "{variant} {transport}");
            reference.check(
                &format!("{variant} saved at P=3, loaded at P=2 {transport}"),
                &mut back,
                variant,
            );
        }
    }
}

#[test]
fn save_pretrained_keeps_the_config_it_was_read_with() {
    let hf = Gpt2Config::read(fixture("f32/config.json")).unwrap();
    assert_eq!(
        (hf.bos_token_id, hf.eos_token_id, hf.resid_pdrop),
        (Some(36), Some(36), 0.1)
    );
    let gpt = CausalLm::from_pretrained(&mesh(2), fixture("f32")).unwrap();
    assert_eq!(gpt.eos_token_ids(), [36], "config.json's eos id");
    let dir = scratch("kept_config");
    gpt.save_pretrained(&dir).unwrap();
    assert_eq!(Gpt2Config::read(dir.join("config.json")).unwrap(), hf);
    let back = CausalLm::from_pretrained(&mesh(1), &dir).unwrap();
    assert_eq!(masters(&back), masters(&gpt));
    assert_eq!(back.eos_token_ids(), [36]);
}

#[test]
fn gpt2_generation_stops_at_the_eos_id_of_config_json() {
    // The fixture's config.json names eos 36 (it has no
    // generation_config.json), and the reference's greedy continuation of
    // the prompt reaches 36 at its second token: generation stops there, as
    // transformers' does, on both transports and cached or not.
    let reference = Reference::read();
    let full = reference.greedy("f32");
    let stop = full
        .iter()
        .position(|&t| t == 36)
        .expect("the reference reaches eos")
        + 1;
    for (transport, m) in meshes(2) {
        let gpt = CausalLm::from_pretrained(&m, fixture("f32")).unwrap();
        assert_eq!(gpt.eos_token_ids(), [36], "{transport}");
        let cached = gpt
            .generate(&reference.prompt, full.len(), Sampling::Greedy)
            .unwrap();
        assert_eq!(cached, full[..stop], "{transport}: cached, stopped at eos");
        let recomputed = gpt
            .generate_uncached(&reference.prompt, full.len(), Sampling::Greedy)
            .unwrap();
        assert_eq!(recomputed, cached, "{transport}: recomputed");
    }
}
