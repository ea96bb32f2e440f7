//! Hugging Face GPT-2 directories: a directory with `config.json` and
//! `model.safetensors` (or `model.safetensors.index.json` and its shards),
//! read by [`Gpt::from_pretrained`] and written by [`Gpt::save_pretrained`].
//! GPT-2's own naming and layout (the `transformer.` prefix, `Conv1D`
//! weights, the causal-mask buffers) are [`sanitize`](super::sanitize)'s;
//! the files themselves are read and written by the generic
//! `nn::pretrained` reader and writer.
//!
//! The crate's own checkpoints ([`save_safetensors`]) stay `[out, in]`.
//!
//! [`save_safetensors`]: crate::nn::save_safetensors

use std::path::Path;

use super::hf_config::HfGpt2Config;
use super::load;
use super::sanitize::{hf_shape, to_hf_values};
use super::{Gpt, GptConfig};
use crate::device::Mesh;
use crate::error::Result;
use crate::models::LoadOptions;
use crate::models::load_options::keep_weights;
use crate::nn::checkpoint::writes_files;
use crate::nn::pretrained::save::{write_atomic, write_params};
use crate::nn::pretrained::{CONFIG_FILE, MODEL_FILE};

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
    /// place). The model uses f32 activations and weights without sequence
    /// parallelism or dropout; [`Gpt::from_pretrained_with`] sets the
    /// weights' dtype and sequence parallelism, and for other settings
    /// build a [`Gpt`] and call [`Gpt::load_pretrained`].
    pub fn from_pretrained(mesh: &Mesh, dir: impl AsRef<Path>) -> Result<Gpt> {
        Self::from_pretrained_with(mesh, dir, LoadOptions::default())
    }

    /// [`Gpt::from_pretrained`] with [`LoadOptions`]: the dtype the weight
    /// matrices are kept in (bf16 or f16 for generation: half the memory
    /// and the bytes a token reads; `wte` serves the lookup and the tied
    /// head as stored) and sequence parallelism.
    pub fn from_pretrained_with(
        mesh: &Mesh,
        dir: impl AsRef<Path>,
        opts: LoadOptions,
    ) -> Result<Gpt> {
        let ckpt = load::HfCheckpoint::open(dir.as_ref())?;
        let mut config = ckpt.gpt_config()?;
        config.sequence_parallel = opts.sequence_parallel;
        let plan = ckpt.plan(&load::expected_params(&config))?;
        // Every value is overwritten below: skip the random draws.
        let mut gpt = Gpt::zeroed(mesh, config)?;
        ckpt.load_into(&mut gpt, &plan)?;
        keep_weights(&mut gpt, mesh, opts.weight_dtype)?;
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
        let writes = writes_files(self);
        if writes {
            std::fs::create_dir_all(dir)?;
        }
        write_model(self, &dir.join(MODEL_FILE))?;
        if !writes {
            return Ok(());
        }
        write_atomic(&dir.join(CONFIG_FILE), config.to_json().as_bytes())
    }
}

/// The [`GptConfig`] a Hugging Face directory describes (reads only
/// `config.json`).
pub fn pretrained_config(dir: impl AsRef<Path>) -> Result<GptConfig> {
    HfGpt2Config::read(dir.as_ref().join(CONFIG_FILE))?.to_gpt_config()
}

/// Write every parameter of `gpt` to `path` (F32, Hugging Face's names and
/// layout). In a multi-process mesh only process 0 writes; the others take
/// part in the same gathers, in the same order, and write nothing.
fn write_model(gpt: &Gpt, path: &Path) -> Result<()> {
    write_params(gpt, path, &hf_shape, &to_hf_values)
}
