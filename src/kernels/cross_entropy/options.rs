//! What a cross-entropy call asks for: which vocab columns the logits
//! shard holds ([`VocabShard`]) and the options ([`CrossEntropyOptions`]),
//! and the uniform every entry of `shaders/cross_entropy.wgsl` gets,
//! checked from them.

use crate::error::{Error, Result};

/// Which global vocab columns a logits shard holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VocabShard {
    /// Global vocab index of the shard's column 0.
    pub start: usize,
    /// Number of real (unpadded) global vocab entries; columns at or past it
    /// are padding. This is also the class count `K` of label smoothing.
    pub valid_vocab: usize,
}

impl VocabShard {
    /// The whole, unpadded vocab of `vocab` entries on one rank.
    pub fn full(vocab: usize) -> Self {
        VocabShard {
            start: 0,
            valid_vocab: vocab,
        }
    }
}

/// Cross-entropy options.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CrossEntropyOptions {
    /// Rows whose target equals this get zero loss and zero gradient.
    pub ignore_index: Option<i32>,
    /// Label smoothing α in `[0, 1]`, spread over the global valid vocab.
    pub label_smoothing: f32,
}

/// The uniform of every entry, laid out as the shader's `Params`.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(super) struct Params {
    pub(super) rows: u32,
    pub(super) cols: u32,
    pub(super) valid_cols: u32,
    pub(super) start: u32,
    pub(super) has_ignore: u32,
    pub(super) ignore_index: i32,
    pub(super) alpha: f32,
    pub(super) inv_k: f32,
}

impl Params {
    pub(super) fn new(
        op: &'static str,
        rows: usize,
        cols: usize,
        shard: VocabShard,
        opts: &CrossEntropyOptions,
    ) -> Result<Params> {
        let a = opts.label_smoothing;
        if !(0.0..=1.0).contains(&a) {
            return Err(Error::invalid(
                op,
                format!("label_smoothing {a} must lie in [0, 1]"),
            ));
        }
        if a > 0.0 && shard.valid_vocab == 0 {
            return Err(Error::invalid(
                op,
                "label smoothing needs valid_vocab ≥ 1 classes",
            ));
        }
        // Targets are i32, so larger vocab indices could never be owned.
        let fits = |v: usize| v <= i32::MAX as usize;
        if !fits(shard.valid_vocab)
            || !fits(shard.start)
            || rows.checked_mul(cols).is_none_or(|n| n > u32::MAX as usize)
        {
            return Err(Error::invalid(
                op,
                format!(
                    "[{rows}, {cols}] logits at column {} of {} valid: indices must fit in i32 and the element count in u32",
                    shard.start, shard.valid_vocab
                ),
            ));
        }
        let valid_cols = shard.valid_vocab.saturating_sub(shard.start).min(cols);
        Ok(Params {
            rows: rows as u32,
            cols: cols as u32,
            valid_cols: valid_cols as u32,
            start: shard.start as u32,
            has_ignore: opts.ignore_index.is_some() as u32,
            ignore_index: opts.ignore_index.unwrap_or(0),
            alpha: a,
            inv_k: if shard.valid_vocab > 0 {
                1.0 / shard.valid_vocab as f32
            } else {
                0.0
            },
        })
    }
}
