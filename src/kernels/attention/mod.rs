//! Causal softmax attention over one rank's heads (`shaders/attention.wgsl`).
//!
//! The input is the fused QKV activation of one rank as the column-parallel
//! QKV projection produces it: `qkv` `[B·T, 3·H·D]`, row `b·T + t` for token
//! `t` of sequence `b`, columns `[q | k | v]`, each `H·D` wide with head `h` at
//! columns `h·D..(h+1)·D` (H = this rank's heads, possibly 0). Per sequence
//! `b` and head `h`:
//!
//! `S = q kᵀ / √D` masked to `j ≤ i`, `P = softmax_row(S)` (row max
//! subtracted; masked entries exactly 0), `O = P v`,
//!
//! with `O` returned as `[B·T, H·D]` in the same head-contiguous column layout,
//! ready for the row-parallel output projection. The backward pass, from the
//! saved `P` and the output gradient `dO`:
//!
//! `dV = Pᵀ dO`, `dP = dO vᵀ`, `dS = P ⊙ (dP − rowsum(dP ⊙ P))`,
//! `dQ = dS k / √D`, `dK = dSᵀ q / √D`,
//!
//! returned as one `[B·T, 3·H·D]` gradient in the fused layout.
//!
//! Cached decoding ([`attention_decode`]) runs the same kernels on queries at
//! positions `past..past + T` against a key/value cache `[past + T, 2, B, H,
//! D]` (positions outermost; keys, then values) that holds only this rank's
//! heads. A step writes only its new positions: the cache's buffer has room
//! to grow (doubling when full), so the grown cache shares it with the old
//! one, whose values stay as they were.
//!
//! Five entry points: `masked_dots` (`S = q kᵀ/√D` or `dP = dO vᵀ`, masked),
//! `softmax_rows` and `grad_softmax_rows` (in place, one invocation per row),
//! `mix` (`P v`, `dS k`, `dSᵀ q`, `Pᵀ dO` into any view) and `write_kv` (the
//! new positions of the cache). The products give each invocation a 4 × 4 tile, because CPU
//! adapters pay far more for a load than for an FMA; where the sizes allow,
//! they load vec4s, from textures on CPU adapters (`entries.rs`). Every sum
//! runs in a fixed order, so equal inputs give bit-equal results.
//!
//! Dropout on the probabilities ([`ProbsDropout`], GPT-2's `attn_pdrop`)
//! multiplies `P` by a mask drawn from the logical `[B, heads, T, T]` index
//! (this rank's heads sit at their global head index), so every split of the
//! heads over ranks draws the same mask: `O = P' v` with `P' = P·m/(1−p)`;
//! backward uses `P'` for `dV` and masks `dP` the same way, and regenerates
//! `P'` from `P` rather than keeping it.
//!
//! Grouped-query attention ([`HeadGroups`], `gqa.rs`): queries, keys and
//! values as separate tensors, fewer key/value heads than query heads (each
//! read by a group of query heads), `head_dim` of any width and an optional
//! sliding window; the fused multi-head entry points here are its special
//! case (group 1, one buffer with three views).
//!
//! This file holds the fused API, `gqa.rs` the grouped one and the passes
//! both run, `decode.rs` cached decoding and the grouped decoding entries,
//! `decode_one.rs` a one-token step in one dispatch, `decode_group.rs`
//! several ranks' steps in one, `checks.rs` the argument checks, `shape.rs` the problem's
//! sizes, `types.rs` the values the entry points take and return, `launch.rs` the shader's views and dispatches, `params.rs` its uniform,
//! `entries.rs` which entries a product takes.

mod checks;
mod decode;
#[cfg(test)]
mod decode_check;
mod decode_group;
mod decode_one;
mod entries;
mod gqa;
mod launch;
mod params;
mod shape;
mod types;
#[cfg(test)]
mod vec4_check;

use checks::{check_operand, check_qkv, check_size};
pub use decode::{attention_decode_gqa, attention_decode_gqa_rotary};
pub(crate) use decode_group::{Step, decode_fused_steps, decode_sources, decode_steps};
pub(crate) use entries::{SOURCE, SOURCE_TEXTURES, SOURCE_VEC4};
use gqa::{Src, backward_into, forward_into};
pub use gqa::{attention_backward_gqa, attention_forward_gqa};
use launch::{Problem, View};
pub use shape::{AttentionShape, HeadGroups};
pub use types::{Attention, Decoded, HeadWindow, ProbsDropout};

use crate::device::LocalTensor;
use crate::element::DType;
use crate::error::Result;

/// Causal softmax attention of one rank's heads: `qkv` `[B·T, 3·H·D]` (F32,
/// fused layout, see the module docs) → the output `[B·T, H·D]` and the
/// probabilities `[B, H, T, T]` that [`attention_backward`] needs.
///
/// With no heads (or no tokens) it returns empty tensors and records nothing.
/// Errors: a `qkv` of another shape or dtype, `head_dim` 0 with heads, or
/// probabilities larger than one storage binding ([`Error::TooLarge`](crate::Error::TooLarge): use a
/// smaller batch or shorter sequences, or fewer heads per rank).
pub fn attention_forward(qkv: &LocalTensor, shape: AttentionShape) -> Result<Attention> {
    attention_forward_with(qkv, shape, None)
}

