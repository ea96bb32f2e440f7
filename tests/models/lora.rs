//! LoRA against PEFT itself (`tests/fixtures/lora/make_lora.py`, float64):
//! PEFT's adapter directories for a Llama with GQA, a Qwen2 with biases
//! (bf16 weights) and GPT-2 (Conv1D, `fan_in_fan_out`) load and give
//! PEFT's logits, loss, every adapter gradient by PEFT's name and the
//! adapters after two AdamW steps, at P = 1..4 on both transports, at every
//! P up to the Llama's heads and sequence-parallel; the merged model equals
//! `merge_and_unload()`'s; frozen bases get no gradient; our adapters
//! written and read back; bad adapters and configs refused, changing nothing.

use std::path::{Path, PathBuf};

use safetensors::SafeTensors;
use wgpu_tp::Mesh;
use wgpu_tp::models::{CausalLm, LoadOptions};
use wgpu_tp::nn::{AdamW, LoraConfig, Params};

use crate::util::{Fixture, assert_close, mesh, meshes, shared_mesh};

const TOL: f64 = 1e-5;
/// (fixture, base directory under tests/fixtures).
const FIXTURES: [(&str, &str); 3] = [
    ("llama_gqa", "hf/llama_gqa"),
    ("qwen2_bias", "hf/qwen2_bias_bf16"),
    ("gpt2", "gpt2_tiny/f32"),
];

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// PEFT's outputs for fixture `name`.
fn reference(name: &str) -> Fixture {
    Fixture::read(&fixtures().join("lora").join(name))
}

fn adapted(m: &Mesh, name: &str, base: &str, sequence_parallel: bool) -> CausalLm {
    let opts = LoadOptions::default().sequence_parallel(sequence_parallel);
    let mut model = CausalLm::from_pretrained_with(m, fixtures().join(base), opts).unwrap();
    model
        .load_adapter(fixtures().join("lora").join(name))
        .unwrap();
    model
}

/// PEFT's name of our parameter `name` (GPT2LMHeadModel's blocks are
/// under `transformer.`).
fn peft(fixture: &str, name: &str) -> String {
    match fixture {
        "gpt2" => format!("transformer.{name}"),
        _ => name.to_string(),
    }
}

fn is_adapter(name: &str) -> bool {
    name.ends_with(".lora_A.weight") || name.ends_with(".lora_B.weight")
}

/// Logits, loss, adapter gradients (frozen parameters none) and, when
/// `steps`, the adapters after two AdamW steps, against PEFT.
fn check(what: &str, m: &Mesh, (name, base): (&str, &str), sequence_parallel: bool, steps: bool) {
    let r = reference(name);
    let mut model = adapted(m, name, base, sequence_parallel);
    let (ids, targets) = (r.i32s("ids"), r.i32s("targets"));
    let logits = wgpu_tp::no_grad(|| model.logits(&ids, r.seq)).unwrap();
    assert_close(
        &format!("{what} logits"),
        &logits.to_host().unwrap(),
        &r.f64s("logits"),
        TOL,
    );
    let mut opt = AdamW::new(1e-2);
    for step in 0..2 {
        let loss = model.loss(&ids, &targets, r.seq).unwrap();
        if step == 0 {
            assert_close(
                &format!("{what} loss"),
                &loss.to_host().unwrap(),
                &r.f64s("loss"),
                TOL,
            );
        }
        loss.backward().unwrap();
        if step == 0 {
            let mut adapters = 0;
            for (n, p) in model.named_parameters() {
                if is_adapter(&n) {
                    let g = p.master_grad().unwrap().expect("an adapter gradient");
                    assert_close(
                        &format!("{what} grad {n}"),
                        &g,
                        &r.f64s(&format!("grad.{}", peft(name, &n))),
                        TOL,
                    );
                    adapters += 1;
                } else {
                    assert!(p.grad().is_none(), "{what}: frozen {n} got a gradient");
                }
            }
            assert!(adapters >= 16, "{what}: {adapters} adapter tensors");
        }
        if !steps {
            return;
        }
        opt.step(&mut model).unwrap();
        model.zero_grad();
    }
    for (n, p) in model.named_parameters() {
        if is_adapter(&n) {
            let want = r.f64s(&format!("after2.{}", peft(name, &n)));
            assert_close(
                &format!("{what} {n} after 2 AdamW steps"),
                &p.master().unwrap(),
                &want,
                TOL,
            );
        }
    }
}

