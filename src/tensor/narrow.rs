//! [`DTensor::narrow`]: a window along a dimension that is not split (rows of
//! a replicated or column-split activation), shard by shard with
//! [`kernels::narrow`] and no communication. Its VJP puts the gradient back
//! in its window with zeros around it.

use super::autograd::{placed, record};
use super::dtensor::DTensor;
use super::placement::Placement;
use crate::error::{Error, Result};
use crate::kernels;

impl DTensor {
    /// Entries `start..start + len` along `dim` (all of every other dim).
    /// `dim` must not be the split dim of a `Shard` placement: slice such a
    /// tensor after redistributing it.
    pub fn narrow(&self, dim: usize, start: usize, len: usize) -> Result<DTensor> {
        const OP: &str = "DTensor::narrow";
        let size = *self.shape().get(dim).ok_or(Error::OutOfRange {
            op: OP,
            what: "dim",
            value: dim as i64,
            bound: self.shape().len(),
        })?;
        if start.checked_add(len).is_none_or(|end| end > size) {
            return Err(Error::invalid(
                OP,
                format!("a window of {len} from {start} passes dim {dim} of size {size}"),
            ));
        }
        if self.placement() == Placement::Shard(dim) {
            return Err(Error::invalid(
                OP,
                format!("dim {dim} is split over the ranks: redistribute before narrowing it"),
            ));
        }
        record(OP, &[self], || {
            let shards = self
                .shards()
                .iter()
                .map(|s| kernels::narrow(s, dim, start, len))
                .collect::<Result<Vec<_>>>()?;
            let mut shape = self.shape().to_vec();
            shape[dim] = len;
            let y = self.with_shards(shards, shape, self.placement());
            let x = self.detach();
            Ok((y, move |dy: &DTensor| {
                Ok(vec![Some(widen(
                    &x,
                    &placed(dy, x.placement())?,
                    dim,
                    start,
                )?)])
            }))
        })
    }
}

/// `dy` placed at `start` along `dim` of a tensor shaped like `x`, zeros
/// elsewhere.
fn widen(x: &DTensor, dy: &DTensor, dim: usize, start: usize) -> Result<DTensor> {
    let shards = x
        .shards()
        .iter()
        .zip(dy.shards())
        .map(|(xs, d)| {
            let zeros = |n: usize| {
                let mut shape = xs.shape().to_vec();
                shape[dim] = n;
                xs.rank().zeros(&shape, d.dtype())
            };
            let after = xs.shape()[dim] - start - d.shape()[dim];
            let (a, b) = (zeros(start)?, zeros(after)?);
            let parts: Vec<&_> = [&a, d, &b]
                .into_iter()
                .filter(|t| t.shape()[dim] > 0)
                .collect();
            kernels::concat(&parts, dim)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(x.with_shards(shards, x.shape().to_vec(), dy.placement()))
}
