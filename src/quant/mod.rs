//! Block-quantized weights as llama.cpp's ggml stores them, on the host:
//! the formats ([`QuantType`]), how their blocks sit in a device buffer
//! ([`layout`]), and f32 to blocks and back ([`quantize`],
//! [`quantize_rows`], [`dequantize`], [`dequantize_rows`]) bit for bit as
//! gguf-py and ggml's reference C code do it, rows split over the host's
//! cores. Pure host code with no GPU, below every other layer.

mod check;
mod dequantize;
mod k_quants;
pub mod layout;
mod parallel;
mod quantize;
mod types;

pub use self::dequantize::{bf16_to_f32, dequantize, dequantize_rows, f16_to_f32};
pub use self::quantize::{quantize, quantize_rows};
pub use self::types::QuantType;
