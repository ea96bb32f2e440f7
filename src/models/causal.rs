//! [`CausalLm::from_pretrained`]: a Hugging Face directory of any family,
//! chosen by `config.json`'s `model_type`.

use std::path::Path;

use super::{CausalLm, config_from_json};
use crate::device::Mesh;
use crate::error::Result;
use crate::nn::LoadOptions;
use crate::nn::hf_config::read_text;

impl CausalLm {
    /// Load the Hugging Face directory `dir` (`config.json`, and
    /// `model.safetensors` or a sharded index; F32, F16 or BF16, widened
    /// to f32 masters) onto `mesh`, at any world size, the family chosen by
    /// `config.json`'s `model_type`. Every file, name, dtype and shape is
    /// checked before any parameter is written, and a bad directory is an
    /// [`Error::Checkpoint`](crate::Error::Checkpoint) naming the file and
    /// tensor; the mesh stays usable. Tensors are read one at a time from a
    /// memory map. The model starts in evaluation mode.
    pub fn from_pretrained(mesh: &Mesh, dir: impl AsRef<Path>) -> Result<CausalLm> {
        Self::from_pretrained_with(mesh, dir, LoadOptions::default())
    }

    /// [`CausalLm::from_pretrained`] with [`LoadOptions`]: the dtype the
    /// weight matrices are kept in (bf16 or f16 for generation: half the
    /// memory and the bytes a token reads) and sequence parallelism.
    pub fn from_pretrained_with(
        mesh: &Mesh,
        dir: impl AsRef<Path>,
        opts: LoadOptions,
    ) -> Result<CausalLm> {
        let dir = dir.as_ref();
        let config = read_config(dir)?;
        CausalLm::from_pretrained_as(mesh, config, dir, opts)
    }

    /// Load the Hugging Face directory `dir` into this model, whose sizes
    /// must be those its `config.json` gives (the model keeps its own
    /// settings: sequence parallelism, dropout, dtypes). All checks run
    /// before any parameter changes.
    pub fn load_pretrained(&mut self, dir: impl AsRef<Path>) -> Result<()> {
        let dir = dir.as_ref();
        let config = read_config(dir)?;
        self.load_pretrained_as(&*config, dir)
    }
}

/// The config of `dir/config.json`, by its family.
fn read_config(dir: &Path) -> Result<Box<dyn crate::nn::DecoderConfig>> {
    if !dir.is_dir() {
        return Err(crate::Error::Checkpoint(format!(
            "{}: no such directory; pass a Hugging Face model directory (config.json + \
             model.safetensors)",
            dir.display()
        )));
    }
    let path = dir.join("config.json");
    config_from_json(&read_text(&path)?, &path.display().to_string())
}
