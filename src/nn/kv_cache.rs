//! [`KvCache`]: the keys and values one attention layer has decoded so far,
//! and [`Step`]: whole sequences or the tokens after a cache,
//! shared by every attention layer that decodes incrementally (grouped-query
//! attention here, GPT-2's fused attention in [`models`](crate::models)).

use crate::tensor::DTensor;

/// Keys and values of the positions decoded so far, for one attention layer:
/// each rank holds only its own heads.
#[derive(Clone, Debug, Default)]
pub struct KvCache {
    /// `[len, 2, 1, heads, head_dim]` (`Shard(3)` for GPT-2's
    /// [`Gpt2Attention`](crate::models::Gpt2Attention),
    /// held key/value heads for grouped-query attention); `None`
    /// before the first step.
    pub(crate) kv: Option<DTensor>,
    pub(crate) len: usize,
}

impl KvCache {
    /// Positions cached so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is cached yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// What an attention layer attends over: one forward serves training,
/// whole-sequence logits and cached decoding.
#[derive(Debug)]
pub enum Step<'a> {
    /// Tokens `[batch·seq]` in whole sequences of this many, positions
    /// `0..seq` in each (training, logits, recomputation). Recorded on the
    /// tape unless inside [`no_grad`](crate::no_grad).
    Sequences(usize),
    /// One sequence's tokens after the `cache.len()` already cached; the
    /// layer attends to those too and grows the cache. Not differentiable:
    /// decode inside [`no_grad`](crate::no_grad).
    Cached(&'a mut KvCache),
}
