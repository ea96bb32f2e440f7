//! The checks the shard-by-shard operations share: both operands on one
//! mesh, splits that line up rank by rank, 2-D shapes, float dtypes, and a
//! bias placed as a product's output takes it.

use super::dtensor::DTensor;
use super::placement::{Placement, local_shape_in_units};
use crate::element::DType;
use crate::error::{Error, Result};

/// Both tensors live on one mesh (their shards pair up rank by rank).
pub(super) fn expect_same_mesh(op: &'static str, a: &DTensor, b: &DTensor) -> Result<()> {
    if !a.mesh().same_as(b.mesh()) {
        return Err(Error::invalid(op, "the operands live on different meshes"));
    }
    Ok(())
}

/// Every global rank's size of dim `d` of `t`, from its shape and placement
/// (not the addressable shards: every process must reach the same verdict).
pub(super) fn local_sizes(t: &DTensor, d: usize) -> Vec<usize> {
    let p = t.mesh().size();
    (0..p)
        .map(|r| local_shape_in_units(t.shape(), t.placement(), p, r, t.shard_unit())[d])
        .collect()
}

/// The per-rank sizes of `a`'s dim `da` and `b`'s dim `db` agree (both split
/// the same logical dim the same way), else an error naming both splits.
pub(super) fn expect_aligned(
    op: &'static str,
    (a, da, what_a): (&DTensor, usize, &str),
    (b, db, what_b): (&DTensor, usize, &str),
) -> Result<()> {
    let (sa, sb) = (local_sizes(a, da), local_sizes(b, db));
    if sa != sb {
        return Err(Error::invalid(
            op,
            format!(
                "{what_a} is split {sa:?} over the ranks (shard unit {}) but {what_b} is split \
                 {sb:?} (shard unit {}): the shards must line up; redistribute or shard both \
                 in the same units",
                a.shard_unit(),
                b.shard_unit()
            ),
        ));
    }
    Ok(())
}

/// A 2-D tensor, or a shape error naming it.
pub(super) fn dims2(op: &'static str, what: &str, t: &DTensor) -> Result<[usize; 2]> {
    match *t.shape() {
        [a, b] => Ok([a, b]),
        ref s => Err(Error::shape(op, format!("{what} as a 2-D tensor"), s)),
    }
}

/// An f32 or f16 tensor.
pub(super) fn expect_float(op: &'static str, t: &DTensor) -> Result<()> {
    if !matches!(t.dtype(), DType::F32 | DType::F16) {
        return Err(Error::DTypeMismatch {
            op,
            expected: DType::F32,
            got: t.dtype(),
        });
    }
    Ok(())
}

/// A bias `[n]` meets a `[T, n]` product placed `y`: `Shard(1)` takes a
/// `Shard(0)` bias split like `like` (the tensor and dim whose split y's
/// columns follow); `Replicate` and `Shard(0)` take a `Replicate` bias.
pub(super) fn check_bias(
    op: &'static str,
    y: Placement,
    n: usize,
    bias: &DTensor,
    like: (&DTensor, usize, &str),
) -> Result<()> {
    if bias.shape() != [n] {
        return Err(Error::shape(op, [n], bias.shape()));
    }
    expect_float(op, bias)?;
    match (y, bias.placement()) {
        (Placement::Shard(1), Placement::Shard(0)) => {
            expect_aligned(op, like, (bias, 0, "the bias"))
        }
        (Placement::Replicate | Placement::Shard(0), Placement::Replicate) => Ok(()),
        (yp @ Placement::Partial(_), bp) => Err(Error::invalid(
            op,
            format!(
                "y placed {yp:?} (bias {bp:?}) would get the bias once per rank; \
                 reduce y first (redistribute to Replicate or Shard)"
            ),
        )),
        (yp, bp) => Err(Error::invalid(
            op,
            format!(
                "no shard-by-shard bias add of y placed {yp:?} and a bias placed {bp:?}: \
                 the pairs are y Shard(1) + bias Shard(0), y Replicate or Shard(0) + \
                 bias Replicate; redistribute first"
            ),
        )),
    }
}
