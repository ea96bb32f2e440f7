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

    /// `[2, B, H, len, D]`: a key/value cache of `len` positions.
    pub fn cache_shape(&self, len: usize) -> [usize; 5] {
        [2, self.batch, self.heads, len, self.head_dim]
    }

    /// Whether there is no work: no heads or no tokens.
    pub(super) fn is_empty(&self) -> bool {
        self.heads == 0 || self.batch == 0 || self.seq == 0
    }
}

/// Elements of a tensor of `dims`, saturating (an overflow is too large anyway).
pub(super) fn elements(dims: &[usize]) -> u64 {
    dims.iter().fold(1u64, |a, &d| a.saturating_mul(d as u64))
}
