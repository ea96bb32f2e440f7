//! Causal softmax attention on a fused QKV activation whose heads are split
//! over ranks: [`DTensor::causal_attention`] (recorded, its VJP the
//! attention backward from the saved probabilities) and
//! [`DTensor::attention_decode`] (cached decoding, not differentiable). Each
//! rank runs [`kernels::attention`](crate::kernels::attention) on its own
//! whole heads; nothing is communicated.
//!
//! `qkv` is `[tokens, 3·H·D]`, tokens batch-major (`token = b·seq + t`), as a
//! column-parallel projection with stride 3 and shard unit `D` gives it:
//! `Shard(1)` with each rank's columns `[q_r | k_r | v_r]` of its own heads
//! (the first `H % P` ranks hold one head more, a rank may hold none). The
//! output `[tokens, H·D]` is `Shard(1)` in units of `D`, split like the
//! heads, ready for a row-parallel projection. On one rank any placement is
//! taken.
//!
//! Dropout on the probabilities ([`AttentionDropout`]) keys its mask on the
//! global head index, so it is the same at any P.

use super::autograd::record;
use super::dtensor::DTensor;
use super::placement::{Placement, local_shape_in_units};
use crate::device::LocalTensor;
use crate::element::DType;
use crate::error::{Error, Result};
use crate::kernels::PhiloxKey;
use crate::kernels::attention::{
    AttentionShape, HeadWindow, ProbsDropout, attention_backward_with, attention_forward_with,
    decode_fused_steps,
};

/// Dropout on the attention probabilities (GPT-2's `attn_pdrop`): `P' =
/// P·m/(1 − p)` with the mask of `key` over the logical `[batch, heads,
/// seq, seq]` tensor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionDropout {
    /// Drop probability, in `[0, 1)`.
    pub p: f32,
    /// Which draw: seed, training step and layer id.
    pub key: PhiloxKey,
}

/// Each addressable rank's heads as `(first global head, count)`, from qkv's columns.
fn head_split(
    op: &'static str,
    qkv: &DTensor,
    heads: usize,
    d: usize,
) -> Result<Vec<(usize, usize)>> {
    if heads == 0 || d == 0 {
        return Err(Error::invalid(
            op,
            format!("heads {heads} and head_dim {d} must both be at least 1"),
        ));
    }
    if qkv.dtype() != DType::F32 {
        return Err(Error::DTypeMismatch {
            op,
            expected: DType::F32,
            got: qkv.dtype(),
        });
    }
    let width = 3 * heads * d;
    let [_, w] = *qkv.shape() else {
        return Err(Error::shape(
            op,
            format!("qkv [tokens, {width}]"),
            qkv.shape(),
        ));
    };
    if w != width {
        return Err(Error::shape(
            op,
            format!("qkv [tokens, 3·{heads}·{d}]"),
            qkv.shape(),
        ));
    }
    let p = qkv.mesh().size();
    if p > 1 && qkv.placement() != Placement::Shard(1) {
        return Err(Error::invalid(
            op,
            format!(
                "qkv must be Shard(1) in whole heads (as a column-parallel QKV projection with \
                 stride 3 and shard unit head_dim gives it), got {:?}",
                qkv.placement()
            ),
        ));
    }
    // Global rank r's columns, from the placement: ranks before it may live
    // in other processes.
    let cols_of = |r| local_shape_in_units(qkv.shape(), qkv.placement(), p, r, qkv.shard_unit())[1];
    let mut split = Vec::with_capacity(qkv.shards().len());
    for s in qkv.shards() {
        let cols = s.shape()[1];
        if !cols.is_multiple_of(3 * d) {
            return Err(Error::invalid(
                op,
                format!(
                    "a rank holds {cols} columns of qkv, not whole heads of 3·{d}: shard qkv \
                     in units of 3·head_dim"
                ),
            ));
        }
        let start = (0..s.rank_index()).map(cols_of).sum::<usize>() / (3 * d);
        split.push((start, cols / (3 * d)));
    }
    Ok(split)
}

/// The kernels' dropout for a rank whose heads start at `start` of `total`.
fn window(drop: Option<AttentionDropout>, start: usize, total: usize) -> Option<ProbsDropout> {
    drop.map(|d| ProbsDropout {
        p: d.p,
        key: d.key,
        heads: HeadWindow { start, total },
    })
}

/// Per-rank outputs `[rows, H_r·D]` as one `[rows, H·D]` tensor `Shard(1)`
/// in units of `D`.
fn joined(qkv: &DTensor, outs: Vec<LocalTensor>, rows: usize, heads: usize, d: usize) -> DTensor {
    qkv.with_shards_in_units(outs, vec![rows, heads * d], Placement::Shard(1), d)
}

