//! [`DTensor::gqa_attention`]: causal grouped-query attention (GQA; MQA when
//! there is one key/value head; multi-head attention when there are as many
//! as query heads) with an optional sliding window, and its cached decoding
//! [`DTensor::gqa_decode`], on separate `q`, `k`, `v` projections.
//!
//! Placement: `q` `[tokens, heads·head_dim]` is `Shard(1)` in whole heads
//! (a column-parallel projection with shard unit `head_dim`: the first
//! `heads mod P` ranks take one more head, and a rank may hold none). Query
//! head `h` reads key/value head `h / (heads / kv_heads)`. `k` and `v` are
//! either *held* (what [`KvHeadLinear`](crate::nn::KvHeadLinear) gives:
//! `[tokens, P·M·head_dim]`, `Shard(1)` in units of `M·head_dim`, rank r
//! holding the `M` heads from [`Holding::kv_heads`]'s start, a head needed
//! by several ranks held by each) or `Replicate` `[tokens,
//! kv_heads·head_dim]` (every head on every rank). The output is
//! `Shard(1)` in whole heads, split like `q`, ready for a row-parallel
//! projection. Forward communicates nothing. The VJP gives `dq` split like
//! `q`, and `dk`, `dv` as each rank's sum over its own query heads: held
//! like k (the holders' shares are summed at the projection's weights and
//! input), or `Partial(Sum)` for replicated k, so the key/value
//! projection's gradient is summed over the ranks exactly once
//! (docs/MATH.md §GQA).

use super::attention::AttentionDropout;
use super::autograd::record;
use super::dtensor::DTensor;
use super::holding::Holding;
use super::placement::{Placement, local_shape_in_units};
use crate::element::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::kernels::attention::{Step, decode_steps};
use crate::kernels::{
    AttentionShape, HeadGroups, HeadWindow, ProbsDropout, attention_backward_gqa,
    attention_forward_gqa,
};

/// The sizes of a grouped-query attention.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GqaSpec {
    /// Tokens per sequence (tokens are batch-major); in decoding, ignored.
    pub seq: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (divides `heads`).
    pub kv_heads: usize,
    /// Width of every head.
    pub head_dim: usize,
    /// Sliding window (position `i` sees `j` when `i − window < j ≤ i`); 0
    /// is plain causal attention.
    pub window: usize,
    /// Dropout on the probabilities (training), keyed on the global query head.
    pub dropout: Option<AttentionDropout>,
    /// Scores soft-capped to `cap · tanh(s / cap)` before the softmax
    /// (Gemma 2); `None` is none.
    pub softcap: Option<f32>,
}

/// Each addressable rank's `(first global query head, count)`.
fn query_split(op: &'static str, q: &DTensor, spec: &GqaSpec) -> Result<Vec<(usize, usize)>> {
    let (heads, kv, d) = (spec.heads, spec.kv_heads, spec.head_dim);
    if heads == 0 || kv == 0 || d == 0 || !heads.is_multiple_of(kv) {
        return Err(Error::invalid(
            op,
            format!(
                "heads {heads}, kv_heads {kv}, head_dim {d}: all at least 1, and kv_heads \
                 dividing heads"
            ),
        ));
    }
    let p = q.mesh().size();
    if p > 1 && (q.placement() != Placement::Shard(1) || !q.shard_unit().is_multiple_of(d)) {
        return Err(Error::invalid(
            op,
            format!(
                "q must be Shard(1) in whole heads (a column-parallel projection with shard \
                 unit head_dim = {d}), got {:?} in units of {}",
                q.placement(),
                q.shard_unit()
            ),
        ));
    }
    let cols = |r| local_shape_in_units(q.shape(), q.placement(), p, r, q.shard_unit())[1];
    Ok(q.shards()
        .iter()
        .map(|s| {
            let start = (0..s.rank_index()).map(cols).sum::<usize>() / d;
            (start, s.shape()[1] / d)
        })
        .collect())
}

