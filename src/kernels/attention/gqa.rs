//! Grouped-query attention on separate `q` `[B·T, H·D]`, `k` and `v`
//! `[B·T, KV·D]` tensors of one rank ([`HeadGroups`]: query head `h` reads
//! key/value head `(q_start + h)/group − kv_start`; an optional sliding
//! window), and the three passes the fused multi-head entry points share:
//! forward, backward and cached decoding. The backward gives `dK`, `dV` per
//! key/value head, each the sum over the rank's query heads of its group
//! (in head order, so equal inputs give equal bits); a key/value head none
//! of this rank's query heads reads gets zeros.

use super::checks::{check_operand, check_size};
use super::decode_one::{self, Rope};
use super::launch::{Problem, View};
use super::shape::{AttentionShape, HeadGroups};
use super::{Attention, Decoded, ProbsDropout};
use crate::device::{LocalTensor, copy_region};
use crate::element::DType;
use crate::error::{Error, Result};
use crate::kernels::rotary_pair;

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
    pr.mix(scale, false, &d_scores, k, dq)?;
    pr.mix(scale, true, &d_scores, q, dk)?;
    pr.mix(1.0, true, &mixed, (d_out, go), dv)
}

/// Positions a fresh key/value cache has room for, at least: a prefill
/// leaves room for the first tokens.
const MIN_ROOM: usize = 16;

/// Cached decoding of `pr` (`pr.past` positions in `cache`, `[past, 2, B,
/// KV, D]`): the output `[B·T, H·D]` of the new queries and the grown
/// cache, with every size checked against the device first. The new
/// positions are written in place where the cache's buffer has room and
/// nothing grew from it before ([`LocalTensor::grow_in_place`]); else into a
/// buffer with room for twice the positions (as far as one binding allows),
/// after a copy of the old ones.
pub(super) fn decode_into(
    op: &'static str,
    pr: &Problem,
    [q, k, v]: [Src; 3],
    rope: Rope,
    cache: Option<&LocalTensor>,
) -> Result<(LocalTensor, LocalTensor)> {
    let s = &pr.s;
    let total = pr
        .past
        .checked_add(s.seq)
        .ok_or_else(|| Error::invalid(op, "past + seq overflows usize"))?;
    let cache_shape = [total, 2, s.batch, pr.g.kv_heads, s.head_dim];
    let dev = q.0.device();
    check_size(
        op,
        "the key/value cache [T, 2, B, KV, D]",
        &cache_shape,
        dev,
    )?;
    let probs_shape = [s.batch, s.heads, s.seq, total];
    check_size(
        op,
        "the attention probabilities [B, H, T_new, T]",
        &probs_shape,
        dev,
    )?;
    let rank = q.0.rank();
    let new_cache = match cache.and_then(|c| c.grow_in_place(&cache_shape)) {
        Some(grown) => grown,
        None => {
            // Room for twice the positions (at least 16) where one binding
            // holds them.
            let mut room = cache_shape;
            room[0] = total.max(2 * pr.past).max(MIN_ROOM);
            if check_size(op, "the key/value cache", &room, dev).is_err() {
                room[0] = total;
            }
            let fresh = rank.alloc(op, &room, DType::F32)?;
            let fresh = fresh
                .claimed_prefix(&cache_shape)
                .ok_or_else(|| Error::invalid(op, "the key/value cache fits one buffer"))?;
            if let Some(c) = cache.filter(|c| !c.is_empty()) {
                copy_region(c, 0, &fresh, 0, c.len())?;
            }
            fresh
        }
    };
    let out = rank.alloc(op, &s.out_shape(), DType::F32)?;
    if decode_one::fits(pr, [q.1, k.1, v.1], q.0, rope.is_some()) {
        let scores = rank.alloc(op, &probs_shape, DType::F32)?;
        decode_one::record(pr, [q, k, v], rope, &new_cache, &scores, &out)?;
        return Ok((out, new_cache));
    }
    // Rotated apart where the one-token step cannot (the same bits).
    let rotated = match rope {
        Some((cos, sin)) => Some(rotary_pair(q.0, k.0, cos, sin, s.head_dim)?),
        None => None,
    };
    let (q, k) = match &rotated {
        Some((qr, kr)) => ((qr, q.1), (kr, k.1)),
        None => (q, k),
    };
    let n = (s.seq * 2 * s.batch * pr.g.kv_heads * s.head_dim) as u64;
    let at = View::cache_from(s, pr.g.kv_heads, pr.past);
    let params = pr.params(1.0, false, k.1, v.1, at);
    if n > 0 {
        pr.run(
            ("write_kv", super::entries::Entries::Scalar),
            params,
            n,
            [Some(k.0), None, Some(v.0)],
            k.0,
            &new_cache,
        )?;
    }
    if !s.is_empty() {
        let probs = rank.alloc(op, &probs_shape, DType::F32)?;
        let (kc, vc) = (
            View::cache_of(s, pr.g.kv_heads, 0),
            View::cache_of(s, pr.g.kv_heads, 1),
        );
        forward_into(
            pr,
            [q, (&new_cache, kc), (&new_cache, vc)],
            &probs,
            &out,
            None,
        )?;
    }
    Ok((out, new_cache))
}

