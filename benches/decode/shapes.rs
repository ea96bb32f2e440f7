//! The model shapes the decode bench builds (`WGPU_TP_DECODE_MODEL`).

use wgpu_tp::Mesh;
use wgpu_tp::models::{CausalLm, Gpt2Config, LlamaConfig};
use wgpu_tp::nn::num_parameters;

/// A model shape to build at each world size.
#[derive(Clone)]
pub enum Shape {
    Gpt(Gpt2Config),
    Llama(LlamaConfig),
}

/// (name, shape, prompt length).
pub fn config() -> (&'static str, Shape, usize) {
    let llama = |v, h, f, l, q, kv, theta: f64| {
        let mut c = LlamaConfig::new(v, h, f, l, q, kv);
        c.rope.theta = theta;
        c
    };
    match std::env::var("WGPU_TP_DECODE_MODEL").as_deref() {
        Ok("small") => (
            "small",
            Shape::Gpt(Gpt2Config::new(4096, 256, 256, 4, 2)),
            8,
        ),
        Ok("smollm2") => {
            let c = llama(49152, 576, 1536, 30, 9, 3, 100000.0);
            ("SmolLM2-135M", Shape::Llama(c), 128)
        }
        Ok("llama3.2-1b") => {
            let c = llama(128_256, 2048, 8192, 16, 32, 8, 500000.0);
            ("Llama-3.2-1B", Shape::Llama(c), 128)
        }
        Ok("qwen2.5") => {
            let mut c = llama(151_936, 896, 4864, 24, 14, 2, 1e6);
            c.qkv_bias = true;
            ("Qwen2.5-0.5B", Shape::Llama(c), 128)
        }
        _ => (
            "GPT-2 124M",
            Shape::Gpt(Gpt2Config::new(50257, 1024, 768, 12, 12)),
            8,
        ),
    }
}

impl Shape {
    pub fn describe(&self) -> String {
        match self {
            Shape::Gpt(c) => format!(
                "vocab {}, context {}, width {}, {} heads, {} layers",
                c.vocab_size, c.n_positions, c.n_embd, c.n_head, c.n_layer
            ),
            Shape::Llama(c) => format!(
                "vocab {}, width {}, {} layers, {} / {} heads, ffn {}, tied",
                c.vocab_size,
                c.hidden_size,
                c.num_hidden_layers,
                c.num_attention_heads,
                c.num_key_value_heads,
                c.intermediate_size
            ),
        }
    }

    pub fn build(&self, mesh: &Mesh) -> wgpu_tp::Result<CausalLm> {
        match self {
            Shape::Gpt(c) => CausalLm::new(mesh, c.clone(), 0),
            Shape::Llama(c) => CausalLm::new(mesh, c.clone(), 0),
        }
    }

    /// Bytes of all the f32 parameters.
    pub fn param_bytes(&self) -> u64 {
        match self {
            Shape::Gpt(c) => 4 * num_parameters(c) as u64,
            Shape::Llama(c) => 4 * num_parameters(c) as u64,
        }
    }

    /// Bytes one token reads from the weights: all of them but GPT-2's
    /// `wpe` (one row).
    pub fn weight_bytes(&self) -> u64 {
        match self {
            Shape::Gpt(c) => {
                4 * (num_parameters(c) as u64 - ((c.n_positions - 1) * c.n_embd) as u64)
            }
            Shape::Llama(c) => 4 * num_parameters(c) as u64,
        }
    }
}