/// Which key/value heads each rank's `k` and `v` hold.
struct KvLayout {
    /// Held (`Shard(1)` of the expanded heads), or `Replicate`.
    held: bool,
    /// Heads per rank.
    per: usize,
    /// Each global rank's first head.
    starts: Vec<usize>,
}

/// q, k, v are f32 matrices of the right widths, k and v held or `Replicate`
/// alike: the tokens and the key/value layout.
fn check_operands(
    op: &'static str,
    [q, k, v]: [&DTensor; 3],
    spec: &GqaSpec,
) -> Result<(usize, KvLayout)> {
    let (hd, d) = (spec.heads * spec.head_dim, spec.head_dim);
    let [tokens, w] = *q.shape() else {
        return Err(Error::shape(op, format!("q [tokens, {hd}]"), q.shape()));
    };
    if w != hd {
        return Err(Error::shape(op, format!("q [tokens, {hd}]"), q.shape()));
    }
    let p = q.mesh().size();
    let holding = Holding::kv_heads(spec.heads, spec.kv_heads, p)?;
    let layout = if k.placement() == Placement::Shard(1) {
        KvLayout {
            held: true,
            per: holding.per,
            starts: holding.starts,
        }
    } else {
        KvLayout {
            held: false,
            per: spec.kv_heads,
            starts: vec![0; p],
        }
    };
    let (width, unit) = match layout.held {
        true => (p * layout.per * d, layout.per * d),
        false => (spec.kv_heads * d, 1),
    };
    for (what, t) in [("k", k), ("v", v)] {
        if t.shape() != [tokens, width] {
            return Err(Error::shape(
                op,
                format!("{what} [{tokens}, {width}]"),
                t.shape(),
            ));
        }
        if !t.mesh().same_as(q.mesh()) {
            return Err(Error::invalid(op, format!("{what} lives on another mesh")));
        }
        let fits = match layout.held {
            true => t.placement() == Placement::Shard(1) && t.shard_unit() == unit,
            false => t.placement() == Placement::Replicate || p == 1,
        };
        if !fits {
            return Err(Error::invalid(
                op,
                format!(
                    "k and v must both be held (Shard(1) in units of {} heads · head_dim, as                      KvHeadLinear gives) or both Replicate; {what} is {:?} in units of {}",
                    holding.per,
                    t.placement(),
                    t.shard_unit()
                ),
            ));
        }
    }
    for t in [q, k, v] {
        if t.dtype() != DType::F32 {
            return Err(Error::DTypeMismatch {
                op,
                expected: DType::F32,
                got: t.dtype(),
            });
        }
    }
    Ok((tokens, layout))
}

/// The kernels' head groups for global rank `r` whose query heads start at
/// `start`.
fn groups(spec: &GqaSpec, start: usize, kv: &KvLayout, r: usize) -> HeadGroups {
    HeadGroups {
        group: spec.heads / spec.kv_heads,
        q_start: start,
        kv_start: kv.starts[r],
        kv_heads: kv.per,
        window: spec.window,
        softcap: spec.softcap.unwrap_or(0.0),
    }
}

fn probs_dropout(spec: &GqaSpec, start: usize) -> Option<ProbsDropout> {
    spec.dropout.map(|d| ProbsDropout {
        p: d.p,
        key: d.key,
        heads: HeadWindow {
            start,
            total: spec.heads,
        },
    })
}

