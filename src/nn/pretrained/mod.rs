//! Hugging Face model directories, for any family: the weight files
//! (`model.safetensors`, or `model.safetensors.index.json` and its shards)
//! memory-mapped and read one tensor at a time (`files.rs`), loaded into a
//! [`Decoder`](crate::nn::Decoder) of any family (`load.rs`), and written
//! back as F32 safetensors one parameter at a time (`save.rs`); small JSON
//! files read with their size checked first (`json.rs`). A family's own
//! naming and layout rules (prefixes to strip, tensors stored transposed or
//! fused, buffers to skip) are its config's
//! ([`DecoderConfig::sanitize`](crate::nn::DecoderConfig::sanitize),
//! [`DecoderConfig::stored`](crate::nn::DecoderConfig::stored)).

pub(crate) mod files;
pub(crate) mod gguf;
pub(crate) mod json;
mod load;
pub(crate) mod save;

/// The weights file of an unsharded checkpoint.
pub(crate) const MODEL_FILE: &str = "model.safetensors";
/// The index of a sharded checkpoint (`weight_map`: tensor → shard file).
pub(crate) const INDEX_FILE: &str = "model.safetensors.index.json";
/// The config file.
pub(crate) const CONFIG_FILE: &str = "config.json";
