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

mod shards;

use super::{Parameter, Params};
use crate::device::{LocalTensor, Mesh};
use crate::element::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::tensor::{DTensor, Placement};

/// Default bucket: 25 MiB of gradient per rank, PyTorch DDP's default.
const DEFAULT_BUCKET_BYTES: u64 = 25 << 20;

/// Averages replicas' gradients over one axis of a mesh (see the module doc).
#[derive(Clone, Debug)]
pub struct DataParallel {
    root: Mesh,
    axis: String,
    size: usize,
    bucket_bytes: u64,
    /// The axis's groups this process drives, held so that each stays one
    /// mesh (and keeps its communication counts) between steps.
    _groups: Vec<Mesh>,
}

impl DataParallel {
    /// Data parallelism over axis `axis` of `mesh` (or of the mesh `mesh`
    /// was taken from).
    pub fn new(mesh: &Mesh, axis: &str) -> Result<DataParallel> {
        let root = mesh.root();
        let size = root.axis_size(axis)?;
        Ok(DataParallel {
            _groups: root.axis_groups(axis)?,
            root,
            axis: axis.to_string(),
            size,
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
        self.size
    }

    /// The rows of a global batch of `rows` sequences that replica `index`
    /// (its coordinate along the axis) takes: an equal contiguous slice.
    pub fn batch_rows(&self, rows: usize, index: usize) -> Result<Range<usize>> {
        if index >= self.size {
            return Err(Error::OutOfRange {
                op: "DataParallel::batch_rows",
                what: "replica",
                value: index as i64,
                bound: self.size,
            });
        }
        if rows == 0 || !rows.is_multiple_of(self.size) {
            return Err(Error::invalid(
                "DataParallel::batch_rows",
                format!(
                    "a global batch of {rows} sequences does not split evenly over {} {:?} replicas; \
                     use a batch that is a multiple of {}",
                    self.size, self.axis, self.size
                ),
            ));
        }
        let per = rows / self.size;
        Ok(index * per..(index + 1) * per)
    }

    /// Replace every gradient of `replicas` (this process's replicas, one
    /// model each, built alike) by its average over the axis. Parameters
    /// without a gradient in every replica are left alone. Checks everything
    /// before anything moves; on an error no gradient has changed.
    pub fn average_gradients(&self, replicas: &mut [&mut dyn Params]) -> Result<()> {
        if self.size == 1 {
            return Ok(());
        }
        let mut lists: Vec<Vec<(String, &mut Parameter)>> = replicas
            .iter_mut()
            .map(|r| r.named_parameters_mut())
            .collect();
        let (entries, groups) = self.entries(&lists)?;
        if entries.is_empty() {
            return Ok(());
        }
        let mut out: Vec<Option<LocalTensor>> = vec![None; entries.len()];
        for (g, group) in groups.iter().enumerate() {
            let mine: Vec<usize> = (0..entries.len())
                .filter(|&e| entries[e].group == g)
                .collect();
            for bucket in self.buckets(&entries, &mine, group)? {
                for (e, t) in self.reduce_bucket(&entries, &bucket, group)? {
                    out[e] = Some(t);
                }
            }
        }
        // Every reduction has been recorded: now swap the gradients in.
        for (k, list) in lists.iter_mut().enumerate() {
            for (i, (_, p)) in list.iter_mut().enumerate() {
                let Some(grad) = p.grad() else { continue };
                let shards: Option<Vec<LocalTensor>> = entries
                    .iter()
                    .zip(&out)
                    .filter(|(e, _)| e.replica == k && e.param == i)
                    .map(|(e, t)| {
                        t.as_ref()
                            .map(|t| t.retagged(grad.shards()[e.shard].rank_index()))
                    })
                    .collect();
                let Some(shards) = shards else { continue };
                let (shape, placement) = (grad.shape().to_vec(), grad.placement());
                p.set_grad(Some(grad.with_shards(shards, shape, placement)))?;
            }
        }
        Ok(())
    }

    /// The mean over all replicas of a one-value tensor each local replica
    /// holds (its loss, replicated over its group), as Megatron's
    /// `average_losses_across_data_parallel_group`: one all-reduce over the
    /// axis, the same value on every process.
    pub fn mean(&self, values: &[DTensor]) -> Result<f32> {
        const OP: &str = "DataParallel::mean";
        let mut group: Option<Mesh> = None;
        let mut shards: Vec<(usize, LocalTensor)> = Vec::new();
        for v in values {
            if v.shape().iter().product::<usize>() != 1
                || v.dtype() != DType::F32
                || v.placement() != Placement::Replicate
            {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "takes one replicated f32 value per replica (a loss), got {:?} placed {:?}",
                        v.shape(),
                        v.placement()
                    ),
                ));
            }
            // Each replica's first rank here: its value's copy on that rank.
            let s = &v.shards()[0];
            let root_rank = v.mesh().root_rank(s.rank_index())?;
            let g = self.root.group_of(&[self.axis.as_str()], root_rank)?;
            let pos = g
                .members()
                .and_then(|m| m.iter().position(|&r| r == root_rank))
                .unwrap_or(0);
            match &group {
                None => group = Some(g),
                Some(first) if first.same_as(&g) => {}
                Some(_) => continue,
            }
            shards.push((pos, s.retagged(pos).reshape(&[1])?));
        }
        let Some(group) = group else {
            return Err(Error::invalid(
                OP,
                "give the loss of every replica this process drives",
            ));
        };
        if shards.len() != group.ranks().len() {
            return Err(Error::invalid(
                OP,
                "give the loss of every replica this process drives, one per rank of the axis",
            ));
        }
        shards.sort_by_key(|s| s.0);
        let shards = shards.into_iter().map(|s| s.1).collect();
        let sum = DTensor::from_shards(&group, shards, &[1], Placement::Partial(ReduceOp::Sum))?;
        Ok(sum.redistribute(Placement::Replicate)?.to_host()?[0] / self.size as f32)
    }
}
