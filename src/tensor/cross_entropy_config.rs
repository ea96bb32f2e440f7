//! What a vocab-parallel cross-entropy is asked ([`CrossEntropyConfig`],
//! [`Reduction`]) and each rank's columns of the logits: shared by the
//! loss (`cross_entropy.rs`) and its VJP (`cross_entropy_grad.rs`).

use super::dtensor::DTensor;
use crate::error::{Error, Result};
use crate::kernels::{CrossEntropyOptions, VocabShard};
use crate::shard::split_range_in_units;

/// How per-row losses are combined.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Reduction {
    /// One loss per row, `[tokens]`.
    None,
    /// Sum over rows, `[1]`.
    Sum,
    /// Mean over rows not ignored, `[1]`.
    #[default]
    Mean,
}

/// Settings of a vocab-parallel cross-entropy.
#[derive(Clone, Debug, Default)]
pub struct CrossEntropyConfig {
    /// Rows with this target contribute no loss and no gradient, and are not counted in the mean.
    pub ignore_index: Option<i32>,
    /// How per-row losses are combined.
    pub reduction: Reduction,
    /// Label smoothing α over the global vocab.
    pub label_smoothing: f32,
    /// Number of real vocab entries when the logits' vocab is padded (default: all columns).
    pub valid_vocab: Option<usize>,
}

impl CrossEntropyConfig {
    /// `label_smoothing` lies in `[0, 1]`.
    pub(crate) fn check(&self, op: &'static str) -> Result<()> {
        if !(0.0..=1.0).contains(&self.label_smoothing) {
            return Err(Error::invalid(
                op,
                format!(
                    "label_smoothing must be in [0, 1], got {}",
                    self.label_smoothing
                ),
            ));
        }
        Ok(())
    }

    pub(super) fn options(&self) -> CrossEntropyOptions {
        CrossEntropyOptions {
            ignore_index: self.ignore_index,
            label_smoothing: self.label_smoothing,
        }
    }
}

/// Global rank `r`'s columns of the logits.
pub(super) fn vocab_shard(logits: &DTensor, r: usize, valid_vocab: usize) -> VocabShard {
    let (vocab, p) = (logits.shape()[1], logits.mesh().size());
    VocabShard {
        start: split_range_in_units(vocab, p, r, logits.shard_unit()).start,
        valid_vocab,
    }
}
