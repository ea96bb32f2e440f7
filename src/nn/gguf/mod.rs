//! GGUF, llama.cpp's model file format, as a container: metadata
//! key/values and named tensors, read ([`GgufFile`]) and written
//! ([`GgufWriter`]). Mapping a model family's keys and tensor names to and
//! from GGUF is the model layer's business, not this module's.
//!
//! A file is a 24-byte header (magic `GGUF`, version, tensor count,
//! metadata count), the metadata entries, the tensor infos (name, ggml
//! `ne` with the innermost dimension first, ggml type id, offset from the
//! data start), zero padding to the alignment (`general.alignment`, else
//! 32), then each tensor's bytes at its aligned offset. Everything is
//! little-endian; versions 2 and 3 lay little-endian files out the same.
//!
//! ```
//! use wgpu_tp::DType;
//! use wgpu_tp::nn::gguf::{GgufFile, GgufWriter};
//!
//! let mut w = GgufWriter::new();
//! w.metadata("general.architecture", "llama")?
//!     .metadata("llama.block_count", 2u32)?;
//! // Bytes come from a callback, called when the file is written.
//! w.tensor("output_norm.weight", &[4], DType::F32, || Ok(vec![0; 16]))?;
//! let file = GgufFile::from_bytes("model.gguf", w.to_bytes()?)?;
//! assert_eq!(file.u32("llama.block_count")?, Some(2));
//! assert_eq!(file.tensor_bytes("output_norm.weight")?.len(), 16);
//! # Ok::<(), wgpu_tp::Error>(())
//! ```
//!
//! Files:
//! - `value_type.rs`: [`ValueType`], the metadata kinds; `value.rs`:
//!   [`Value`], [`Array`], metadata values;
//! - `ggml_type.rs`: ggml tensor type ids, their names and the [`DType`]s
//!   they map to (F32, F16, BF16 and the [`QuantType`]s);
//! - `parse.rs`: bounds-checked reads of the file's fields;
//! - `reader.rs`: [`GgufFile`]: opening and checking a file, metadata,
//!   tensor bytes and row ranges; `tensor_info.rs`: [`TensorInfo`] and the
//!   checks on each tensor info;
//! - `getters.rs`: typed metadata getters ([`FromValue`]);
//! - `writer.rs`: [`GgufWriter`].
//!
//! [`DType`]: crate::DType
//! [`QuantType`]: crate::quant::QuantType

mod getters;
mod ggml_type;
mod parse;
mod reader;
mod tensor_info;
mod value;
mod value_type;
mod writer;

pub use getters::FromValue;
pub use ggml_type::{ggml_type_id, ggml_type_name};
pub use reader::GgufFile;
pub use tensor_info::TensorInfo;
pub use value::{Array, Value};
pub use value_type::ValueType;
pub use writer::GgufWriter;

/// The first four bytes of every GGUF file.
const MAGIC: &[u8; 4] = b"GGUF";
/// The key that sets the tensor data alignment.
pub const ALIGNMENT_KEY: &str = "general.alignment";
/// The alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u32 = 32;
