//! GPT-2's checkpoint rules, the one place that knows how Hugging Face's
//! GPT-2 files differ from this crate's parameters (as mlx-lm's
//! `sanitize`):
//!
//! - names may carry the `transformer.` prefix (`GPT2LMHeadModel`'s files
//!   do, `GPT2Model`'s do not); it is stripped;
//! - the causal-mask buffers `h.{i}.attn.bias` / `h.{i}.attn.masked_bias`
//!   are not parameters and are skipped;
//! - `attn.c_attn`, `attn.c_proj`, `mlp.c_fc` and `mlp.c_proj` are `Conv1D`
//!   weights `[in, out]` (`y = x·W + b`), while this crate's layers are
//!   `[out, in]` (`y = x·Wᵀ + b`, like `nn.Linear`), so those four are
//!   transposed on the way in and out.
//!
//! Every other name and shape is the same (`wte`, `wpe`, `h.{i}.ln_1`,
//! `ln_f`, ...); `lm_head.weight`, when present, must equal `wte` (the head
//! is tied; the loader checks it).

use crate::error::{Error, Result};
use crate::nn::pretrained::files::WeightFiles;

/// Hugging Face GPT-2's files as this crate's names: the `transformer.`
/// prefix stripped (a name present with and without it is an error) and the
/// causal-mask buffers dropped.
pub(super) fn sanitize(weights: WeightFiles) -> Result<WeightFiles> {
    let weights = weights.rename(|name| {
        name.strip_prefix("transformer.")
            .unwrap_or(name)
            .to_string()
    })?;
    Ok(weights.without(|key| key.ends_with(".attn.bias") || key.ends_with(".attn.masked_bias")))
}

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
pub(super) fn hf_shape(name: &str, shape: &[usize]) -> Vec<usize> {
    if is_conv1d(name) {
        shape.iter().rev().copied().collect()
    } else {
        shape.to_vec()
    }
}

/// A tensor read from the file (shape `file_shape`) as parameter `name`'s
/// values: a `Conv1D` weight `[in, out]` becomes `[out, in]`.
pub(super) fn from_hf_values(name: &str, data: Vec<f32>, file_shape: &[usize]) -> Vec<f32> {
    match file_shape {
        [rows, cols] if is_conv1d(name) => transpose(&data, *rows, *cols),
        _ => data,
    }
}

/// Parameter `name`'s master values (shape `shape`) as the file stores
/// them: a `Conv1D` weight `[out, in]` becomes `[in, out]`.
pub(super) fn to_hf_values(name: &str, data: Vec<f32>, shape: &[usize]) -> Result<Vec<f32>> {
    if !is_conv1d(name) {
        return Ok(data);
    }
    let [rows, cols] = shape else {
        return Err(Error::Checkpoint(format!(
            "{name} has shape {shape:?}, expected a matrix"
        )));
    };
    Ok(transpose(&data, *rows, *cols))
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
