//! [`LoadOptions`]: how `from_pretrained_with` builds a model of any family.

use crate::element::DType;

/// How a model is built from a Hugging Face directory
/// ([`CausalLm::from_pretrained_with`](super::CausalLm::from_pretrained_with),
/// [`Gpt::from_pretrained_with`](super::Gpt::from_pretrained_with),
/// [`Llama::from_pretrained_with`](super::Llama::from_pretrained_with)).
///
/// ```
/// use wgpu_tp::DType;
/// use wgpu_tp::models::LoadOptions;
/// // Weights in bf16 for generation: half the memory and bytes per token.
/// let opts = LoadOptions::default().weights(DType::BF16);
/// assert_eq!(opts.weight_dtype, DType::BF16);
/// assert!(!opts.sequence_parallel);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadOptions {
    /// The dtype weight matrices (projections, embeddings, the head) are
    /// kept in: `F32` (the default; needed to train), `BF16` (any adapter,
    /// GL and browsers included) or `F16` (adapters with `SHADER_F16`).
    /// Norm weights and biases stay f32; activations and accumulation are
    /// f32 either way. Loading builds f32 values first, so its peak memory
    /// is the f32 model's; the pools are trimmed afterwards.
    pub weight_dtype: DType,
    /// Sequence parallelism (activations split along tokens between the
    /// tensor-parallel pairs; for training).
    pub sequence_parallel: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            weight_dtype: DType::F32,
            sequence_parallel: false,
        }
    }
}

impl LoadOptions {
    /// With weights kept in `dtype`.
    pub fn weights(mut self, dtype: DType) -> Self {
        self.weight_dtype = dtype;
        self
    }

    /// With sequence parallelism on or off.
    pub fn sequence_parallel(mut self, on: bool) -> Self {
        self.sequence_parallel = on;
        self
    }
}

/// Keep `model`'s weight matrices in `dtype` and give the f32 values'
/// memory back to the devices.
#[cfg(not(target_arch = "wasm32"))]
pub(super) fn keep_weights(
    model: &mut dyn crate::nn::Params,
    mesh: &crate::device::Mesh,
    dtype: DType,
) -> crate::error::Result<()> {
    if dtype == DType::F32 {
        return Ok(());
    }
    model.store_weights_as(dtype)?;
    for r in mesh.ranks() {
        r.device().trim_pool();
    }
    Ok(())
}
