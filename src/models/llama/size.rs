//! How many parameters a Llama-family configuration has, and how many of
//! them a mesh's ranks hold: the model checks the bytes before allocating.

use super::config::LlamaConfig;
use crate::device::Mesh;
use crate::tensor::Holding;

impl LlamaConfig {
    /// The number of parameters (SmolLM2-135M's shape: 134,515,008).
    pub fn num_parameters(&self) -> u128 {
        let (split, whole, kv) = self.parameter_split();
        split.saturating_add(whole).saturating_add(kv)
    }

    /// (parameters split over the ranks, parameters every rank holds whole,
    /// key/value projections: each rank holds its query heads' heads).
    fn parameter_split(&self) -> (u128, u128, u128) {
        self.stage_split(true, true, self.num_hidden_layers)
    }

    /// [`LlamaConfig::parameter_split`] of a pipeline stage of `layers`
    /// layers: the embedding on the first (and the last when tied), the
    /// final norm and an untied head on the last.
    fn stage_split(&self, first: bool, last: bool, layers: usize) -> (u128, u128, u128) {
        let c = self;
        let [v, h, f, l] =
            [c.vocab_size, c.hidden_size, c.intermediate_size, layers].map(|x| x as u128);
        let [q, kv] = [c.num_attention_heads, c.num_key_value_heads]
            .map(|n| (n as u128).saturating_mul(c.head_dim as u128));
        let mul = |a: u128, b: u128| a.saturating_mul(b);
        let flag = |b: bool, n: u128| if b { n } else { 0 };
        // Split: q_proj (and its bias), o_proj, gate / up / down (and the
        // column biases), the embedding and an untied head. Whole on every
        // rank: the norms, row-layer biases. Held: k_proj / v_proj.
        let layer_split = mul(2, mul(h, q))
            .saturating_add(flag(c.qkv_bias, q))
            .saturating_add(mul(3, mul(h, f)))
            .saturating_add(flag(c.mlp_bias, mul(2, f)));
        let layer_kv = mul(2, mul(h, kv)).saturating_add(flag(c.qkv_bias, mul(2, kv)));
        let layer_whole = flag(c.o_bias, h)
            .saturating_add(flag(c.mlp_bias, h))
            .saturating_add(mul(2, h))
            .saturating_add(flag(c.qk_norm, mul(2, c.head_dim as u128)));
        let tied = c.tie_word_embeddings;
        let embed = flag(first || (last && tied), mul(v, h));
        let head = flag(last && !tied, mul(v, h));
        let split = embed
            .saturating_add(head)
            .saturating_add(mul(l, layer_split));
        let whole = mul(l, layer_whole).saturating_add(flag(last, h));
        (split, whole, mul(l, layer_kv))
    }

    /// The bytes of f32 parameters this process's ranks of `mesh` hold.
    pub(crate) fn parameter_bytes(&self, mesh: &Mesh) -> u128 {
        self.stage_bytes(mesh, true, true, self.num_hidden_layers)
    }

    /// [`LlamaConfig::parameter_bytes`] of a pipeline stage.
    pub(crate) fn stage_bytes(&self, mesh: &Mesh, first: bool, last: bool, layers: usize) -> u128 {
        let (split, whole, kv) = self.stage_split(first, last, layers);
        // Each rank holds `per` of the `n_kv` heads' rows.
        let (n, p) = (self.num_key_value_heads, mesh.size());
        let per = Holding::kv_heads(self.num_attention_heads, n, p).map_or(n, |h| h.per);
        let kv = kv.saturating_mul(per as u128) / n.max(1) as u128;
        mesh.held_bytes(split, whole.saturating_add(kv), 4)
    }
}