impl DTensor {
    /// Causal grouped-query attention `softmax(q kᵀ/√D, causal[, window]) v`
    /// of `q` (`self`, `[batch·seq, heads·D]`, `Shard(1)` in whole heads),
    /// `k` and `v` (`[batch·seq, kv_heads·D]`, `Replicate`) → `[batch·seq,
    /// heads·D]` `Shard(1)` in units of `D`. See the module docs for the
    /// placements and the VJP's.
    pub fn gqa_attention(&self, k: &DTensor, v: &DTensor, spec: &GqaSpec) -> Result<DTensor> {
        const OP: &str = "DTensor::gqa_attention";
        let split = query_split(OP, self, spec)?;
        let (tokens, kv) = check_operands(OP, [self, k, v], spec)?;
        let seq = spec.seq;
        if seq == 0 || !tokens.is_multiple_of(seq) {
            return Err(Error::invalid(
                OP,
                format!("{tokens} tokens are not a whole number of sequences of {seq}"),
            ));
        }
        if let Some(dp) = spec.dropout
            && !(0.0..1.0).contains(&dp.p)
        {
            return Err(Error::invalid(
                OP,
                format!("dropout {} must lie in [0, 1)", dp.p),
            ));
        }
        let (d, spec) = (spec.head_dim, *spec);
        let shape = move |h: usize| AttentionShape::new(tokens / seq, seq, h, d);
        record(OP, &[self, k, v], || {
            let mut outs = Vec::with_capacity(split.len());
            let mut probs = Vec::with_capacity(split.len());
            for (r, &(start, h)) in split.iter().enumerate() {
                let (qs, ks, vs) = (&self.shards()[r], &k.shards()[r], &v.shards()[r]);
                let a = attention_forward_gqa(
                    qs,
                    ks,
                    vs,
                    shape(h),
                    groups(&spec, start, &kv, qs.rank_index()),
                    probs_dropout(&spec, start),
                )?;
                outs.push(a.out);
                probs.push(a.probs);
            }
            let y = self.with_shards_in_units(outs, self.shape().to_vec(), Placement::Shard(1), d);
            let (q, k, v) = (self.detach(), k.detach(), v.detach());
            Ok((y, move |dy: &DTensor| {
                let dy = if dy.placement() == Placement::Shard(1) || dy.mesh().size() == 1 {
                    dy.cast(DType::F32)?
                } else {
                    dy.move_to(Placement::Shard(1), d)?.cast(DType::F32)?
                };
                let (mut dq, mut dk, mut dv) = (vec![], vec![], vec![]);
                for (r, &(start, h)) in split.iter().enumerate() {
                    let [a, b, c] = attention_backward_gqa(
                        &q.shards()[r],
                        &k.shards()[r],
                        &v.shards()[r],
                        &probs[r],
                        &dy.shards()[r],
                        shape(h),
                        groups(&spec, start, &kv, q.shards()[r].rank_index()),
                        probs_dropout(&spec, start),
                    )?;
                    dq.push(a);
                    dk.push(b);
                    dv.push(c);
                }
                // Held: each holder's share, summed where k came from.
                let kv_at = if kv.held || q.mesh().size() == 1 {
                    k.placement()
                } else {
                    Placement::Partial(ReduceOp::Sum)
                };
                let dq =
                    q.with_shards_in_units(dq, q.shape().to_vec(), q.placement(), q.shard_unit());
                let dk = k.with_shards(dk, k.shape().to_vec(), kv_at);
                let dv = v.with_shards(dv, v.shape().to_vec(), kv_at);
                Ok(vec![Some(dq), Some(dk), Some(dv)])
            }))
        })
    }

    /// One step of cached grouped-query decoding of a single sequence:
    /// `self` (q), `k`, `v` hold the new tokens (placed as for
    /// [`DTensor::gqa_attention`]), `cache` the earlier positions' keys and
    /// values (`None` before the first step): `[past, 2, 1, P·M, D]`,
    /// `Shard(3)` in units of `M` for held k and v, `[past, 2, 1, kv_heads,
    /// D]` `Replicate` for replicated ones (grown in place as
    /// [`kernels::attention_decode_gqa`](crate::kernels::attention_decode_gqa)
    /// says). Returns the new tokens' output (the matching rows of
    /// [`DTensor::gqa_attention`] over the whole sequence, window included)
    /// and the grown cache. Communicates nothing; not differentiable.
    pub fn gqa_decode(
        &self,
        k: &DTensor,
        v: &DTensor,
        cache: Option<&DTensor>,
        spec: &GqaSpec,
    ) -> Result<(DTensor, DTensor)> {
        self.decode_step("DTensor::gqa_decode", [k, v], cache, spec, None)
    }

