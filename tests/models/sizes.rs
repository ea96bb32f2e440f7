//! Configurations past memory are errors before anything is allocated:
//! `Gpt::new` and `Llama::new` count their parameters (GPT-2 124M's,
//! SmolLM2-135M's and Qwen2.5-0.5B's shapes give Hugging Face's counts)
//! and check the bytes against the host's available memory on a CPU
//! adapter, in well under a second; the mesh works afterwards.

use std::time::Instant;

use crate::util::mesh;
use wgpu_tp::models::{Gpt, GptConfig, Llama, LlamaConfig};
use wgpu_tp::{Error, Mesh};

#[test]
fn parameter_counts_are_hugging_faces() {
    assert_eq!(
        GptConfig::new(50257, 1024, 768, 12, 12).num_parameters(),
        124_439_808
    );
    let smol = LlamaConfig::new(49152, 576, 1536, 30, 9, 3);
    assert_eq!(smol.num_parameters(), 134_515_008);
    let mut qwen = LlamaConfig::new(151_936, 896, 4864, 24, 14, 2);
    qwen.qkv_bias = true;
    assert_eq!(qwen.num_parameters(), 494_032_768);
}

/// `build` must fail fast with an out-of-memory error naming bytes.
fn refused<T: std::fmt::Debug>(what: &str, build: impl FnOnce() -> wgpu_tp::Result<T>) {
    let t = Instant::now();
    let err = build().expect_err(what);
    assert!(
        matches!(err, Error::OutOfMemory { .. }),
        "{what}: expected OutOfMemory, got {err}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("bytes") && msg.contains("available"),
        "{what}: {msg}"
    );
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
        let gpt2 = |f: &dyn Fn(&mut GptConfig)| {
            let mut c = GptConfig::new(50257, 1024, 768, 12, 12);
            f(&mut c);
            c
        };
        let cases: [(&str, GptConfig); 4] = [
            ("vocab 2^30", gpt2(&|c| c.vocab = 1 << 30)),
            (
                "hidden 2^20",
                gpt2(&|c| (c.hidden, c.ffn) = (1 << 20, 1 << 22)),
            ),
            ("vocab usize::MAX", gpt2(&|c| c.vocab = usize::MAX)),
            ("2^20 layers", gpt2(&|c| c.layers = 1 << 20)),
        ];
        for (what, c) in cases {
            refused(&format!("Gpt {what} P={p}"), || Gpt::new(&m, c, 0));
        }
        // The mesh still builds a model that fits.
        Gpt::new(&m, GptConfig::new(64, 16, 16, 2, 1), 0).unwrap();
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
            ("vocab 2^30", LlamaConfig::new(1 << 30, 576, 1536, 30, 9, 3)),
            (
                "vocab usize::MAX",
                LlamaConfig::new(usize::MAX, 576, 1536, 30, 9, 3),
            ),
            (
                "hidden 2^20",
                LlamaConfig::new(49152, 1 << 20, 1536, 2, 8, 2),
            ),
            (
                "2^20 layers",
                LlamaConfig::new(49152, 576, 1536, 1 << 20, 9, 3),
            ),
        ];
        for (what, c) in cases {
            refused(&format!("Llama {what} P={p}"), || Llama::new(&m, c, 0));
        }
        Llama::new(&m, LlamaConfig::new(64, 16, 24, 1, 4, 2), 0).unwrap();
    }
}
