//! [`CausalLm`]: a causal language model of any supported family, picked
//! by the `model_type` of a Hugging Face directory's `config.json`.

use std::path::Path;

use super::LoadOptions;
use super::gpt2::Gpt;
use super::llama::{LLAMA_FAMILY, Llama};
use crate::device::Mesh;
use crate::error::{Error, Result};
use crate::nn::{Parameter, Params, Sampling};
use crate::tensor::DTensor;

/// A model of one of the supported families.
// One value per program: boxing the larger variant would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum CausalLm {
    /// GPT-2 (`model_type` `gpt2`).
    Gpt2(Gpt),
    /// The Llama family (`llama`, `mistral`, `qwen2`, `qwen3`).
    Llama(Llama),
}

impl CausalLm {
    /// Load `dir` onto `mesh`, the family chosen by `config.json`'s
    /// `model_type`; another `model_type` is an error naming it.
    pub fn from_pretrained(mesh: &Mesh, dir: impl AsRef<Path>) -> Result<CausalLm> {
        Self::from_pretrained_with(mesh, dir, LoadOptions::default())
    }

    /// [`CausalLm::from_pretrained`] with [`LoadOptions`] (the weights'
    /// dtype, sequence parallelism), whichever the family.
    pub fn from_pretrained_with(
        mesh: &Mesh,
        dir: impl AsRef<Path>,
        opts: LoadOptions,
    ) -> Result<CausalLm> {
        let dir = dir.as_ref();
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error::Checkpoint(format!("{}: cannot read it ({e})", path.display())))?;
        let json: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| Error::Checkpoint(format!("{}: not valid JSON ({e})", path.display())))?;
        match json.get("model_type").and_then(|v| v.as_str()) {
            Some("gpt2") => Ok(CausalLm::Gpt2(Gpt::from_pretrained_with(mesh, dir, opts)?)),
            Some(t) if LLAMA_FAMILY.contains(&t) => Ok(CausalLm::Llama(
                Llama::from_pretrained_with(mesh, dir, opts)?,
            )),
            other => Err(Error::Checkpoint(format!(
                "{}: model_type {other:?} is not supported; supported: \"gpt2\" and {LLAMA_FAMILY:?}",
                path.display()
            ))),
        }
    }

    /// Vocabulary size.
    pub fn vocab_size(&self) -> usize {
        match self {
            CausalLm::Gpt2(m) => m.config().vocab,
            CausalLm::Llama(m) => m.config().vocab_size,
        }
    }

    /// Longest sequence the model takes.
    pub fn context(&self) -> usize {
        match self {
            CausalLm::Gpt2(m) => m.config().n_ctx,
            CausalLm::Llama(m) => m.config().max_position_embeddings,
        }
    }

    /// The ids that end generation (a Llama directory's eos ids; none for GPT-2).
    pub fn eos_token_ids(&self) -> &[i32] {
        match self {
            CausalLm::Gpt2(_) => &[],
            CausalLm::Llama(m) => &m.generation_config().eos_token_ids,
        }
    }

    /// One line about the model: family, sizes, heads.
    pub fn describe(&self) -> String {
        match self {
            CausalLm::Gpt2(m) => {
                let c = m.config();
                format!(
                    "gpt2: {} layers · hidden {} · {} heads · vocab {} · context {}",
                    c.layers, c.hidden, c.heads, c.vocab, c.n_ctx
                )
            }
            CausalLm::Llama(m) => {
                let c = m.config();
                format!(
                    "{}: {} layers · hidden {} · {} query / {} key-value heads of {} · SwiGLU {} · vocab {} · context {}{}",
                    c.model_type,
                    c.num_hidden_layers,
                    c.hidden_size,
                    c.num_attention_heads,
                    c.num_key_value_heads,
                    c.head_dim,
                    c.intermediate_size,
                    c.vocab_size,
                    c.max_position_embeddings,
                    if m.lm_head.is_none() {
                        " · tied head"
                    } else {
                        ""
                    }
                )
            }
        }
    }

    /// Logits of every position (`[ids.len(), vocab]`, vocab-sharded).
    pub fn logits(&self, ids: &[i32], seq: usize) -> Result<DTensor> {
        match self {
            CausalLm::Gpt2(m) => m.logits(ids, seq),
            CausalLm::Llama(m) => m.logits(ids, seq),
        }
    }

    /// Continue `prompt` by up to `max_new` tokens (the new tokens).
    pub fn generate_with(
        &mut self,
        prompt: &[i32],
        max_new: usize,
        sampling: Sampling,
        on_token: impl FnMut(i32) -> Result<()>,
    ) -> Result<Vec<i32>> {
        match self {
            CausalLm::Gpt2(m) => m.generate_with(prompt, max_new, sampling, on_token),
            CausalLm::Llama(m) => m.generate_with(prompt, max_new, sampling, on_token),
        }
    }
}

/// The family's own parameters and names (checkpoints, optimisers,
/// [`Params::store_weights_as`]).
impl Params for CausalLm {
    fn visit_params<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Parameter)) {
        match self {
            CausalLm::Gpt2(m) => m.visit_params(prefix, f),
            CausalLm::Llama(m) => m.visit_params(prefix, f),
        }
    }

    fn visit_params_mut<'a>(
        &'a mut self,
        prefix: &str,
        f: &mut dyn FnMut(String, &'a mut Parameter),
    ) {
        match self {
            CausalLm::Gpt2(m) => m.visit_params_mut(prefix, f),
            CausalLm::Llama(m) => m.visit_params_mut(prefix, f),
        }
    }
}
