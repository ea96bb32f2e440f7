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

use super::autograd::{linear_dy, record};
use super::dtensor::{DTensor, Placement};
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
        if self.shape().len() != 2 {
            return Err(Error::shape(
                OP,
                "x as [tokens, heads·head_dim]",
                self.shape(),
            ));
        }
        if self.dtype() != DType::F32 {
            return Err(Error::DTypeMismatch {
                op: OP,
                expected: DType::F32,
                got: self.dtype(),
            });
        }
        if head_dim == 0 || !head_dim.is_multiple_of(2) {
            return Err(Error::invalid(
                OP,
                format!("head_dim {head_dim} must be even and ≥ 2"),
            ));
        }
        let half = head_dim / 2;
        check_table(OP, "cos", cos, self, half)?;
        check_table(OP, "sin", sin, self, half)?;
        let ok = matches!(
            self.placement(),
            Placement::Replicate | Placement::Shard(1) | Placement::Partial(ReduceOp::Sum)
        );
        if !ok && self.mesh().size() > 1 {
            return Err(Error::invalid(
                OP,
                format!(
                    "x must be Replicate, Shard(1) in whole heads or Partial(Sum) (a token's \
                     position is its row), got {:?}",
                    self.placement()
                ),
            ));
        }
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
}