/// [`attention_forward`] with dropout on the probabilities (`None`: none).
/// The returned `probs` are the undropped `P`; pass the same `dropout` to
/// [`attention_backward_with`].
pub fn attention_forward_with(
    qkv: &LocalTensor,
    shape: AttentionShape,
    dropout: Option<ProbsDropout>,
) -> Result<Attention> {
    const OP: &str = "attention_forward";
    check_qkv(OP, qkv, &shape)?;
    let probs_shape = shape.probs_shape();
    check_size(
        OP,
        "the attention probabilities [B, H, T, T]",
        &probs_shape,
        qkv.device(),
    )?;
    let out = qkv.rank().alloc(OP, &shape.out_shape(), DType::F32)?;
    let probs = qkv.rank().alloc(OP, &probs_shape, DType::F32)?;
    if !shape.is_empty() {
        let pr = Problem {
            s: shape,
            past: 0,
            g: HeadGroups::mha(shape.heads),
        };
        let [q, k, v] = [0, 1, 2].map(|blk| (qkv, View::fused(&shape, shape.seq, blk)));
        forward_into(&pr, [q, k, v], &probs, &out, dropout.as_ref())?;
    }
    Ok(Attention { out, probs })
}

/// Gradient of [`attention_forward`] w.r.t. its input: from `qkv` `[B·T,
/// 3·H·D]`, the saved `probs` `[B, H, T, T]` and the output gradient `d_out`
/// `[B·T, H·D]` (all F32 on one rank), the fused `[B·T, 3·H·D]` gradient
/// `[dQ | dK | dV]`.
///
/// With no heads (or no tokens) it returns an empty or zero-width tensor and
/// records nothing. Errors: operands of other shapes, dtypes or ranks.
pub fn attention_backward(
    qkv: &LocalTensor,
    probs: &LocalTensor,
    d_out: &LocalTensor,
    shape: AttentionShape,
) -> Result<LocalTensor> {
    attention_backward_with(qkv, probs, d_out, shape, None)
}

/// [`attention_backward`] of [`attention_forward_with`] under the same
/// `dropout`: `dV = P'ᵀ dO` and `dP = dP'·m/(1 − p)`, the mask regenerated
/// from its key.
pub fn attention_backward_with(
    qkv: &LocalTensor,
    probs: &LocalTensor,
    d_out: &LocalTensor,
    shape: AttentionShape,
    dropout: Option<ProbsDropout>,
) -> Result<LocalTensor> {
    const OP: &str = "attention_backward";
    check_qkv(OP, qkv, &shape)?;
    check_operand(
        OP,
        "probabilities [B, H, T, T]",
        qkv,
        probs,
        &shape.probs_shape(),
    )?;
    check_operand(
        OP,
        "output gradient [B·T, H·D]",
        qkv,
        d_out,
        &shape.out_shape(),
    )?;
    let d_qkv = qkv.rank().alloc(OP, &shape.qkv_shape(), DType::F32)?;
    if shape.is_empty() {
        return Ok(d_qkv);
    }
    let pr = Problem {
        s: shape,
        past: 0,
        g: HeadGroups::mha(shape.heads),
    };
    let views = [0, 1, 2].map(|blk| View::fused(&shape, shape.seq, blk));
    let srcs: [Src; 3] = views.map(|v| (qkv, v));
    let dsts: [Src; 3] = views.map(|v| (&d_qkv, v));
    backward_into(&pr, srcs, probs, d_out, dsts, dropout.as_ref())?;
    Ok(d_qkv)
}

/// One step of cached decoding: `qkv` `[B·T_new, 3·H·D]` holds the new tokens
/// (`shape.seq` = T_new per sequence, at positions `past..past + T_new`),
/// `cache` `[past, 2, B, H, D]` the keys (index 0) and values (index 1) of
/// the earlier positions of this rank's heads (`None`: nothing cached, past
/// = 0). Returns the new tokens' attention output `[B·T_new, H·D]`, which
/// equals the matching rows of [`attention_forward`] over all `past + T_new`
/// tokens, and the grown cache `[past + T_new, 2, B, H, D]`.
///
/// A step writes only its new positions, into room the cache's buffer keeps
/// (the first time a cache is grown from; a cache grown from twice, or
/// full, is copied into a buffer twice as large). Errors: operands of other
/// shapes, dtypes or ranks, or a cache or probability block larger than one
/// storage binding.
pub fn attention_decode(
    qkv: &LocalTensor,
    cache: Option<&LocalTensor>,
    shape: AttentionShape,
) -> Result<Decoded> {
    const OP: &str = "attention_decode";
    let (pr, srcs) = fused_checked(qkv, cache, shape)?;
    let (out, new_cache) = decode::decode_into(OP, &pr, srcs, None, cache)?;
    Ok(Decoded {
        out,
        cache: new_cache,
    })
}

/// [`attention_decode`]'s checks: the problem, with the cache's length,
/// and the views of the fused QKV.
fn fused_checked<'a>(
    qkv: &'a LocalTensor,
    cache: Option<&LocalTensor>,
    shape: AttentionShape,
) -> Result<(Problem, [Src<'a>; 3])> {
    const OP: &str = "attention_decode";
    check_qkv(OP, qkv, &shape)?;
    let past = match cache {
        Some(c) => {
            let past = match *c.shape() {
                [len, _, _, _, _] => len,
                _ => 0,
            };
            check_operand(
                OP,
                "key/value cache [past, 2, B, H, D]",
                qkv,
                c,
                &shape.cache_shape(past),
            )?;
            past
        }
        None => 0,
    };
    let pr = Problem {
        s: shape,
        past,
        g: HeadGroups::mha(shape.heads),
    };
    let srcs = [0, 1, 2].map(|blk| (qkv, View::fused(&shape, shape.seq, blk)));
    Ok((pr, srcs))
}