/// Check `groups` against `shape` and q, k, v; returns the problem.
fn check(
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
fn views<'a>(s: &AttentionShape, g: &HeadGroups, [q, k, v]: [&'a LocalTensor; 3]) -> [Src<'a>; 3] {
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

/// One step of cached grouped-query decoding: `q` `[B·T_new, H·D]`, `k`,
/// `v` `[B·T_new, KV·D]` of the new tokens (at positions `past..past +
/// T_new`), `cache` `[past, 2, B, KV, D]` the keys and values of the earlier
/// positions (`None`: nothing cached). Returns the new tokens' output (the
/// matching rows of [`attention_forward_gqa`] over the whole sequence, the
/// window included) and the grown cache `[past + T_new, 2, B, KV, D]`,
/// written in place as [`attention_decode`](super::attention_decode) says.
pub fn attention_decode_gqa(
    q: &LocalTensor,
    k: &LocalTensor,
    v: &LocalTensor,
    cache: Option<&LocalTensor>,
    shape: AttentionShape,
    groups: HeadGroups,
) -> Result<Decoded> {
    decode_gqa(
        "attention_decode_gqa",
        [q, k, v],
        cache,
        (shape, groups),
        None,
    )
}

/// [`attention_decode_gqa`] of `q` and `k` before their rotary position
/// embedding: both are first rotated by `cos`, `sin` (`[T_new, D/2]` f32,
/// as [`rotary_pair`](crate::kernels::rotary_pair) rotates them, the same
/// bits; the cache keeps rotated keys), in the attention's own dispatch
/// where the one-token step takes it.
pub fn attention_decode_gqa_rotary(
    [q, k, v]: [&LocalTensor; 3],
    cache: Option<&LocalTensor>,
    shape: AttentionShape,
    groups: HeadGroups,
    (cos, sin): (&LocalTensor, &LocalTensor),
) -> Result<Decoded> {
    const OP: &str = "attention_decode_gqa_rotary";
    let table = [shape.seq, shape.head_dim / 2];
    for (what, t) in [("cos [T_new, D/2]", cos), ("sin [T_new, D/2]", sin)] {
        check_operand(OP, what, q, t, &table)?;
    }
    if !shape.head_dim.is_multiple_of(2) {
        return Err(Error::invalid(OP, "rotate heads of an even head_dim"));
    }
    decode_gqa(OP, [q, k, v], cache, (shape, groups), Some((cos, sin)))
}

/// The checks and the step of both public decoding entries.
fn decode_gqa(
    op: &'static str,
    [q, k, v]: [&LocalTensor; 3],
    cache: Option<&LocalTensor>,
    (shape, groups): (AttentionShape, HeadGroups),
    rope: Rope,
) -> Result<Decoded> {
    let rows = shape.batch.saturating_mul(shape.seq);
    let mut pr = check(op, [q, k, v], &shape, &groups, rows)?;
    if let Some(c) = cache {
        let past = match *c.shape() {
            [len, _, _, _, _] => len,
            _ => 0,
        };
        let want = [past, 2, shape.batch, groups.kv_heads, shape.head_dim];
        check_operand(op, "key/value cache [past, 2, B, KV, D]", q, c, &want)?;
        pr.past = past;
    }
    let srcs = views(&shape, &groups, [q, k, v]);
    let (out, cache) = decode_into(op, &pr, srcs, rope, cache)?;
    Ok(Decoded { out, cache })
}
