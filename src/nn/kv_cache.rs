//! [`KvCache`]: the keys and values one attention layer has decoded so far,
//! shared by every attention layer that decodes incrementally (grouped-query
//! attention here, GPT-2's fused attention in [`models`](crate::models)).

use crate::tensor::DTensor;

/// Keys and values of the positions decoded so far, for one attention layer:
/// each rank holds only its own heads.
#[derive(Clone, Debug, Default)]
pub struct KvCache {
    /// `[len, 2, 1, heads, head_dim]` (`Shard(3)` for GPT-2's
    /// [`ParallelSelfAttention`](crate::models::ParallelSelfAttention),
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
