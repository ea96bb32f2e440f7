//! [`AttentionShape`]: the sizes of one rank's attention problem and the
//! shapes of the tensors it reads and writes.

/// The sizes of one rank's attention problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionShape {
    /// Sequences in the batch (B).
    pub batch: usize,
    /// Tokens per sequence (T); in [`attention_decode`](super::attention_decode), the new tokens.
    pub seq: usize,
    /// This rank's heads (H, may be 0).
    pub heads: usize,
    /// Width of one head (D, at least 1 when `heads > 0`).
    pub head_dim: usize,
}

impl AttentionShape {
    /// `batch` sequences of `seq` tokens over `heads` heads of `head_dim`.
    pub fn new(batch: usize, seq: usize, heads: usize, head_dim: usize) -> Self {
        AttentionShape {
            batch,
            seq,
            heads,
            head_dim,
        }
    }

    /// `[B·T, 3·H·D]`: the fused QKV input (and its gradient).
    pub fn qkv_shape(&self) -> [usize; 2] {
        [self.batch * self.seq, 3 * self.heads * self.head_dim]
    }

    /// `[B·T, H·D]`: the attention output (and its gradient).
    pub fn out_shape(&self) -> [usize; 2] {
        [self.batch * self.seq, self.heads * self.head_dim]
    }

    /// `[B, H, T, T]`: the probabilities [`attention_forward`](super::attention_forward) saves.
    pub fn probs_shape(&self) -> [usize; 4] {
        [self.batch, self.heads, self.seq, self.seq]
    }

    /// `[len, 2, B, H, D]`: a key/value cache of `len` positions, positions
    /// outermost (so a step appends at the end), keys then values.
    pub fn cache_shape(&self, len: usize) -> [usize; 5] {
        [len, 2, self.batch, self.heads, self.head_dim]
    }

    /// Whether there is no work: no heads or no tokens.
    pub(super) fn is_empty(&self) -> bool {
        self.heads == 0 || self.batch == 0 || self.seq == 0
    }
}

/// Which key/value heads one rank's query heads read (grouped-query
/// attention), and the causal window.
///
/// Local query head `h` (global `q_start + h`) reads key/value head
/// `(q_start + h) / group − kv_start` of the key/value tensors, which hold
/// `kv_heads` heads starting at global head `kv_start`. [`HeadGroups::mha`]
/// is multi-head attention (every query head its own key/value head).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HeadGroups {
    /// Query heads per key/value head (1: multi-head attention; all heads:
    /// multi-query attention).
    pub group: usize,
    /// Global index of this rank's first query head.
    pub q_start: usize,
    /// Global index of the first key/value head the key/value tensors hold.
    pub kv_start: usize,
    /// Key/value heads the key/value tensors hold.
    pub kv_heads: usize,
    /// Sliding window: query position `i` sees key position `j` when
    /// `i − window < j ≤ i` (Mistral's); 0 is plain causal attention.
    pub window: usize,
    /// Scores soft-capped to `softcap · tanh(s / softcap)` before the
    /// softmax (Gemma 2's `attn_logit_softcapping`); 0 is none.
    pub softcap: f32,
}

impl HeadGroups {
    /// Multi-head attention over `heads` heads: each query head reads its own
    /// key/value head, no window.
    pub fn mha(heads: usize) -> Self {
        HeadGroups {
            group: 1,
            q_start: 0,
            kv_start: 0,
            kv_heads: heads,
            window: 0,
            softcap: 0.0,
        }
    }
}

/// Elements of a tensor of `dims`, saturating (an overflow is too large anyway).
pub(super) fn elements(dims: &[usize]) -> u64 {
    dims.iter().fold(1u64, |a, &d| a.saturating_mul(d as u64))
}
