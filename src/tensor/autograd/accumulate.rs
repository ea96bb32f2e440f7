//! Summing gradients where a value fans out (a residual, a tied weight, a
//! parameter used twice): shard by shard in f32, in the order they arrive,
//! with no communication.

use crate::device::LocalTensor;
use crate::element::DType;
use crate::error::{Error, Result};
use crate::kernels;
use crate::tensor::DTensor;

/// `a += b` in place where that gives [`sum`]'s value and bits: both f32,
/// placed and shaped alike, and `a` the sole owner of its buffers (the
/// caller holds the only handle). `false`, changing nothing, otherwise.
/// A tied embedding's two [vocab, width] gradients are summed so without a
/// third (BENCHMARKS round 29).
pub(crate) fn add_in_place(a: &DTensor, b: &DTensor) -> Result<bool> {
    let blocks = |t: &LocalTensor| t.blocks().iter().map(LocalTensor::len).collect::<Vec<_>>();
    let alike = a.shape() == b.shape()
        && a.placement() == b.placement()
        && a.dtype() == DType::F32
        && b.dtype() == DType::F32
        && a.shards()
            .iter()
            .zip(b.shards())
            .all(|(x, y)| x.is_sole_owner() && x.shape() == y.shape() && blocks(x) == blocks(y));
    if !alike {
        return Ok(false);
    }
    for (x, y) in a.shards().iter().zip(b.shards()) {
        kernels::add_assign(x, y)?;
    }
    Ok(true)
}

/// `a + b` for two gradients of one value. `b` is cast to `a`'s dtype; their
/// placements must agree (any agree on one rank).
pub(crate) fn sum(a: &DTensor, b: &DTensor) -> Result<DTensor> {
    const OP: &str = "backward (summing gradients)";
    if a.shape() != b.shape() {
        return Err(Error::shape(OP, a.shape(), b.shape()));
    }
    if a.placement() != b.placement() && a.mesh().size() > 1 {
        return Err(Error::invalid(
            OP,
            format!(
                "two gradients of one value are placed {:?} and {:?}; an operation's VJP \
                 must give its input's gradient placed as the other uses do",
                a.placement(),
                b.placement()
            ),
        ));
    }
    // DTensor::add sums in f32 and rounds once, as the layers' residuals did.
    let b = b.cast(a.dtype())?;
    let b = b.with_shards(b.shards().to_vec(), b.shape().to_vec(), a.placement());
    a.add(&b)
}
