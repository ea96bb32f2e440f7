//! [`LoadOptions`]: how a decoder is built or loaded, whichever the family.

use crate::element::DType;

/// How a model is built ([`Decoder::new_with`](super::Decoder::new_with))
/// or loaded from a Hugging Face directory
/// (`CausalLm::from_pretrained_with`).
///
/// ```
/// use wgpu_tp::DType;
/// use wgpu_tp::nn::LoadOptions;
/// // Weights in bf16 for generation: half the memory and bytes per token.
/// let opts = LoadOptions::default().weights(DType::BF16);
/// assert_eq!(opts.weight_dtype, DType::BF16);
/// assert!(!opts.sequence_parallel);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadOptions {
    /// The dtype weight matrices (projections, embeddings, the head) are
    /// kept in: `F32` (the default; needed to train), `BF16` (any adapter,
    /// GL and browsers included), `F16` (adapters with `SHADER_F16`) or a
    /// quantized type (`DType::Quant(QuantType::Q8_0)`, `Q4_0`, `Q4_K`,
    /// ...: llama.cpp's blocks, dequantized inside the products; frozen).
    /// A row whose length is no multiple of the type's block takes
    /// llama.cpp's fallback type, or stays f32 where none fits. Norm
    /// weights and biases stay f32; activations and accumulation are f32
    /// either way. Building a model draws f32 values first, so its peak
    /// memory is the f32 model's; loading a checkpoint quantizes each
    /// tensor on the host as it is read. The pools are trimmed afterwards.
    /// In a browser, where reading the f32 values back must be awaited,
    /// build in f32 and quantize with
    /// [`Params::store_weights_as_async`](crate::nn::Params::store_weights_as_async).
    pub weight_dtype: DType,
    /// Sequence parallelism (activations split along tokens between the
    /// tensor-parallel pairs; for training).
    pub sequence_parallel: bool,
    /// The activations' dtype: `F32` (the default) or `F16` for mixed
    /// precision (needs `SHADER_F16`): the embeddings are cast to f16,
    /// blocks and the head compute in f16 with f32 accumulation
    /// (docs/MATH.md §15), and every parameter keeps an f32 master and
    /// gradient.
    pub activations: DType,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            weight_dtype: DType::F32,
            sequence_parallel: false,
            activations: DType::F32,
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

    /// With activations in `dtype` (`F32` or `F16`).
    pub fn activations(mut self, dtype: DType) -> Self {
        self.activations = dtype;
        self
    }
}
