//! [`DTensor::rotary`]: rotary position embedding (RoPE, Hugging Face's
//! `rotate_half` layout) of every head of a `[tokens, heads·head_dim]`
//! projection, shard by shard with [`kernels::rotary`] and no
//! communication. Tokens are batch-major; token `r` takes row `r mod seq` of
//! the `cos`, `sin` tables `[seq, head_dim/2]` (`Replicate`), so training
//! passes the tables of positions `0..seq` and cached decoding those of the
//! new positions. The rotation acts within a head, so any placement that
//! keeps whole heads on a rank works: `Replicate`, `Shard(1)` in whole heads,
//! and (it is linear) `Partial(Sum)`. Its VJP is the inverse rotation,
//! placed like the incoming gradient when that is a partial sum (each rank's
//! share of a replicated key's gradient), else like the input.

use super::autograd::{linear_dy, record, tracking};
use super::dtensor::DTensor;
use super::placement::Placement;
use crate::element::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::kernels;

/// The tables are `[seq, half]`, f32, `Replicate`, on x's mesh.
fn check_table(op: &'static str, what: &str, t: &DTensor, x: &DTensor, half: usize) -> Result<()> {
    if !t.mesh().same_as(x.mesh()) {
        return Err(Error::invalid(op, format!("{what} lives on another mesh")));
    }
    if t.shape().len() != 2 || t.shape()[1] != half {
        return Err(Error::shape(op, format!("{what} [seq, {half}]"), t.shape()));
    }
    if t.placement() != Placement::Replicate && t.mesh().size() > 1 {
        return Err(Error::invalid(op, format!("{what} must be Replicate")));
    }
    t.shards()[0].expect_dtype(op, DType::F32)
}

/// `x` is what [`DTensor::rotary`] takes with these tables.
fn check_x(
    op: &'static str,
    x: &DTensor,
    (cos, sin): (&DTensor, &DTensor),
    head_dim: usize,
) -> Result<()> {
    if x.shape().len() != 2 {
        return Err(Error::shape(op, "x as [tokens, heads·head_dim]", x.shape()));
    }
    if x.dtype() != DType::F32 {
        return Err(Error::DTypeMismatch {
            op,
            expected: DType::F32,
            got: x.dtype(),
        });
    }
    if head_dim == 0 || !head_dim.is_multiple_of(2) {
        return Err(Error::invalid(
            op,
            format!("head_dim {head_dim} must be even and ≥ 2"),
        ));
    }
    let half = head_dim / 2;
    check_table(op, "cos", cos, x, half)?;
    check_table(op, "sin", sin, x, half)?;
    let ok = matches!(
        x.placement(),
        Placement::Replicate | Placement::Shard(1) | Placement::Partial(ReduceOp::Sum)
    );
    if !ok && x.mesh().size() > 1 {
        return Err(Error::invalid(
            op,
            format!(
                "x must be Replicate, Shard(1) in whole heads or Partial(Sum) (a token's \
             position is its row), got {:?}",
                x.placement()
            ),
        ));
    }
    Ok(())
}

/// `x` rotated (or rotated back) shard by shard, placed `placement`.
fn rotate(
    x: &DTensor,
    (cos, sin): (&DTensor, &DTensor),
    head_dim: usize,
    inverse: bool,
    placement: Placement,
) -> Result<DTensor> {
    let shards = x
        .shards()
        .iter()
        .enumerate()
        .map(|(r, s)| kernels::rotary(s, &cos.shards()[r], &sin.shards()[r], head_dim, inverse))
        .collect::<Result<Vec<_>>>()?;
    Ok(x.with_shards_in_units(shards, x.shape().to_vec(), placement, x.shard_unit()))
}

impl DTensor {
    /// Rotary position embedding of every head of `self` `[tokens,
    /// heads·head_dim]` (f32): with `x₁`, `x₂` a head's halves, `y₁ = x₁ cos
    /// − x₂ sin`, `y₂ = x₂ cos + x₁ sin`, token `r` at row `r mod seq` of
    /// `cos`, `sin` `[seq, head_dim/2]` (`Replicate`). `self` is
    /// `Replicate`, `Shard(1)` in whole heads or `Partial(Sum)`; the result is
    /// placed like it. Communicates nothing.
    pub fn rotary(&self, cos: &DTensor, sin: &DTensor, head_dim: usize) -> Result<DTensor> {
        const OP: &str = "DTensor::rotary";
        check_x(OP, self, (cos, sin), head_dim)?;
        record(OP, &[self], || {
            let tables = (cos.detach(), sin.detach());
            let y = rotate(
                self,
                (&tables.0, &tables.1),
                head_dim,
                false,
                self.placement(),
            )?;
            let from = self.placement();
            Ok((y, move |dy: &DTensor| {
                let (dy, at) = linear_dy(dy, from)?;
                let dy = dy.cast(DType::F32)?;
                Ok(vec![Some(rotate(
                    &dy,
                    (&tables.0, &tables.1),
                    head_dim,
                    true,
                    at,
                )?)])
            }))
        })
    }

    /// `(self.rotary(cos, sin, head_dim), k.rotary(cos, sin, head_dim))`
    /// (a decoding step's query and key, the same tokens): where nothing is
    /// recorded, one dispatch per rank for both ([`kernels::rotary_pair`],
    /// the same bits); recorded, the two operations.
    pub fn rotary_pair(
        &self,
        k: &DTensor,
        cos: &DTensor,
        sin: &DTensor,
        head_dim: usize,
    ) -> Result<(DTensor, DTensor)> {
        const OP: &str = "DTensor::rotary_pair";
        if tracking(&[self, k]) || !self.mesh().same_as(k.mesh()) {
            return Ok((
                self.rotary(cos, sin, head_dim)?,
                k.rotary(cos, sin, head_dim)?,
            ));
        }
        check_x(OP, self, (cos, sin), head_dim)?;
        check_x(OP, k, (cos, sin), head_dim)?;
        if k.shape()[0] != self.shape()[0] {
            return Err(Error::shape(
                OP,
                format!("k with q's {} tokens", self.shape()[0]),
                k.shape(),
            ));
        }
        let (mut qs, mut ks) = (Vec::new(), Vec::new());
        for (r, (q, kr)) in self.shards().iter().zip(k.shards()).enumerate() {
            let (a, b) = kernels::rotary_pair(q, kr, &cos.shards()[r], &sin.shards()[r], head_dim)?;
            qs.push(a);
            ks.push(b);
        }
        Ok((
            self.with_shards_in_units(
                qs,
                self.shape().to_vec(),
                self.placement(),
                self.shard_unit(),
            ),
            k.with_shards_in_units(ks, k.shape().to_vec(), k.placement(), k.shard_unit()),
        ))
    }
}