impl DTensor {
    /// Causal multi-head attention `softmax(q kᵀ/√D, causal) v` of `self`,
    /// the fused `qkv` `[batch·seq, 3·heads·head_dim]` (f32, `Shard(1)` in
    /// whole heads: see the module docs), → `[batch·seq, heads·head_dim]`
    /// `Shard(1)` in units of `head_dim`, with no communication. `dropout`
    /// drops probabilities (training). The VJP is the attention backward
    /// from the saved probabilities, placed like `self`.
    pub fn causal_attention(
        &self,
        seq: usize,
        heads: usize,
        head_dim: usize,
        dropout: Option<AttentionDropout>,
    ) -> Result<DTensor> {
        const OP: &str = "DTensor::causal_attention";
        let split = head_split(OP, self, heads, head_dim)?;
        let tokens = self.shape()[0];
        if seq == 0 || !tokens.is_multiple_of(seq) {
            return Err(Error::invalid(
                OP,
                format!("{tokens} tokens are not a whole number of sequences of {seq}"),
            ));
        }
        if let Some(d) = dropout
            && !(0.0..1.0).contains(&d.p)
        {
            return Err(Error::invalid(
                OP,
                format!("dropout {} must lie in [0, 1)", d.p),
            ));
        }
        let shape = move |h: usize| AttentionShape::new(tokens / seq, seq, h, head_dim);
        record(OP, &[self], || {
            let mut outs = Vec::with_capacity(split.len());
            let mut probs = Vec::with_capacity(split.len());
            for (local, &(start, h)) in self.shards().iter().zip(&split) {
                let a = attention_forward_with(local, shape(h), window(dropout, start, heads))?;
                outs.push(a.out);
                probs.push(a.probs);
            }
            let y = joined(self, outs, tokens, heads, head_dim);
            let qkv = self.detach();
            Ok((y, move |dy: &DTensor| {
                // dy comes from a row-parallel projection split like y; move
                // it there (in head units) if it comes otherwise.
                let dy = if dy.placement() == Placement::Shard(1) || dy.mesh().size() == 1 {
                    dy.cast(DType::F32)?
                } else {
                    dy.move_to(Placement::Shard(1), head_dim)?
                        .cast(DType::F32)?
                };
                let d_qkv = (0..split.len())
                    .map(|r| {
                        let (start, h) = split[r];
                        attention_backward_with(
                            &qkv.shards()[r],
                            &probs[r],
                            &dy.shards()[r],
                            shape(h),
                            window(dropout, start, heads),
                        )
                    })
                    .collect::<Result<Vec<_>>>()?;
                let d_qkv = qkv.with_shards_in_units(
                    d_qkv,
                    qkv.shape().to_vec(),
                    qkv.placement(),
                    qkv.shard_unit(),
                );
                Ok(vec![Some(d_qkv)])
            }))
        })
    }

    /// One step of cached decoding of a single sequence: `self` is the fused
    /// `qkv` `[new, 3·heads·head_dim]` of the new tokens (placed as for
    /// [`DTensor::causal_attention`]), `cache` the keys and values of the
    /// earlier positions `[past, 2, 1, heads, head_dim]` `Shard(3)` (each
    /// rank its own heads; `None` before the first step; grown in place as
    /// [`kernels::attention_decode`](crate::kernels::attention_decode)
    /// says). Returns the new
    /// tokens' output `[new, heads·head_dim]` (`Shard(1)` in units of
    /// `head_dim`, the matching rows of [`DTensor::causal_attention`] over
    /// the whole sequence) and the grown cache. Communicates nothing. Not
    /// differentiable: nothing is recorded (decode inside
    /// [`no_grad`](crate::no_grad)).
    pub fn attention_decode(
        &self,
        cache: Option<&DTensor>,
        heads: usize,
        head_dim: usize,
    ) -> Result<(DTensor, DTensor)> {
        const OP: &str = "DTensor::attention_decode";
        let split = head_split(OP, self, heads, head_dim)?;
        let new = self.shape()[0];
        let past = match cache {
            None => 0,
            Some(c) => {
                let [past, 2, 1, h, d] = *c.shape() else {
                    return Err(Error::shape(
                        OP,
                        format!("cache [past, 2, 1, {heads}, {head_dim}]"),
                        c.shape(),
                    ));
                };
                if (h, d) != (heads, head_dim) || !c.mesh().same_as(self.mesh()) {
                    return Err(Error::invalid(
                        OP,
                        format!(
                            "the cache holds {h} heads of {d} on its mesh, qkv {heads} of \
                             {head_dim}: pass the cache this layer grew"
                        ),
                    ));
                }
                past
            }
        };
        // Every rank's step at once: ranks sharing a CPU adapter record
        // theirs together (the same bits as one by one).
        let steps: Vec<_> = (self.shards().iter().zip(&split).enumerate())
            .map(|(r, (local, &(_, h)))| {
                let c = cache.map(|c| &c.shards()[r]);
                (local, c, AttentionShape::new(1, new, h, head_dim))
            })
            .collect();
        let (outs, grown): (Vec<_>, Vec<_>) = (decode_fused_steps(&steps)?.into_iter())
            .map(|s| (s.out, s.cache))
            .unzip();
        let out = joined(self, outs, new, heads, head_dim);
        let cache_shape = vec![past + new, 2, 1, heads, head_dim];
        let cache = self.with_shards_in_units(grown, cache_shape, Placement::Shard(3), 1);
        Ok((out, cache))
    }
}