    /// [`DTensor::gqa_decode`] of a query and key before their rotary
    /// position embedding: both are rotated by `cos`, `sin` (`[new, D/2]`,
    /// `Replicate`, as [`DTensor::rotary_pair`] takes them; the same bits)
    /// first, in the attention's own dispatch where the one-token step
    /// takes it ([`kernels::attention_decode_gqa_rotary`](crate::kernels::attention_decode_gqa_rotary)).
    pub fn gqa_decode_rotary(
        &self,
        [k, v]: [&DTensor; 2],
        cache: Option<&DTensor>,
        spec: &GqaSpec,
        (cos, sin): (&DTensor, &DTensor),
    ) -> Result<(DTensor, DTensor)> {
        const OP: &str = "DTensor::gqa_decode_rotary";
        let want = [
            self.shape().first().copied().unwrap_or(0),
            spec.head_dim / 2,
        ];
        for t in [cos, sin] {
            if t.shape() != want
                || t.placement() != Placement::Replicate
                || !t.mesh().same_as(self.mesh())
            {
                return Err(Error::shape(
                    OP,
                    format!("cos and sin {want:?} Replicate on q's mesh"),
                    t.shape(),
                ));
            }
        }
        self.decode_step(OP, [k, v], cache, spec, Some((cos, sin)))
    }

    /// The step of both decoding entries (`rope`: the rotary tables).
    fn decode_step(
        &self,
        op: &'static str,
        [k, v]: [&DTensor; 2],
        cache: Option<&DTensor>,
        spec: &GqaSpec,
        rope: Option<(&DTensor, &DTensor)>,
    ) -> Result<(DTensor, DTensor)> {
        let split = query_split(op, self, spec)?;
        let (new, kv) = check_operands(op, [self, k, v], spec)?;
        let d = spec.head_dim;
        let (heads, placement) = match kv.held {
            true => (self.mesh().size() * kv.per, Placement::Shard(3)),
            false => (kv.per, Placement::Replicate),
        };
        let past = match cache {
            None => 0,
            Some(c) => match *c.shape() {
                [past, 2, 1, h, e]
                    if h == heads
                        && e == d
                        && c.mesh().same_as(self.mesh())
                        && (c.placement() == placement || c.mesh().size() == 1) =>
                {
                    past
                }
                _ => {
                    return Err(Error::shape(
                        op,
                        format!("cache [past, 2, 1, {heads}, {d}] {placement:?} on q's mesh"),
                        c.shape(),
                    ));
                }
            },
        };
        // Every rank's step at once: ranks sharing a CPU adapter record
        // theirs together (the same bits as one by one).
        let steps: Vec<Step> = (split.iter().enumerate())
            .map(|(r, &(start, h))| Step {
                qkv: [&self.shards()[r], &k.shards()[r], &v.shards()[r]],
                cache: cache.map(|c| &c.shards()[r]),
                shape: AttentionShape::new(1, new, h, d),
                groups: groups(spec, start, &kv, self.shards()[r].rank_index()),
                rope: rope.map(|(cos, sin)| (&cos.shards()[r], &sin.shards()[r])),
            })
            .collect();
        let (outs, grown): (Vec<_>, Vec<_>) = (decode_steps(&steps)?.into_iter())
            .map(|s| (s.out, s.cache))
            .unzip();
        let out = self.with_shards_in_units(outs, self.shape().to_vec(), Placement::Shard(1), d);
        let shape = vec![past + new, 2, 1, heads, d];
        let unit = if kv.held { kv.per } else { 1 };
        let cache = self.with_shards_in_units(grown, shape, placement, unit);
        Ok((out, cache))
    }
}
