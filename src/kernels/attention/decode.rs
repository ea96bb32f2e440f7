//! Cached decoding: a step's grown key/value cache and output, the
//! one-token step (`decode_one.rs`) where it fits, else the write and the
//! forward pass's kernels; and the grouped-query decoding entries.

use super::checks::{check_operand, check_size};
use super::decode_one::{self, Rope};
use super::gqa::{Src, check, forward_into, views};
use super::launch::{Problem, View};
use super::shape::{AttentionShape, HeadGroups};
use super::types::Decoded;
use crate::device::{LocalTensor, copy_region};
use crate::element::DType;
use crate::error::{Error, Result};
use crate::kernels::rotary_pair;

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
    let (new_cache, out, probs_shape) = step_buffers(op, pr, q.0, cache)?;
    if decode_one::fits(pr, [q.1, k.1, v.1], q.0, rope.is_some()) {
        let scores = q.0.rank().alloc(op, &probs_shape, DType::F32)?;
        decode_one::record(pr, [q, k, v], rope, &new_cache, &scores, &out)?;
        return Ok((out, new_cache));
    }
    let s = &pr.s;
    let rank = q.0.rank();
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

/// A step's grown cache (its new positions not yet written), its output
/// `[B·T, H·D]` and the probabilities' shape, every size checked first.
pub(super) fn step_buffers(
    op: &'static str,
    pr: &Problem,
    q: &LocalTensor,
    cache: Option<&LocalTensor>,
) -> Result<(LocalTensor, LocalTensor, [usize; 4])> {
    let (cache_shape, probs_shape) = step_shapes(op, pr, q)?;
    let (s, total, dev) = (&pr.s, cache_shape[0], q.device());
    let rank = q.rank();
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
    Ok((new_cache, out, probs_shape))
}

/// A step's grown cache shape and its probabilities' shape, each checked
/// against `q`'s device (nothing is allocated or recorded).
pub(super) fn step_shapes(
    op: &'static str,
    pr: &Problem,
    q: &LocalTensor,
) -> Result<([usize; 5], [usize; 4])> {
    let s = &pr.s;
    let total = pr
        .past
        .checked_add(s.seq)
        .ok_or_else(|| Error::invalid(op, "past + seq overflows usize"))?;
    let cache_shape = [total, 2, s.batch, pr.g.kv_heads, s.head_dim];
    let dev = q.device();
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
    Ok((cache_shape, probs_shape))
}

/// One step of cached grouped-query decoding: `q` `[B·T_new, H·D]`, `k`,
/// `v` `[B·T_new, KV·D]` of the new tokens (at positions `past..past +
/// T_new`), `cache` `[past, 2, B, KV, D]` the keys and values of the earlier
/// positions (`None`: nothing cached). Returns the new tokens' output (the
/// matching rows of [`attention_forward_gqa`](super::attention_forward_gqa) over the whole sequence, the
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
    check_tables(OP, q, &shape, (cos, sin))?;
    decode_gqa(OP, [q, k, v], cache, (shape, groups), Some((cos, sin)))
}

/// Rotary tables `[T_new, D/2]` beside `q`, for an even head_dim.
pub(super) fn check_tables(
    op: &'static str,
    q: &LocalTensor,
    shape: &AttentionShape,
    (cos, sin): (&LocalTensor, &LocalTensor),
) -> Result<()> {
    let table = [shape.seq, shape.head_dim / 2];
    for (what, t) in [("cos [T_new, D/2]", cos), ("sin [T_new, D/2]", sin)] {
        check_operand(op, what, q, t, &table)?;
    }
    if !shape.head_dim.is_multiple_of(2) {
        return Err(Error::invalid(op, "rotate heads of an even head_dim"));
    }
    Ok(())
}

/// The checks and the step of both public decoding entries.
fn decode_gqa(
    op: &'static str,
    qkv: [&LocalTensor; 3],
    cache: Option<&LocalTensor>,
    (shape, groups): (AttentionShape, HeadGroups),
    rope: Rope,
) -> Result<Decoded> {
    let (pr, srcs) = checked(op, qkv, cache, (shape, groups))?;
    let (out, cache) = decode_into(op, &pr, srcs, rope, cache)?;
    Ok(Decoded { out, cache })
}

/// The decoding entries' checks of their operands (the rotary tables
/// apart): the problem, with its cache's length, and the views of q, k, v.
pub(super) fn checked<'a>(
    op: &'static str,
    [q, k, v]: [&'a LocalTensor; 3],
    cache: Option<&LocalTensor>,
    (shape, groups): (AttentionShape, HeadGroups),
) -> Result<(Problem, [Src<'a>; 3])> {
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
    Ok((pr, views(&shape, &groups, [q, k, v])))
}
