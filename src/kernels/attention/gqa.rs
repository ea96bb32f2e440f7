//! Grouped-query attention on separate `q` `[B·T, H·D]`, `k` and `v`
//! `[B·T, KV·D]` tensors of one rank ([`HeadGroups`]: query head `h` reads
//! key/value head `(q_start + h)/group − kv_start`; an optional sliding
//! window), and the three passes the fused multi-head entry points share:
//! forward and backward (cached decoding: `decode.rs`). The backward gives `dK`, `dV` per
//! key/value head, each the sum over the rank's query heads of its group
//! (in head order, so equal inputs give equal bits); a key/value head none
//! of this rank's query heads reads gets zeros.

use super::checks::{check_operand, check_size};
use super::launch::{Problem, View};
use super::shape::{AttentionShape, HeadGroups};
use super::types::{Attention, ProbsDropout};
use crate::device::{LocalTensor, copy_region};
use crate::element::DType;
use crate::error::{Error, Result};
use crate::kernels::elementwise::{softcap, softcap_backward};

/// A tensor and where a head's rows live in it.
pub(super) type Src<'a> = (&'a LocalTensor, View);

/// The forward pass of `pr`: probabilities into `probs`, output into `out`
/// (`[B·T, H·D]`), from the views of q, k and v.
pub(super) fn forward_into(
    pr: &Problem,
    [q, k, v]: [Src; 3],
    probs: &LocalTensor,
    out: &LocalTensor,
    drop: Option<&ProbsDropout>,
) -> Result<()> {
    pr.masked_dots(pr.inv_sqrt_d(), q, k, probs)?;
    if pr.g.softcap > 0.0 {
        // Masked scores are 0, and stay 0: the softmax masks them by index.
        let capped = softcap(probs, pr.g.softcap)?;
        copy_region(&capped, 0, probs, 0, probs.len())?;
    }
    pr.rows("softmax_rows", None, q.0, probs)?;
    let mixed = match drop {
        Some(d) => d.apply(probs)?,
        None => probs.clone(),
    };
    pr.mix(1.0, false, &mixed, v, (out, View::heads(&pr.s)))
}

/// The backward pass of `pr` from the saved `probs` and `d_out`: each of
/// `[dq, dk, dv]` written whole into its view.
pub(super) fn backward_into(
    pr: &Problem,
    [q, k, v]: [Src; 3],
    probs: &LocalTensor,
    d_out: &LocalTensor,
    [dq, dk, dv]: [Src; 3],
    drop: Option<&ProbsDropout>,
) -> Result<()> {
    const OP: &str = "attention_backward";
    let s = &pr.s;
    let go = View::heads(s);
    let scale = pr.inv_sqrt_d();
    // dP = dO vᵀ, then dS = P ⊙ (dP − rowsum(P ⊙ dP)) in place.
    let mut d_scores = q.0.rank().alloc(OP, &s.probs_shape(), DType::F32)?;
    pr.masked_dots(1.0, (d_out, go), v, &d_scores)?;
    // Under dropout that was dP'; the mask turns it into dP, and dV needs P'.
    let mut mixed = probs.clone();
    if let Some(d) = drop {
        d_scores = d.apply(&d_scores)?;
        mixed = d.apply(probs)?;
    }
    pr.rows("grad_softmax_rows", Some(probs), q.0, &d_scores)?;
    if pr.g.softcap > 0.0 {
        // d tanh: the raw scores again (not kept), 1 − tanh² of them.
        let raw = q.0.rank().alloc(OP, &s.probs_shape(), DType::F32)?;
        pr.masked_dots(scale, q, k, &raw)?;
        d_scores = softcap_backward(&raw, &d_scores, pr.g.softcap)?;
    }
    pr.mix(scale, false, &d_scores, k, dq)?;
    pr.mix(scale, true, &d_scores, q, dk)?;
    pr.mix(1.0, true, &mixed, (d_out, go), dv)
}

/// Check `groups` against `shape` and q, k, v; returns the problem.
pub(super) fn check(
    op: &'static str,
    [q, k, v]: [&LocalTensor; 3],
    shape: &AttentionShape,
    groups: &HeadGroups,
    k_rows: usize,
) -> Result<Problem> {
    let g = groups;
    if g.group == 0 || (shape.heads > 0 && shape.head_dim == 0) {
        return Err(Error::invalid(
            op,
            format!(
                "group {} and head_dim {} must be at least 1",
                g.group, shape.head_dim
            ),
        ));
    }
    if shape.heads > 0 {
        let (first, last) = (g.q_start / g.group, (g.q_start + shape.heads - 1) / g.group);
        if first < g.kv_start || last >= g.kv_start + g.kv_heads {
            return Err(Error::invalid(
                op,
                format!(
                    "query heads {}..{} read key/value heads {first}..={last}, but k and v hold \
                     heads {}..{}: pass the key/value heads this rank's query heads use",
                    g.q_start,
                    g.q_start + shape.heads,
                    g.kv_start,
                    g.kv_start + g.kv_heads
                ),
            ));
        }
    }
    let fits = |dims: &[usize]| {
        dims.iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .is_some()
    };
    if !fits(&[shape.batch, shape.seq]) || !fits(&[shape.heads.max(g.kv_heads), shape.head_dim]) {
        return Err(Error::invalid(op, format!("{shape:?} overflows usize")));
    }
    let d = shape.head_dim;
    check_operand(op, "queries [B·T, H·D]", q, q, &shape.out_shape())?;
    let kv_shape = [k_rows, g.kv_heads * d];
    check_operand(op, "keys [B·T, KV·D]", q, k, &kv_shape)?;
    check_operand(op, "values [B·T, KV·D]", q, v, &kv_shape)?;
    for (what, t) in [("queries", q), ("keys", k), ("values", v)] {
        check_size(op, what, t.shape(), t.device())?;
    }
    Ok(Problem {
        s: *shape,
        past: 0,
        g: *groups,
    })
}