#[test]
fn peft_adapters_match_peft_at_p_1_to_4() {
    for fixture in FIXTURES {
        for p in 1..=4 {
            for (transport, m) in meshes(p) {
                let what = format!("{} P={p} {transport}", fixture.0);
                check(&what, &m, fixture, false, true);
            }
        }
    }
}

#[test]
fn peft_adapters_match_at_every_p_up_to_the_heads_and_sequence_parallel() {
    // llama_gqa: 4 query heads over 2 key/value heads.
    for p in 5..=6 {
        check(
            &format!("llama_gqa P={p}"),
            &shared_mesh(p),
            FIXTURES[0],
            false,
            false,
        );
    }
    for fixture in [FIXTURES[0], FIXTURES[1]] {
        for p in [2, 3] {
            let what = format!("{} P={p} sequence-parallel", fixture.0);
            check(&what, &mesh(p), fixture, true, true);
        }
    }
}

#[test]
fn merged_equals_merge_and_unload_and_unmerge_restores() {
    for (name, base) in FIXTURES {
        let r = reference(name);
        let ids = r.i32s("ids");
        for p in [1, 3] {
            let mut model = adapted(&mesh(p), name, base, false);
            let before = model.named_parameters()[1].1.master().unwrap();
            model.merge().unwrap();
            assert!(model.merge().is_err(), "merging twice is refused");
            let logits = wgpu_tp::no_grad(|| model.logits(&ids, r.seq)).unwrap();
            let what = format!("{name} P={p} merged");
            assert_close(
                &what,
                &logits.to_host().unwrap(),
                &r.f64s("logits_merged"),
                TOL,
            );
            model.unmerge().unwrap();
            let logits = wgpu_tp::no_grad(|| model.logits(&ids, r.seq)).unwrap();
            let what = format!("{name} P={p} unmerged");
            assert_close(&what, &logits.to_host().unwrap(), &r.f64s("logits"), TOL);
            let after = model.named_parameters()[1].1.master().unwrap();
            let before: Vec<f64> = before.iter().map(|&v| v as f64).collect();
            assert_close(&format!("{what} base weight"), &after, &before, 1e-6);
        }
    }
}

