//! [`Block`]: one decoder layer of a family, written as residual branches
//! on the skeleton's [`Stream`]. A pre-norm block is
//!
//! ```text
//! stream.branch(Some(&self.input_norm), |n| Ok(self.attn.product(n, step)?.into()))?;
//! stream.branch(Some(&self.mlp_norm), |n| Ok(self.mlp.product(n)?.into()))
//! ```
//!
//! and the same code serves training, whole-sequence logits and cached
//! decoding ([`Step`]); how each branch's sum, residual and the norm after
//! it are fused is the stream's choice, not the block's.

use super::any::AsAny;
use super::stream::Stream;
use crate::error::Result;
use crate::nn::Params;
use crate::nn::kv_cache::Step;

/// One decoder layer (module doc). Its parameters are named as in the
/// family's checkpoints, under the skeleton's layer prefix.
pub trait Block: Params + AsAny + std::fmt::Debug + Send + Sync {
    /// Run this block on `stream`: `x ← x + branch(norm(x))` for each of
    /// its residual branches, attending as `step` says.
    fn forward(&self, stream: &mut Stream, step: Step<'_>) -> Result<()>;

    /// Training mode (dropout on, masks keyed by `step`) or evaluation.
    fn set_mode(&mut self, _training: bool, _step: u64) {}
}
