//! [`GptConfig`]: the sizes and settings of a [`Gpt`](super::Gpt), and the
//! parameter count they give.

use crate::element::DType;
use crate::kernels::Activation;

/// Sizes and settings of a [`Gpt`](super::Gpt).
#[derive(Clone, Copy, Debug)]
pub struct GptConfig {
    /// Vocabulary size.
    pub vocab: usize,
    /// Longest sequence (rows of `wpe`).
    pub n_ctx: usize,
    /// Model width.
    pub hidden: usize,
    /// Attention heads (need not divide by the world size).
    pub heads: usize,
    /// Number of blocks.
    pub layers: usize,
    /// Feed-forward width.
    pub ffn: usize,
    /// Feed-forward activation.
    pub activation: Activation,
    /// LayerNorm epsilon.
    pub eps: f32,
    /// Sequence parallelism: between the embedding and the head, activations
    /// are split along tokens (`Shard(0)`); see [`TransformerBlock`](super::TransformerBlock).
    pub sequence_parallel: bool,
    /// Dropout of the embeddings and of every residual branch (GPT-2's
    /// `embd_pdrop` / `resid_pdrop`); 0 (the default) turns it off. Masks
    /// follow the logical tensors, so P does not change the numbers.
    pub dropout: f32,
    /// Dropout on the attention probabilities (GPT-2's `attn_pdrop`); 0 (the
    /// default) turns it off. Masks follow the global head index.
    pub attn_dropout: f32,
    /// Activation dtype: `F32` (the default) or `F16` for mixed precision
    /// (needs `SHADER_F16`): the summed embeddings are cast to f16, blocks and
    /// the head compute in f16 with f32 accumulation (docs/MATH.md §15), and
    /// every parameter keeps an f32 master and an f32 gradient.
    pub dtype: DType,
}

impl GptConfig {
    /// GPT-2 defaults for the given sizes: ffn 4·hidden, GELU, eps 1e-5.
    pub fn new(vocab: usize, n_ctx: usize, hidden: usize, heads: usize, layers: usize) -> Self {
        GptConfig {
            vocab,
            n_ctx,
            hidden,
            heads,
            layers,
            ffn: hidden.saturating_mul(4),
            activation: Activation::Gelu,
            eps: 1e-5,
            sequence_parallel: false,
            dropout: 0.0,
            attn_dropout: 0.0,
            dtype: DType::F32,
        }
    }

    /// The number of parameters (GPT-2 124M's shape: 124,439,808).
    pub fn num_parameters(&self) -> u128 {
        let (split, whole) = self.parameter_split();
        split.saturating_add(whole)
    }

    /// (parameters split over the ranks, parameters every rank holds whole).
    pub(super) fn parameter_split(&self) -> (u128, u128) {
        self.stage_split(true, true, self.layers)
    }

    /// [`GptConfig::parameter_split`] of a pipeline stage: the embeddings
    /// on the first, the final norm and the tied table on the last.
    pub(super) fn stage_split(&self, first: bool, last: bool, blocks: usize) -> (u128, u128) {
        let [v, n, h, l, f] =
            [self.vocab, self.n_ctx, self.hidden, blocks, self.ffn].map(|x| x as u128);
        let mul = |a: u128, b: u128| a.saturating_mul(b);
        // Per block: q, k, v with biases, the attention projection, the MLP's
        // two products and its first bias are split; norms and the row
        // layers' biases are whole.
        let block = mul(4, mul(h, h))
            .saturating_add(mul(3, h))
            .saturating_add(mul(2, mul(h, f)))
            .saturating_add(f);
        let table = if first || last { mul(v, h) } else { 0 };
        let split = table.saturating_add(mul(l, block));
        let whole = mul(n, h) * u128::from(first)
            + mul(l, mul(6, h)).saturating_add(mul(2, h) * u128::from(last));
        (split, whole)
    }
}
