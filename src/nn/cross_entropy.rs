//! Vocab-parallel softmax cross-entropy (Megatron's `vocab_parallel_cross_entropy`)
//! as a layer: its settings, and forward on
//! [`DTensor::vocab_parallel_cross_entropy`] (three all-reduces of one value
//! per row, never a gather of the logits; its VJP communicates nothing).

use crate::error::Result;
use crate::tensor::DTensor;
pub use crate::tensor::{CrossEntropyConfig, Reduction};

/// Softmax cross-entropy over vocab-sharded logits.
#[derive(Debug)]
pub struct VocabParallelCrossEntropy {
    config: CrossEntropyConfig,
}

impl VocabParallelCrossEntropy {
    /// A loss with these settings (`label_smoothing` in `[0, 1]`).
    pub fn new(config: CrossEntropyConfig) -> Result<Self> {
        config.check("VocabParallelCrossEntropy::new")?;
        Ok(VocabParallelCrossEntropy { config })
    }

    /// The settings.
    pub fn config(&self) -> &CrossEntropyConfig {
        &self.config
    }

    /// Logits `[tokens, vocab]` (`Shard(1)`) and host targets → the loss,
    /// `Replicate`: `[tokens]` for [`Reduction::None`], else `[1]`, in f32.
    /// f16 logits are widened: the softmax and its sums run in f32, and
    /// their gradient comes back in f16. `loss.backward()` (or
    /// `backward_with(dloss)` for [`Reduction::None`]) gives the logits'
    /// gradient, `Shard(1)`, with no communication.
    pub fn forward(&self, logits: &DTensor, targets: &[i32]) -> Result<DTensor> {
        logits.vocab_parallel_cross_entropy(targets, &self.config)
    }
}
