//! ggml's tensor type ids as GGUF tensor infos store them: the ones that
//! map to a [`DType`] (F32, F16, BF16 and the [`QuantType`]s), and the
//! names of all the others, so a file holding one is refused by name.

use crate::element::DType;
use crate::quant::QuantType;

/// Every id of `enum ggml_type` (gguf-py `GGMLQuantizationType`), with
/// its name; `None` for ids ggml retired.
const NAMES: [Option<&str>; 42] = [
    Some("F32"),
    Some("F16"),
    Some("Q4_0"),
    Some("Q4_1"),
    None, // Q4_2, removed
    None, // Q4_3, removed
    Some("Q5_0"),
    Some("Q5_1"),
    Some("Q8_0"),
    Some("Q8_1"),
    Some("Q2_K"),
    Some("Q3_K"),
    Some("Q4_K"),
    Some("Q5_K"),
    Some("Q6_K"),
    Some("Q8_K"),
    Some("IQ2_XXS"),
    Some("IQ2_XS"),
    Some("IQ3_XXS"),
    Some("IQ1_S"),
    Some("IQ4_NL"),
    Some("IQ3_S"),
    Some("IQ2_S"),
    Some("IQ4_XS"),
    Some("I8"),
    Some("I16"),
    Some("I32"),
    Some("I64"),
    Some("F64"),
    Some("IQ1_M"),
    Some("BF16"),
    None, // Q4_0_4_4, removed
    None, // Q4_0_4_8, removed
    None, // Q4_0_8_8, removed
    Some("TQ1_0"),
    Some("TQ2_0"),
    None, // IQ4_NL_4_4, removed
    None, // IQ4_NL_4_8, removed
    None, // IQ4_NL_8_8, removed
    Some("MXFP4"),
    Some("NVFP4"),
    Some("Q1_0"),
];

/// ggml's name of type `id` (`"IQ2_XXS"`), if ggml has (still) such a type.
pub fn ggml_type_name(id: u32) -> Option<&'static str> {
    NAMES.get(id as usize).copied().flatten()
}

/// The ggml type id GGUF stores for `dtype`; `None` for `I32`, which the
/// crate neither reads from nor writes to GGUF.
pub fn ggml_type_id(dtype: DType) -> Option<u32> {
    match dtype {
        DType::F32 => Some(0),
        DType::F16 => Some(1),
        DType::BF16 => Some(30),
        DType::Quant(q) => Some(q.ggml_id()),
        DType::I32 => None,
    }
}

/// The names of the types the crate reads and writes, for error messages.
fn supported() -> String {
    let mut names = vec!["F32", "F16", "BF16"];
    names.extend(QuantType::ALL.iter().map(|q| q.ggml_name()));
    names.join(", ")
}

/// The [`DType`] of ggml type `id`, or why the crate cannot hold it.
pub(crate) fn dtype_of(id: u32) -> Result<DType, String> {
    let dtype = match id {
        0 => Some(DType::F32),
        1 => Some(DType::F16),
        30 => Some(DType::BF16),
        _ => QuantType::from_ggml_id(id).map(DType::Quant),
    };
    dtype.ok_or_else(|| match ggml_type_name(id) {
        Some(name) => format!(
            "{name} (ggml type {id}) is not supported: supported are {}",
            supported()
        ),
        None if (id as usize) < NAMES.len() => {
            format!(
                "ggml type {id} was removed from ggml: supported are {}",
                supported()
            )
        }
        None => format!("ggml type {id} is unknown: supported are {}", supported()),
    })
}

/// Weights per block and bytes per block of `dtype` as GGUF stores it
/// (1 weight a block for the plain floats).
pub(crate) fn block(dtype: DType) -> (usize, usize) {
    match dtype {
        DType::Quant(q) => (q.block_len(), q.block_bytes()),
        d => (1, d.size_bytes()),
    }
}

/// ggml's name of `dtype` (`"Q8_0"`, `"F32"`), for messages.
pub(crate) fn dtype_name(dtype: DType) -> String {
    match ggml_type_id(dtype).and_then(ggml_type_name) {
        Some(name) => name.to_string(),
        None => dtype.to_string(),
    }
}
