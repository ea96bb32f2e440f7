//! Hugging Face GPT-2 checkpoints: a directory with `config.json` and
//! `model.safetensors` (or `model.safetensors.index.json` and its shards),
//! read by [`Gpt::from_pretrained`] and written by [`Gpt::save_pretrained`].
//!
//! Hugging Face's GPT-2 keeps `attn.c_attn`, `attn.c_proj`, `mlp.c_fc` and
//! `mlp.c_proj` as `Conv1D` weights `[in, out]` (`y = x·W + b`); this crate's
//! layers are `[out, in]` (`y = x·Wᵀ + b`, like `nn.Linear`), so those four
//! are transposed on the way in and out. Every other name and shape is the
//! same (`wte`, `wpe`, `h.{i}.ln_1`, `ln_f`, ...); files may prefix names
//! with `transformer.`, carry the causal-mask buffers `h.{i}.attn.bias` /
//! `attn.masked_bias` (ignored) and `lm_head.weight` (must equal `wte`: the
//! head is tied). The crate's own checkpoints ([`save_safetensors`]) stay
//! `[out, in]`.
//!
//! [`save_safetensors`]: crate::nn::save_safetensors

mod config;
pub(crate) mod files;
mod load;
pub(crate) mod save;

use std::path::Path;

pub use config::HfGpt2Config;

use super::gpt::{Gpt, GptConfig};
use crate::device::Mesh;
use crate::error::Result;

/// The weights file of an unsharded checkpoint.
pub(crate) const MODEL_FILE: &str = "model.safetensors";
/// The index of a sharded checkpoint (`weight_map`: tensor → shard file).
pub(crate) const INDEX_FILE: &str = "model.safetensors.index.json";
/// The config file.
pub(crate) const CONFIG_FILE: &str = "config.json";

/// Whether Hugging Face stores parameter `name` (our naming) as a `Conv1D`
/// weight, `[in, out]`.
fn is_conv1d(name: &str) -> bool {
    [
        ".attn.c_attn.weight",
        ".attn.c_proj.weight",
        ".mlp.c_fc.weight",
        ".mlp.c_proj.weight",
    ]
    .iter()
    .any(|s| name.ends_with(s))
}

/// The shape Hugging Face stores parameter `name` of our `shape` with.
fn hf_shape(name: &str, shape: &[usize]) -> Vec<usize> {
    if is_conv1d(name) {
        shape.iter().rev().copied().collect()
    } else {
        shape.to_vec()
    }
}

/// `[rows, cols]` row-major → `[cols, rows]` row-major.
fn transpose(data: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; data.len()];
    for (r, row) in data.chunks_exact(cols.max(1)).enumerate().take(rows) {
        for (c, &v) in row.iter().enumerate() {
            out[c * rows + r] = v;
        }
    }
    out
}

impl Gpt {
    /// Load a Hugging Face GPT-2 directory (`config.json` and
    /// `model.safetensors` or a sharded `model.safetensors.index.json`) onto
    /// `mesh`, at any world size. F32, F16 and BF16 weights are widened to
    /// f32 masters. Every file, name, dtype and shape is checked before any
    /// device memory is used, and a bad directory is an
    /// [`Error::Checkpoint`](crate::Error::Checkpoint) naming the file and
    /// tensor; the mesh stays usable. Tensors are read one at a time from a
    /// memory map, so the host never holds a second copy of the model (the
    /// model is first built with zeros, which each load overwrites in
    /// place). The model uses f32 activations without sequence
    /// parallelism or dropout; for other settings build a [`Gpt`] and call
    /// [`Gpt::load_pretrained`].
    pub fn from_pretrained(mesh: &Mesh, dir: impl AsRef<Path>) -> Result<Gpt> {
        let ckpt = load::HfCheckpoint::open(dir.as_ref())?;
        let config = ckpt.gpt_config()?;
        let plan = ckpt.plan(&load::expected_params(&config))?;
        // Every value is overwritten below: skip the random draws.
        let mut gpt = Gpt::zeroed(mesh, config)?;
        ckpt.load_into(&mut gpt, &plan)?;
        Ok(gpt)
    }

    /// Load a Hugging Face GPT-2 directory into this model, whose sizes must
    /// match `config.json` (activation dtype, sequence parallelism and
    /// dropout are the model's own). All checks run before any parameter
    /// changes; see [`Gpt::from_pretrained`].
    pub fn load_pretrained(&mut self, dir: impl AsRef<Path>) -> Result<()> {
        let ckpt = load::HfCheckpoint::open(dir.as_ref())?;
        ckpt.check_config(self.config())?;
        let plan = ckpt.plan(&load::model_params(self))?;
        ckpt.load_into(self, &plan)
    }

    /// Write this model as a Hugging Face GPT-2 directory: `config.json`
    /// (`model_type: "gpt2"`, `architectures: ["GPT2LMHeadModel"]`) and
    /// `model.safetensors` (F32, `Conv1D` weights `[in, out]`, names without
    /// a prefix, the head tied to `wte`), which
    /// `transformers.GPT2LMHeadModel.from_pretrained(dir)` loads. Creates
    /// `dir` if needed; one parameter at a time is gathered to the host. In a
    /// multi-process mesh every process calls it and only process 0 writes.
    pub fn save_pretrained(&self, dir: impl AsRef<Path>) -> Result<()> {
        self.save_pretrained_with(dir, &HfGpt2Config::from(self.config()))
    }

    /// [`Gpt::save_pretrained`] with a `config.json` of your own (e.g. one
    /// naming `eos_token_id`, or the config a model was loaded from), which
    /// must describe this model: sizes, heads, activation and epsilon are
    /// checked before anything is written.
    pub fn save_pretrained_with(&self, dir: impl AsRef<Path>, config: &HfGpt2Config) -> Result<()> {
        load::check_same_model(config, self.config(), "the config to save")?;
        let dir = dir.as_ref();
        // Only process 0 of a multi-process mesh writes; all gather.
        let writes = super::checkpoint::writes_files(self);
        if writes {
            std::fs::create_dir_all(dir)?;
        }
        save::write_model(self, &dir.join(MODEL_FILE))?;
        if !writes {
            return Ok(());
        }
        save::write_atomic(&dir.join(CONFIG_FILE), config.to_json().as_bytes())
    }
}

/// The [`GptConfig`] a Hugging Face directory describes (reads only
/// `config.json`).
pub fn pretrained_config(dir: impl AsRef<Path>) -> Result<GptConfig> {
    HfGpt2Config::read(dir.as_ref().join(CONFIG_FILE))?.to_gpt_config()
}
