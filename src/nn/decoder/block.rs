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
use crate::nn::parameter::Parameter;

/// One decoder layer (module doc). Its parameters are named as in the
/// family's checkpoints, under the skeleton's layer prefix. A block is
/// `Clone` (its parameters' buffers shared), which gives it
/// [`BlockAlias`]: what activation recomputation runs again in backward.
pub trait Block: Params + AsAny + BlockAlias + std::fmt::Debug + Send + Sync {
    /// Run this block on `stream`: `x ← x + branch(norm(x))` for each of
    /// its residual branches, attending as `step` says.
    fn forward(&self, stream: &mut Stream, step: Step<'_>) -> Result<()>;

    /// Training mode (dropout on, masks keyed by `step`) or evaluation.
    fn set_mode(&mut self, _training: bool, _step: u64) {}
}

/// A copy of a block whose parameters are the block's own (the same values
/// and gradient slots): recorded operations on the
/// copy give the block's parameters their gradients. Every `Clone` block
/// has it.
pub trait BlockAlias {
    /// The copy, boxed.
    fn alias(&self) -> Box<dyn Block>;
}

impl<T: Block + Clone> BlockAlias for T {
    fn alias(&self) -> Box<dyn Block> {
        let mut copy = self.clone();
        let own: Vec<&Parameter> = self
            .named_parameters()
            .into_iter()
            .map(|(_, p)| p)
            .collect();
        for ((_, p), o) in copy.named_parameters_mut().into_iter().zip(own) {
            *p = o.alias();
        }
        Box::new(copy)
    }
}
