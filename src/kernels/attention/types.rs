//! The values attention's entry points take and return: the forward's
//! output and probabilities ([`Attention`]), a decoding step's output and
//! grown cache ([`Decoded`]), and dropout on the probabilities
//! ([`ProbsDropout`]).

use crate::device::LocalTensor;
use crate::error::Result;
use crate::kernels::dropout::{PhiloxKey, ShardWindow, dropout};

/// What [`attention_forward`](super::attention_forward) returns.
#[derive(Clone, Debug)]
pub struct Attention {
    /// `[B·T, H·D]`: the attention output, heads contiguous in the columns.
    pub out: LocalTensor,
    /// `[B, H, T, T]`: the softmax probabilities (0 above the diagonal),
    /// saved for [`attention_backward`](super::attention_backward).
    pub probs: LocalTensor,
}

/// What [`attention_decode`](super::attention_decode) returns.
#[derive(Clone, Debug)]
pub struct Decoded {
    /// `[B·T_new, H·D]`: the attention output of the new tokens.
    pub out: LocalTensor,
    /// `[past + T_new, 2, B, H, D]`: the cache grown by the new keys and
    /// values; pass it to the next step.
    pub cache: LocalTensor,
}

/// Dropout on the attention probabilities of one rank's heads: `P' =
/// P·m/(1 − p)` with the mask of `key` over the logical `[B, heads, T, T]`
/// tensor, in which this rank's heads are `heads.start..` of `heads.total`
/// (so the mask does not depend on how heads are split over ranks).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProbsDropout {
    /// Drop probability, in `[0, 1)`.
    pub p: f32,
    /// Which draw: seed, training step and layer id.
    pub key: PhiloxKey,
    /// This rank's first global head and the model's head count.
    pub heads: HeadWindow,
}

/// Where one rank's heads sit among all heads: `start..start + local`, of `total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadWindow {
    /// Global index of this rank's first head.
    pub start: usize,
    /// Heads in the whole model.
    pub total: usize,
}

impl ProbsDropout {
    /// `probs` `[B, H, T, T]` with the mask applied and scaled by `1/(1 − p)`.
    pub(super) fn apply(&self, probs: &LocalTensor) -> Result<LocalTensor> {
        let window = ShardWindow {
            dim: 1,
            start: self.heads.start,
            total: self.heads.total,
        };
        dropout(probs, self.p, self.key, Some(window))
    }
}
