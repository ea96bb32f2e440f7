//! [`GqaBlockSizes`]: the parameters of a pre-norm block of grouped-query
//! attention and a gated MLP (the Llama family's, Gemma's, Phi-3's), as
//! the skeleton's memory check counts them before anything is allocated:
//! split over the ranks (q, o and the MLP), held (k and v: each rank holds
//! its query heads' key/value heads), whole on every rank (norms, row
//! biases).

use crate::device::Mesh;
use crate::tensor::Holding;

/// The shapes of one grouped-query block (module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GqaBlockSizes {
    /// Model width.
    pub hidden: usize,
    /// Feed-forward width.
    pub intermediate: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Head width.
    pub head_dim: usize,
    /// Biases on q, k, v.
    pub qkv_bias: bool,
    /// A bias on o.
    pub o_bias: bool,
    /// Biases in the MLP.
    pub mlp_bias: bool,
    /// Per-head q/k norms.
    pub qk_norm: bool,
    /// Norms over the hidden width (2, or Gemma's 4).
    pub norms: usize,
}

impl GqaBlockSizes {
    /// The sizes a `config.json` gives (`file` names it in errors): each
    /// at least 1 and no larger than any model, query heads in whole groups
    /// of key/value heads, an even head width.
    pub(crate) fn check(&self, file: &str) -> crate::error::Result<()> {
        use crate::nn::hf_config::{check_heads, check_sizes};
        check_sizes(
            file,
            &[
                ("hidden_size", self.hidden),
                ("intermediate_size", self.intermediate),
                ("num_attention_heads", self.heads),
                ("num_key_value_heads", self.kv_heads),
                ("head_dim", self.head_dim),
            ],
        )?;
        check_heads(file, self.heads, self.kv_heads, self.head_dim)
    }

    /// (split over ranks, held whole on every rank, key/value projections).
    fn split(&self) -> (u128, u128, u128) {
        let [h, f, d] = [self.hidden, self.intermediate, self.head_dim].map(|x| x as u128);
        let [q, kv] = [self.heads, self.kv_heads].map(|n| (n as u128).saturating_mul(d));
        let mul = |a: u128, b: u128| a.saturating_mul(b);
        let flag = |b: bool, n: u128| if b { n } else { 0 };
        let split = mul(2, mul(h, q))
            .saturating_add(flag(self.qkv_bias, q))
            .saturating_add(mul(3, mul(h, f)))
            .saturating_add(flag(self.mlp_bias, mul(2, f)));
        let held = mul(2, mul(h, kv)).saturating_add(flag(self.qkv_bias, mul(2, kv)));
        let whole = flag(self.o_bias, h)
            .saturating_add(flag(self.mlp_bias, h))
            .saturating_add(mul(self.norms as u128, h))
            .saturating_add(flag(self.qk_norm, mul(2, d)));
        (split, whole, held)
    }

    /// The block's parameters.
    pub fn parameters(&self) -> u128 {
        let (split, whole, held) = self.split();
        split.saturating_add(whole).saturating_add(held)
    }

    /// Bytes of f32 parameters the block puts on this process's ranks of `mesh`.
    pub fn bytes(&self, mesh: &Mesh) -> u128 {
        let (split, whole, held) = self.split();
        // Each rank holds `per` of the `n` key/value heads' rows.
        let (n, p) = (self.kv_heads, mesh.size());
        let per = Holding::kv_heads(self.heads, n, p).map_or(n, |h| h.per);
        let held = held.saturating_mul(per as u128) / n.max(1) as u128;
        mesh.held_bytes(split, whole.saturating_add(held), 4)
    }
}
