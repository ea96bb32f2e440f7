//! [`DataParallel`]: gradients averaged over a mesh's data-parallel axis.
//!
//! Each replica of a model lives on its own group of the other axes (its
//! tensor-parallel sub-mesh, [`Mesh::axis_groups`]) and takes its own slice
//! of the global batch. After backward, the gradient shards that sit at the
//! same place in every replica (same parameter, same tensor-parallel rank)
//! are summed over the replicas and divided by their number: with a mean
//! loss per slice and equal slices, that is the gradient of the mean loss
//! over the global batch. Shards are packed into buckets (one all-reduce per
//! bucket per data-parallel group, last parameters first, as backward makes
//! them), summed in the replicas' order along the axis, so the result never
//! depends on timing, and every replica ends with the same bytes.

use std::ops::Range;

use super::{Parameter, Params};
use crate::device::Mesh;
use crate::error::{Error, Result};
use crate::tensor::DTensor;
use crate::tensor::replicas::Replicas;

/// Default bucket: 25 MiB of gradient per rank, PyTorch DDP's default.
const DEFAULT_BUCKET_BYTES: u64 = 25 << 20;

const OP: &str = "DataParallel::average_gradients";

/// Averages replicas' gradients over one axis of a mesh (see the module doc).
#[derive(Clone, Debug)]
pub struct DataParallel {
    replicas: Replicas,
    bucket_bytes: u64,
}

/// The gradients to average: each parameter's index and `(name, its
/// gradient in every replica)`, last parameters first (backward makes
/// them first).
pub(super) type Gradients = (Vec<usize>, Vec<(String, Vec<DTensor>)>);

impl DataParallel {
    /// Data parallelism over axis `axis` of `mesh` (or of the mesh `mesh`
    /// was taken from).
    pub fn new(mesh: &Mesh, axis: &str) -> Result<DataParallel> {
        Ok(DataParallel {
            replicas: Replicas::new(mesh, axis)?,
            bucket_bytes: DEFAULT_BUCKET_BYTES,
        })
    }

    /// Pack up to `bytes` of gradient per rank into one all-reduce (at least
    /// one parameter's shard per bucket; capped by the device's binding size).
    pub fn with_bucket_bytes(mut self, bytes: u64) -> DataParallel {
        self.bucket_bytes = bytes.max(4);
        self
    }

    /// The number of replicas (the axis's size).
    pub fn size(&self) -> usize {
        self.replicas.size()
    }

    /// The replicas along the axis (the tensor floor's view of them).
    pub(super) fn replicas(&self) -> &Replicas {
        &self.replicas
    }

    /// The rows of a global batch of `rows` sequences that replica `index`
    /// (its coordinate along the axis) takes: an equal contiguous slice.
    pub fn batch_rows(&self, rows: usize, index: usize) -> Result<Range<usize>> {
        let size = self.size();
        if index >= size {
            return Err(Error::OutOfRange {
                op: "DataParallel::batch_rows",
                what: "replica",
                value: index as i64,
                bound: size,
            });
        }
        if rows == 0 || !rows.is_multiple_of(size) {
            return Err(Error::invalid(
                "DataParallel::batch_rows",
                format!(
                    "a global batch of {rows} sequences does not split evenly over {size} {:?} replicas; \
                     use a batch that is a multiple of {size}",
                    self.replicas.axis()
                ),
            ));
        }
        let per = rows / size;
        Ok(index * per..(index + 1) * per)
    }

    /// Every parameter with a gradient in the replicas `lists` (built alike:
    /// the same names and shapes), with those gradients; a parameter with a
    /// gradient in some replicas only is an error.
    pub(super) fn gradients(&self, lists: &[Vec<(String, &mut Parameter)>]) -> Result<Gradients> {
        let Some(first) = lists.first() else {
            return Ok((Vec::new(), Vec::new()));
        };
        for list in lists {
            let same = list.len() == first.len()
                && (list.iter().zip(first))
                    .all(|((a, p), (b, q))| a == b && p.value.shape() == q.value.shape());
            if !same {
                return Err(Error::invalid(
                    OP,
                    "the replicas' parameters differ in names or shapes; build every replica alike",
                ));
            }
        }
        let (mut params, mut items) = (Vec::new(), Vec::new());
        for i in (0..first.len()).rev() {
            let grads: Vec<Option<DTensor>> = lists.iter().map(|l| l[i].1.grad()).collect();
            if grads.iter().all(Option::is_none) {
                continue;
            }
            let Some(grads) = grads.into_iter().collect::<Option<Vec<_>>>() else {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "{:?} has a gradient in some replicas only; run backward on every replica first",
                        first[i].0
                    ),
                ));
            };
            params.push(i);
            items.push((first[i].0.clone(), grads));
        }
        Ok((params, items))
    }

    /// Replace every gradient of `replicas` (this process's replicas, one
    /// model each, built alike) by its average over the axis. Parameters
    /// without a gradient in every replica are left alone. Checks everything
    /// before anything moves; on an error no gradient has changed.
    pub fn average_gradients(&self, replicas: &mut [&mut dyn Params]) -> Result<()> {
        if self.size() == 1 {
            return Ok(());
        }
        let mut lists: Vec<Vec<(String, &mut Parameter)>> = replicas
            .iter_mut()
            .map(|r| r.named_parameters_mut())
            .collect();
        let (params, items) = self.gradients(&lists)?;
        let places = self.replicas.places(OP, &items)?;
        // Every reduction is recorded before any gradient is swapped in.
        let averaged = self.replicas.mean(&places, self.bucket_bytes)?;
        for (&i, per_replica) in params.iter().zip(averaged) {
            for (list, grad) in lists.iter_mut().zip(per_replica) {
                list[i].1.set_grad(Some(grad))?;
            }
        }
        Ok(())
    }

    /// The mean over all replicas of a one-value tensor each local replica
    /// holds (its loss, replicated over its group), as Megatron's
    /// `average_losses_across_data_parallel_group`: one all-reduce over the
    /// axis, the same value on every process.
    pub fn mean(&self, values: &[DTensor]) -> Result<f32> {
        self.replicas.mean_of_values("DataParallel::mean", values)
    }
}
