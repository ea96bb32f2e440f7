//! Block-quantized weights as llama.cpp's ggml stores them, on the host:
//! the formats ([`QuantType`]), how their blocks sit in a device buffer
//! ([`layout`]). Pure host code with no GPU, below every other layer.

pub mod layout;
mod types;

pub use self::types::QuantType;