#[test]
fn saved_adapters_read_back_at_another_p() {
    for (name, base) in FIXTURES {
        let r = reference(name);
        let ids = r.i32s("ids");
        // WGPU_TP_KEEP_ADAPTERS=DIR keeps them for
        // tests/fixtures/lora/check_peft_reads_ours.py.
        let keep = std::env::var_os("WGPU_TP_KEEP_ADAPTERS").map(PathBuf::from);
        let dir = match &keep {
            Some(k) => k.join(name),
            None => {
                std::env::temp_dir().join(format!("wgpu-tp-lora-{name}-{}", std::process::id()))
            }
        };
        let model = adapted(&mesh(3), name, base, false);
        model.save_adapter(&dir).unwrap();
        let cfg: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join("adapter_config.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(
            cfg["fan_in_fan_out"],
            name == "gpt2",
            "{name}: fan_in_fan_out"
        );
        // PEFT's names, all of them.
        let bytes = std::fs::read(dir.join("adapter_model.safetensors")).unwrap();
        let theirs = std::fs::read(
            fixtures()
                .join("lora")
                .join(name)
                .join("adapter_model.safetensors"),
        )
        .unwrap();
        let names = |b: &[u8]| {
            let mut n: Vec<String> = SafeTensors::deserialize(b)
                .unwrap()
                .names()
                .into_iter()
                .map(str::to_string)
                .collect();
            n.sort();
            n
        };
        assert_eq!(
            names(&bytes),
            names(&theirs),
            "{name}: tensor names as PEFT writes them"
        );
        let mut back = CausalLm::from_pretrained(&mesh(2), fixtures().join(base)).unwrap();
        back.load_adapter(&dir).unwrap();
        let logits = wgpu_tp::no_grad(|| back.logits(&ids, r.seq)).unwrap();
        assert_close(
            &format!("{name} read back"),
            &logits.to_host().unwrap(),
            &r.f64s("logits"),
            TOL,
        );
        if keep.is_none() {
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}

#[test]
fn fresh_adapters_change_nothing_until_trained_and_bad_requests_are_refused() {
    let (name, base) = FIXTURES[0];
    let r = reference(name);
    let (ids, targets) = (r.i32s("ids"), r.i32s("targets"));
    let m = mesh(2);
    let mut model = CausalLm::from_pretrained(&m, fixtures().join(base)).unwrap();
    let plain = wgpu_tp::no_grad(|| model.logits(&ids, r.seq))
        .unwrap()
        .to_host()
        .unwrap();
    let count = model.named_parameters().len();
    // Refused, changing nothing.
    for (config, want) in [
        (
            LoraConfig::new(4, 8.0, &["qkv"]),
            "no linear layer named \"qkv\"",
        ),
        (LoraConfig::new(0, 8.0, &["q_proj"]), "r must be at least 1"),
        (LoraConfig::new(1000, 8.0, &["q_proj"]), "larger than"),
        (LoraConfig::new(4, 8.0, &[]), "at least one target"),
    ] {
        let e = model.add_lora(&config).unwrap_err().to_string();
        assert!(e.contains(want), "{e}");
        assert_eq!(model.named_parameters().len(), count);
        assert!(model.named_parameters().iter().all(|(_, p)| !p.is_frozen()));
    }
    // Another base's adapter: GPT-2's names.
    let e = model
        .load_adapter(fixtures().join("lora/gpt2"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("no linear layer named"), "{e}");
    // Same names, other shapes: Qwen2's adapter has other widths.
    let e = model
        .load_adapter(fixtures().join("lora/qwen2_bias"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("another model") || e.contains("larger"), "{e}");
    assert_eq!(
        model.named_parameters().len(),
        count,
        "a refused adapter leaves no parameters"
    );
    assert!(model.lora_config().is_none());
    assert!(model.merge().is_err(), "nothing to merge");
    // B starts at zero: the adapted model computes the base's logits.
    let config = LoraConfig::new(2, 4.0, &["q_proj", "v_proj", "down_proj"]);
    model.add_lora(&config).unwrap();
    assert!(model.add_lora(&config).is_err(), "adapters twice");
    let same = wgpu_tp::no_grad(|| model.logits(&ids, r.seq))
        .unwrap()
        .to_host()
        .unwrap();
    assert_eq!(same, plain, "B = 0 adds nothing");
    let names: Vec<String> = model
        .named_parameters()
        .iter()
        .map(|(n, _)| n.clone())
        .collect();
    assert!(names.contains(&"model.layers.0.self_attn.q_proj.lora_A.weight".to_string()));
    assert!(names.contains(&"model.layers.1.mlp.down_proj.lora_B.weight".to_string()));
    // One step moves the adapters only.
    let before: Vec<Vec<f32>> = model
        .named_parameters()
        .iter()
        .map(|(_, p)| p.master().unwrap())
        .collect();
    model.set_mode(true, 0);
    model
        .loss(&ids, &targets, r.seq)
        .unwrap()
        .backward()
        .unwrap();
    AdamW::new(1e-2).step(&mut model).unwrap();
    for ((n, p), old) in model.named_parameters().iter().zip(&before) {
        let moved = p.master().unwrap() != *old;
        assert_eq!(moved, is_adapter(n), "{n}: moved = {moved}");
    }
    assert!(model.remove_lora());
    assert_eq!(model.named_parameters().len(), count);
}

#[test]
fn data_parallel_and_zero_1_reduce_and_shard_adapters_only() {
    use wgpu_tp::nn::{DataParallel, ZeroAdamW};
    let (name, base) = FIXTURES[0];
    let r = reference(name);
    let (ids, targets) = (r.i32s("ids"), r.i32s("targets"));
    let seq = r.seq;
    // One model on the whole batch (two rows), one AdamW step.
    let mut whole = adapted(&mesh(1), name, base, false);
    whole.loss(&ids, &targets, seq).unwrap().backward().unwrap();
    AdamW::new(1e-2).step(&mut whole).unwrap();
    // dp = 2 replicas of tp = 2, a row each, averaged, ZeRO-1.
    let m = mesh(4).with_axes(&[("dp", 2), ("tp", 2)]).unwrap();
    let ddp = DataParallel::new(&m, "dp").unwrap();
    let mut zero = ZeroAdamW::new(&ddp, 1e-2);
    let mut reps: Vec<CausalLm> = m
        .axis_groups("tp")
        .unwrap()
        .iter()
        .map(|g| adapted(g, name, base, false))
        .collect();
    for (d, rep) in reps.iter().enumerate() {
        let rows = d * seq..(d + 1) * seq;
        let loss = rep.loss(&ids[rows.clone()], &targets[rows], seq).unwrap();
        loss.backward().unwrap();
    }
    let mut refs: Vec<&mut dyn Params> = reps.iter_mut().map(|r| r as &mut dyn Params).collect();
    ddp.average_gradients(&mut refs).unwrap();
    zero.step(&mut refs).unwrap();
    let adapter_values: usize = reps[0]
        .named_parameters()
        .iter()
        .filter(|(n, _)| is_adapter(n))
        .map(|(_, p)| p.value.shards().iter().map(|s| s.len()).sum::<usize>())
        .sum();
    let state: u64 = zero.state_bytes().values().sum();
    assert_eq!(
        state,
        8 * adapter_values as u64,
        "ZeRO-1 holds m and v of the adapters only"
    );
    let want = whole.named_parameters();
    for (d, rep) in reps.iter().enumerate() {
        for ((n, p), (_, w)) in rep.named_parameters().iter().zip(&want) {
            let w: Vec<f64> = w.master().unwrap().iter().map(|&v| v as f64).collect();
            assert_close(
                &format!("dp replica {d} {n}"),
                &p.master().unwrap(),
                &w,
                TOL,
            );
            if d == 1 {
                let first = reps[0]
                    .named_parameters()
                    .into_iter()
                    .find(|(m, _)| m == n)
                    .unwrap()
                    .1;
                assert!(
                    p.master().unwrap() == first.master().unwrap(),
                    "{n}: replicas bit-identical"
                );
            }
        }
    }
}

/// Every adapter parameter set to the same non-zero values (B too).
fn set_adapters(model: &mut CausalLm) {
    for (n, p) in model.named_parameters_mut() {
        if is_adapter(&n) {
            let len: usize = p.shape().iter().product();
            let v: Vec<f32> = (0..len)
                .map(|i| ((i * 13 % 17) as f32 - 8.0) * 0.02)
                .collect();
            p.load_master(&v).unwrap();
        }
    }
}

/// The tolerance of an adapter's gradient against the f32 base's: query
/// and key adapters' gradients are sums that cancel (softmax's), so the
/// base products' rounding order (blocks dequantized in the quantized
/// kernels) shows in them at up to 2.1e-4 (measured: Q4_K at P = 3;
/// Q8_0 4.3e-5). Every other adapter: 2e-5, two f32 computations each
/// held to 1e-5 of the exact value (measured up to 1.03e-5).
fn qk_tol(name: &str) -> f64 {
    if name.contains("q_proj") || name.contains("k_proj") {
        5e-4
    } else {
        2.0 * TOL
    }
}

#[test]
fn qlora_on_quantized_and_bf16_bases_equals_f32_holding_the_same_weights() {
    use wgpu_tp::DType;
    use wgpu_tp::models::config_from_json;
    use wgpu_tp::quant::QuantType;
    let json = r#"{"model_type": "llama", "vocab_size": 67, "hidden_size": 256,
        "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "max_position_embeddings": 64, "rms_norm_eps": 1e-5}"#;
    let config = || config_from_json(json, "llama").unwrap();
    let lora = LoraConfig::new(
        8,
        16.0,
        &[
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        ],
    );
    let ids: Vec<i32> = (0..14).map(|i| (i * 7 + 3) % 67).collect();
    let targets: Vec<i32> = (0..14).map(|i| (i * 5 + 1) % 67).collect();
    for dtype in [
        DType::Quant(QuantType::Q8_0),
        DType::BF16,
        DType::Quant(QuantType::Q4K),
    ] {
        for p in [1, 3] {
            let what = format!("{dtype} base P={p}");
            let m = mesh(p);
            let opts = LoadOptions::default();
            let mut narrow = CausalLm::new_with(&m, config(), 5, opts.weights(dtype)).unwrap();
            let mut wide = CausalLm::new_with(&m, config(), 5, opts).unwrap();
            let held: Vec<Vec<f32>> = narrow
                .named_parameters()
                .iter()
                .map(|(_, p)| p.master().unwrap())
                .collect();
            for ((_, w), v) in wide.named_parameters_mut().into_iter().zip(&held) {
                w.load_master(v).unwrap();
            }
            for model in [&mut narrow, &mut wide] {
                model.add_lora(&lora).unwrap();
                set_adapters(model);
            }
            let mut losses = Vec::new();
            for model in [&narrow, &wide] {
                let loss = model.loss(&ids, &targets, 7).unwrap();
                losses.push(loss.to_host().unwrap()[0]);
                loss.backward().unwrap();
            }
            assert_close(
                &format!("{what} loss"),
                &[losses[0]],
                &[losses[1] as f64],
                TOL,
            );
            for ((n, a), (_, b)) in narrow
                .named_parameters()
                .iter()
                .zip(wide.named_parameters())
            {
                if is_adapter(n) {
                    let g: Vec<f64> = b
                        .master_grad()
                        .unwrap()
                        .unwrap()
                        .iter()
                        .map(|&v| v as f64)
                        .collect();
                    assert_close(
                        &format!("{what} grad {n}"),
                        &a.master_grad().unwrap().unwrap(),
                        &g,
                        qk_tol(n),
                    );
                } else {
                    assert!(a.grad().is_none(), "{what}: frozen {n} got a gradient");
                }
            }
            for model in [&mut narrow, &mut wide] {
                AdamW::new(1e-2).step(model).unwrap();
            }
            for ((n, a), (_, b)) in narrow
                .named_parameters()
                .iter()
                .zip(wide.named_parameters())
            {
                // AdamW turns rounding-level gradient differences into
                // lr-sized steps (as in families.rs): 1e-4 after a step,
                // where the gradient is not a cancelling one.
                if qk_tol(n) > 2.0 * TOL {
                    continue;
                }
                let v: Vec<f64> = b.master().unwrap().iter().map(|&v| v as f64).collect();
                assert_close(
                    &format!("{what} {n} after a step"),
                    &a.master().unwrap(),
                    &v,
                    1e-4,
                );
            }
            let quantized = narrow
                .named_parameters()
                .iter()
                .filter(|(_, p)| p.value.dtype() == dtype)
                .count();
            assert!(quantized >= 7, "{what}: {quantized} weights in {dtype}");
            assert!(
                narrow.merge().is_err() || dtype == DType::BF16,
                "{what}: a quantized base does not merge"
            );
        }
    }
}
