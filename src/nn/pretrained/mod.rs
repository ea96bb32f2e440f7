//! Hugging Face model directories, for any family: the weight files
//! (`model.safetensors`, or `model.safetensors.index.json` and its shards)
//! memory-mapped and read one tensor at a time (`files.rs`), and F32
//! safetensors written one parameter at a time (`save.rs`). A family's own
//! naming and layout rules (prefixes to strip, tensors stored transposed,
//! buffers to skip) live with the family in [`models`](crate::models).

pub(crate) mod files;
pub(crate) mod save;

/// The weights file of an unsharded checkpoint.
pub(crate) const MODEL_FILE: &str = "model.safetensors";
/// The index of a sharded checkpoint (`weight_map`: tensor → shard file).
pub(crate) const INDEX_FILE: &str = "model.safetensors.index.json";
/// The config file.
pub(crate) const CONFIG_FILE: &str = "config.json";
