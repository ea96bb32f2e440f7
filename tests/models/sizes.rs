//! Configurations past memory are errors before anything is allocated:
//! `CausalLm::new` counts the parameters (GPT-2 124M's, SmolLM2-135M's and
//! Qwen2.5-0.5B's shapes give Hugging Face's counts) and checks the bytes
//! against the host's available memory on a CPU adapter, in well under a
//! second; sizes no model has (past 2^24) are refused as from a
//! config.json, without allocating; the mesh works afterwards.

use std::time::Instant;

use crate::util::mesh;
use wgpu_tp::models::{CausalLm, Gpt2Config, LlamaConfig};
use wgpu_tp::nn::{DecoderConfig, num_parameters};
use wgpu_tp::{Error, Mesh};

#[test]
fn parameter_counts_are_hugging_faces() {
    let gpt2 = Gpt2Config::new(50257, 1024, 768, 12, 12);
    assert_eq!(num_parameters(&gpt2), 124_439_808);
    let smol = LlamaConfig::new(49152, 576, 1536, 30, 9, 3);
    assert_eq!(num_parameters(&smol), 134_515_008);
    let mut qwen = LlamaConfig::new(151_936, 896, 4864, 24, 14, 2);
    qwen.qkv_bias = true;
    assert_eq!(num_parameters(&qwen), 494_032_768);
}

/// `CausalLm::new` of `config` must fail fast: out of memory naming
/// bytes, or (`implausible`) refusing a size no model has.
fn refused(what: &str, m: &Mesh, config: impl DecoderConfig, implausible: bool) {
    let t = Instant::now();
    let err = CausalLm::new(m, config, 0).expect_err(what);
    let msg = err.to_string();
    if implausible {
        assert!(
            matches!(err, Error::InvalidArgument { .. }) && msg.contains("implausibly large"),
            "{what}: expected a size error, got {err}"
        );
    } else {
        assert!(
            matches!(err, Error::OutOfMemory { .. }),
            "{what}: expected OutOfMemory, got {err}"
        );
        assert!(
            msg.contains("bytes") && msg.contains("available"),
            "{what}: {msg}"
        );
    }
    // Generous: the check itself is arithmetic (a slow shared CI machine).
    assert!(t.elapsed().as_secs() < 10, "{what}: took {:?}", t.elapsed());
}

/// The CPU adapters' device memory is the host's: the only memory the
/// crate can measure (wgpu reports none for GPUs).
fn cpu(m: &Mesh) -> bool {
    let cpu = m.ranks()[0].device().is_cpu();
    if !cpu {
        eprintln!("[wgpu-tp tests] sizes: skipped, not a CPU adapter");
    }
    cpu
}

#[test]
fn gpt_sizes_past_memory_are_errors_p1_3() {
    for p in [1, 3] {
        let m = mesh(p);
        if !cpu(&m) {
            return;
        }
        let gpt2 = |f: &dyn Fn(&mut Gpt2Config)| {
            let mut c = Gpt2Config::new(50257, 1024, 768, 12, 12);
            f(&mut c);
            c
        };
        let cases = [
            ("vocab 2^24", gpt2(&|c| c.vocab_size = 1 << 24), false),
            (
                "hidden 2^14",
                gpt2(&|c| (c.n_embd, c.n_head) = (1 << 14, 16)),
                false,
            ),
            ("2^20 layers", gpt2(&|c| c.n_layer = 1 << 20), false),
            ("vocab 2^30", gpt2(&|c| c.vocab_size = 1 << 30), true),
            (
                "hidden 2^30",
                gpt2(&|c| (c.n_embd, c.n_head) = (1 << 30, 16)),
                true,
            ),
            (
                "vocab usize::MAX",
                gpt2(&|c| c.vocab_size = usize::MAX),
                true,
            ),
        ];
        for (what, c, implausible) in cases {
            refused(&format!("GPT-2 {what} P={p}"), &m, c, implausible);
        }
        // The mesh still builds a model that fits.
        CausalLm::new(&m, Gpt2Config::new(64, 16, 16, 2, 1), 0).unwrap();
    }
}

#[test]
fn llama_sizes_past_memory_are_errors_p1_2() {
    for p in [1, 2] {
        let m = mesh(p);
        if !cpu(&m) {
            return;
        }
        let cases = [
            (
                "vocab 2^24",
                LlamaConfig::new(1 << 24, 4096, 1536, 30, 8, 2),
                false,
            ),
            (
                "2^20 layers",
                LlamaConfig::new(49152, 576, 1536, 1 << 20, 9, 3),
                false,
            ),
            (
                "2^40 layers",
                LlamaConfig::new(49152, 576, 1536, 1 << 40, 9, 3),
                true,
            ),
            (
                "vocab 2^30",
                LlamaConfig::new(1 << 30, 576, 1536, 30, 9, 3),
                true,
            ),
            (
                "vocab usize::MAX",
                LlamaConfig::new(usize::MAX, 576, 1536, 30, 9, 3),
                true,
            ),
            (
                "hidden 2^30",
                LlamaConfig::new(49152, 1 << 30, 1536, 2, 8, 2),
                true,
            ),
        ];
        for (what, c, implausible) in cases {
            refused(&format!("Llama {what} P={p}"), &m, c, implausible);
        }
        CausalLm::new(&m, LlamaConfig::new(64, 16, 24, 1, 4, 2), 0).unwrap();
    }
}
