//! [`DTensor::reduce_scatter_add_row`]: a row-parallel layer's
//! sequence-parallel output, `Partial(Sum)` partial products reduce-scattered
//! along tokens and the replicated bias added to each rank's rows, as one
//! operation so its VJP can take the bias gradient from the all-gathered
//! `dy` the reduce-scatter's backward makes anyway. Composed of its parts
//! (`Mapping::ReduceScatterToParallel(0)`, then [`DTensor::add_row`]) the
//! bias gradient would be a `Partial` of each rank's rows and cost an extra
//! all-reduce (docs/MATH.md §5.4).

use super::autograd::{placed, record};
use super::checks::{check_bias, expect_same_mesh};
use super::dtensor::DTensor;
use super::mappings::Mapping;
use super::placement::Placement;
use crate::element::ReduceOp;
use crate::error::{Error, Result};

impl DTensor {
    /// `reduce_scatter(self) + bias`: `self` `[T, N]` `Partial(Sum)` is
    /// summed over the ranks and split along tokens (`Shard(0)`, one
    /// reduce-scatter), then the `Replicate` bias `[N]` is added to every
    /// rank's rows (computed in f32; the result in self's dtype). Backward
    /// all-gathers `dy` once: self's gradient is the gathered `dy`
    /// (`Replicate`) and the bias's its column sums (`Replicate`, f32), the
    /// same on every rank with no further communication.
    ///
    /// ```
    /// # fn main() -> wgpu_tp::Result<()> {
    /// use wgpu_tp::{DTensor, Mesh, Placement, ReduceOp};
    /// let mesh = Mesh::simulated(2)?;
    /// let z = DTensor::from_host(&mesh, &[3, 1], &[1.0, 2.0, 3.0], Placement::Partial(ReduceOp::Sum))?;
    /// let b = DTensor::from_host(&mesh, &[1], &[0.5], Placement::Replicate)?;
    /// let y = z.reduce_scatter_add_row(&b)?;
    /// assert_eq!(y.placement(), Placement::Shard(0));
    /// assert_eq!(y.to_host()?, vec![1.5, 2.5, 3.5]);
    /// # Ok(()) }
    /// ```
    pub fn reduce_scatter_add_row(&self, bias: &DTensor) -> Result<DTensor> {
        const OP: &str = "DTensor::reduce_scatter_add_row";
        expect_same_mesh(OP, self, bias)?;
        let n = match *self.shape() {
            [_, n] => n,
            ref s => {
                return Err(Error::shape(
                    OP,
                    "the partial sums as a 2-D tensor [T, N]",
                    s,
                ));
            }
        };
        if self.mesh().size() > 1 && self.placement() != Placement::Partial(ReduceOp::Sum) {
            return Err(Error::invalid(
                OP,
                format!(
                    "the partial products must be placed Partial(Sum), got {:?}",
                    self.placement()
                ),
            ));
        }
        // Every rank's rows get the whole bias: Replicate, [N], a float.
        check_bias(OP, Placement::Shard(0), n, bias, (self, 1, "the columns"))?;
        let scatter = Mapping::ReduceScatterToParallel(0);
        record(OP, &[self, bias], || {
            let y = scatter.forward(self)?.add_row(bias)?;
            Ok((y, move |dy: &DTensor| {
                let dy = scatter.backward(&placed(dy, Placement::Shard(0))?)?;
                let db = dy.sum_rows()?;
                Ok(vec![Some(dy), Some(db)])
            }))
        })
    }
}