/// The views of separate q `[B·T, H·D]` and k, v `[B·T, KV·D]`.
pub(super) fn views<'a>(
    s: &AttentionShape,
    g: &HeadGroups,
    [q, k, v]: [&'a LocalTensor; 3],
) -> [Src<'a>; 3] {
    let kv = View::packed(s.seq, g.kv_heads, s.head_dim);
    [(q, View::heads(s)), (k, kv), (v, kv)]
}

/// Grouped-query causal attention of one rank's query heads: `q` `[B·T,
/// H·D]`, `k` and `v` `[B·T, KV·D]` (F32, heads contiguous in the columns,
/// `KV = groups.kv_heads`) → the output `[B·T, H·D]` and the probabilities
/// `[B, H, T, T]` [`attention_backward_gqa`] needs. Scores are scaled by
/// `1/√D`; `groups.window` limits each query to the last `window` keys.
/// With no query heads (or no tokens) it returns empty tensors and records
/// nothing.
pub fn attention_forward_gqa(
    q: &LocalTensor,
    k: &LocalTensor,
    v: &LocalTensor,
    shape: AttentionShape,
    groups: HeadGroups,
    dropout: Option<ProbsDropout>,
) -> Result<Attention> {
    const OP: &str = "attention_forward_gqa";
    let rows = shape.batch.saturating_mul(shape.seq);
    let pr = check(OP, [q, k, v], &shape, &groups, rows)?;
    let probs_shape = shape.probs_shape();
    check_size(
        OP,
        "the attention probabilities [B, H, T, T]",
        &probs_shape,
        q.device(),
    )?;
    let out = q.rank().alloc(OP, &shape.out_shape(), DType::F32)?;
    let probs = q.rank().alloc(OP, &probs_shape, DType::F32)?;
    if !shape.is_empty() {
        let srcs = views(&shape, &groups, [q, k, v]);
        forward_into(&pr, srcs, &probs, &out, dropout.as_ref())?;
    }
    Ok(Attention { out, probs })
}

/// Gradients `[dq, dk, dv]` of [`attention_forward_gqa`] from its inputs,
/// the saved `probs` and the output gradient `d_out` `[B·T, H·D]`. `dk` and
/// `dv` hold, for each key/value head, the sum over this rank's query heads
/// that read it (zeros for a head none of them reads).
#[allow(clippy::too_many_arguments)]
pub fn attention_backward_gqa(
    q: &LocalTensor,
    k: &LocalTensor,
    v: &LocalTensor,
    probs: &LocalTensor,
    d_out: &LocalTensor,
    shape: AttentionShape,
    groups: HeadGroups,
    dropout: Option<ProbsDropout>,
) -> Result<[LocalTensor; 3]> {
    const OP: &str = "attention_backward_gqa";
    let rows = shape.batch.saturating_mul(shape.seq);
    let pr = check(OP, [q, k, v], &shape, &groups, rows)?;
    check_operand(
        OP,
        "probabilities [B, H, T, T]",
        q,
        probs,
        &shape.probs_shape(),
    )?;
    check_operand(
        OP,
        "output gradient [B·T, H·D]",
        q,
        d_out,
        &shape.out_shape(),
    )?;
    let rank = q.rank();
    let [dq, dk, dv] = [q, k, v].map(|t| rank.alloc(OP, t.shape(), DType::F32));
    let (dq, dk, dv) = (dq?, dk?, dv?);
    if shape.is_empty() || groups.kv_heads == 0 {
        // No query reads anything: the gradients are zero.
        let z = |t: &LocalTensor| rank.zeros(t.shape(), DType::F32);
        return Ok([z(q)?, z(k)?, z(v)?]);
    }
    let srcs = views(&shape, &groups, [q, k, v]);
    let dsts = [(&dq, srcs[0].1), (&dk, srcs[1].1), (&dv, srcs[2].1)];
    backward_into(&pr, srcs, probs, d_out, dsts, dropout.as_ref())?;
    Ok([dq, dk, dv])
}
