//! Writing a Llama-family `config.json` ([`LlamaConfig::to_json`]) as
//! transformers reads it, for [`Llama::save_pretrained`](super::Llama::save_pretrained).

use serde_json::{Map, Value};

use super::config::LlamaConfig;
use crate::nn::RopeScaling;

impl LlamaConfig {
    /// The `config.json` [`Llama::save_pretrained`](super::Llama::save_pretrained)
    /// writes: `model_type`, `architectures` and every field above as
    /// transformers spells them (RoPE as `rope_theta` and `rope_scaling`,
    /// which transformers 4 reads and 5 converts), F32 weights, so
    /// `AutoModelForCausalLM.from_pretrained` builds the same model.
    pub fn to_json(&self, eos_token_ids: &[i32]) -> String {
        let arch = match self.model_type.as_str() {
            "mistral" => "MistralForCausalLM",
            "qwen2" => "Qwen2ForCausalLM",
            "qwen3" => "Qwen3ForCausalLM",
            _ => "LlamaForCausalLM",
        };
        let mut v = serde_json::json!({
            "architectures": [arch],
            "model_type": self.model_type,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": shortest(self.rms_norm_eps),
            "max_position_embeddings": self.max_position_embeddings,
            "rope_theta": self.rope.theta,
            "tie_word_embeddings": self.tie_word_embeddings,
            "mlp_bias": self.mlp_bias,
            "attention_dropout": 0.0,
            "dtype": "float32",
            "use_cache": true,
        });
        let obj = v.as_object_mut().expect("a JSON object");
        if self.model_type != "qwen2" {
            obj.insert("attention_bias".into(), self.qkv_bias.into());
        }
        if let Some(scaling) = rope_scaling_json(&self.rope.scaling) {
            obj.insert("rope_scaling".into(), scaling);
        }
        let window = self.windows.iter().copied().max().unwrap_or(0);
        match self.model_type.as_str() {
            "mistral" => {
                let w = if window > 0 {
                    Value::from(window)
                } else {
                    Value::Null
                };
                obj.insert("sliding_window".into(), w);
            }
            "qwen2" | "qwen3" => {
                obj.insert("use_sliding_window".into(), (window > 0).into());
                obj.insert(
                    "sliding_window".into(),
                    if window > 0 {
                        window.into()
                    } else {
                        Value::Null
                    },
                );
                let types: Vec<&str> = self
                    .windows
                    .iter()
                    .map(|&w| {
                        if w > 0 {
                            "sliding_attention"
                        } else {
                            "full_attention"
                        }
                    })
                    .collect();
                obj.insert("layer_types".into(), types.into());
                obj.insert("max_window_layers".into(), self.num_hidden_layers.into());
            }
            _ => {}
        }
        match eos_token_ids {
            [] => {}
            [one] => {
                obj.insert("eos_token_id".into(), (*one).into());
            }
            many => {
                obj.insert("eos_token_id".into(), many.to_vec().into());
            }
        }
        serde_json::to_string_pretty(&v).expect("JSON values always serialise") + "\n"
    }
}

/// The shortest decimal of `v` as an f64, so `1e-5f32` is written `1e-5`.
fn shortest(v: f32) -> f64 {
    v.to_string().parse().unwrap_or(v as f64)
}

/// `rope_scaling` as hub files spell it (`rope_type` and the older `type`).
fn rope_scaling_json(s: &RopeScaling) -> Option<Value> {
    let mut m = Map::new();
    let kind = match s {
        RopeScaling::Default => return None,
        RopeScaling::Linear { factor } => {
            m.insert("factor".into(), (*factor).into());
            "linear"
        }
        RopeScaling::Dynamic { factor } => {
            m.insert("factor".into(), (*factor).into());
            "dynamic"
        }
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings,
        } => {
            m.insert("factor".into(), (*factor).into());
            m.insert("low_freq_factor".into(), (*low_freq_factor).into());
            m.insert("high_freq_factor".into(), (*high_freq_factor).into());
            m.insert(
                "original_max_position_embeddings".into(),
                (*original_max_position_embeddings).into(),
            );
            "llama3"
        }
        RopeScaling::Yarn {
            factor,
            original_max_position_embeddings,
            attention_factor,
            beta_fast,
            beta_slow,
            mscale,
            mscale_all_dim,
            truncate,
        } => {
            let opt = [
                ("factor", factor),
                ("attention_factor", attention_factor),
                ("beta_fast", beta_fast),
                ("beta_slow", beta_slow),
                ("mscale", mscale),
                ("mscale_all_dim", mscale_all_dim),
            ];
            for (k, v) in opt {
                if let Some(v) = v {
                    m.insert(k.into(), (*v).into());
                }
            }
            m.insert(
                "original_max_position_embeddings".into(),
                (*original_max_position_embeddings).into(),
            );
            if !truncate {
                m.insert("truncate".into(), false.into());
            }
            "yarn"
        }
    };
    m.insert("rope_type".into(), kind.into());
    m.insert("type".into(), kind.into());
    Some(Value::Object(m))
}
