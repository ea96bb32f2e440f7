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
use crate::device::{LocalTensor, Mesh, copy_region};
use crate::element::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::tensor::{DTensor, Placement};

const OP: &str = "DataParallel::average_gradients";

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

/// One gradient shard to average: replica, parameter, shard, and its place
/// (the data-parallel group and the rank's index in it).
pub(super) struct Entry {
    pub(super) replica: usize,
    pub(super) param: usize,
    pub(super) shard: usize,
    pub(super) group: usize,
    pub(super) pos: usize,
    pub(super) tensor: LocalTensor,
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

    /// Every gradient shard with its group and place, and the groups.
    pub(super) fn entries(
        &self,
        lists: &[Vec<(String, &mut Parameter)>],
    ) -> Result<(Vec<Entry>, Vec<Mesh>)> {
        let Some(first) = lists.first() else {
            return Ok((Vec::new(), Vec::new()));
        };
        for list in lists {
            let same = list.len() == first.len()
                && list
                    .iter()
                    .zip(first)
                    .all(|((a, p), (b, q))| a == b && p.value.shape() == q.value.shape());
            if !same {
                return Err(Error::invalid(
                    OP,
                    "the replicas' parameters differ in names or shapes; build every replica alike",
                ));
            }
        }
        let mut groups: Vec<Mesh> = Vec::new();
        let mut entries = Vec::new();
        // Backward makes the last parameters' gradients first.
        for i in (0..first.len()).rev() {
            let with: Vec<bool> = lists.iter().map(|l| l[i].1.grad().is_some()).collect();
            if !with.iter().any(|&w| w) {
                continue;
            }
            if !with.iter().all(|&w| w) {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "{:?} has a gradient in some replicas only; run backward on every replica first",
                        first[i].0
                    ),
                ));
            }
            for (k, list) in lists.iter().enumerate() {
                let grad = list[i].1.grad().unwrap_or_else(|| unreachable!());
                if grad.dtype() != DType::F32 {
                    return Err(Error::invalid(
                        OP,
                        format!(
                            "{:?}'s gradient is {}; averaging needs f32 gradients",
                            first[i].0,
                            grad.dtype()
                        ),
                    ));
                }
                let m = grad.mesh();
                if !m.root().same_as(&self.root) {
                    return Err(Error::invalid(
                        OP,
                        format!(
                            "{:?} lives on a mesh not taken from the one given to DataParallel::new; build each replica on one of its Mesh::axis_groups",
                            first[i].0
                        ),
                    ));
                }
                for (j, s) in grad.shards().iter().enumerate() {
                    let root_rank = m.root_rank(s.rank_index())?;
                    let group = self.root.group_of(&[self.axis.as_str()], root_rank)?;
                    let pos = group
                        .members()
                        .and_then(|ms| ms.iter().position(|&r| r == root_rank))
                        .unwrap_or(0);
                    let g = match groups.iter().position(|x| x.same_as(&group)) {
                        Some(g) => g,
                        None => {
                            groups.push(group);
                            groups.len() - 1
                        }
                    };
                    entries.push(Entry {
                        replica: k,
                        param: i,
                        shard: j,
                        group: g,
                        pos,
                        tensor: s.clone(),
                    });
                }
            }
        }
        // Each group's ranks in this process give one shard of each parameter, alike.
        for (g, group) in groups.iter().enumerate() {
            let local = group.ranks().len();
            let mut params: Vec<usize> = entries
                .iter()
                .filter(|e| e.group == g)
                .map(|e| e.param)
                .collect();
            params.dedup();
            for i in params {
                let of: Vec<&Entry> = entries
                    .iter()
                    .filter(|e| e.group == g && e.param == i)
                    .collect();
                let mut pos: Vec<usize> = of.iter().map(|e| e.pos).collect();
                pos.sort_unstable();
                pos.dedup();
                if of.len() != local
                    || pos.len() != local
                    || of.iter().any(|e| e.tensor.shape() != of[0].tensor.shape())
                {
                    return Err(Error::invalid(
                        OP,
                        format!(
                            "{:?}: this process has {local} ranks of a {:?} group but {} replicas' shards for it; pass every replica this process drives, one per rank of the axis",
                            first[i].0,
                            self.axis,
                            of.len()
                        ),
                    ));
                }
            }
        }
        Ok((entries, groups))
    }

    /// Split one group's entries (by parameter, in order) into buckets of at
    /// most `bucket_bytes` per rank; each bucket lists entry indices.
    fn buckets(&self, entries: &[Entry], mine: &[usize], group: &Mesh) -> Result<Vec<Vec<usize>>> {
        let cap = group
            .ranks()
            .first()
            .map_or(u64::MAX, |r| r.device().block_limit().0);
        let cap = self.bucket_bytes.min(cap);
        let mut out: Vec<Vec<usize>> = Vec::new();
        let (mut bytes, mut last_param) = (0u64, None);
        let mut current: Vec<usize> = Vec::new();
        for &e in mine {
            let b = entries[e].tensor.byte_len();
            if last_param != Some(entries[e].param) {
                if !current.is_empty() && bytes + b > cap {
                    out.push(std::mem::take(&mut current));
                    bytes = 0;
                }
                bytes += b;
                last_param = Some(entries[e].param);
            }
            current.push(e);
        }
        if !current.is_empty() {
            out.push(current);
        }
        Ok(out)
    }

    /// All-reduce one bucket over its group and divide by the axis size;
    /// returns each entry's averaged shard (tagged as the group's rank).
    fn reduce_bucket(
        &self,
        entries: &[Entry],
        bucket: &[usize],
        group: &Mesh,
    ) -> Result<Vec<(usize, LocalTensor)>> {
        let ranks = group.ranks();
        // Per local rank of the group, in rank order: its entries, in bucket order.
        let per_rank: Vec<Vec<usize>> = ranks
            .iter()
            .map(|r| {
                bucket
                    .iter()
                    .copied()
                    .filter(|&e| entries[e].pos == r.index())
                    .collect()
            })
            .collect();
        let mut flats = Vec::with_capacity(ranks.len());
        for (r, mine) in ranks.iter().zip(&per_rank) {
            if let [one] = mine[..] {
                flats.push(entries[one].tensor.retagged(r.index()));
                continue;
            }
            let total: usize = mine.iter().map(|&e| entries[e].tensor.len()).sum();
            let flat = r.alloc("DataParallel bucket", &[total], DType::F32)?;
            let mut at = 0;
            for &e in mine {
                let t = entries[e].tensor.retagged(r.index());
                copy_region(&t, 0, &flat, at, t.len())?;
                at += t.len();
            }
            flats.push(flat);
        }
        let shape = flats[0].shape().to_vec();
        let partial =
            DTensor::from_shards(group, flats, &shape, Placement::Partial(ReduceOp::Sum))?;
        let summed = partial.redistribute(Placement::Replicate)?;
        let avg = summed.scale(1.0 / self.size as f32)?;
        let mut out = Vec::with_capacity(bucket.len());
        for ((r, mine), avg) in ranks.iter().zip(&per_rank).zip(avg.shards()) {
            if let [one] = mine[..] {
                out.push((one, avg.clone()));
                continue;
            }
            let mut at = 0;
            for &e in mine {
                let like = &entries[e].tensor;
                let t = r.alloc("DataParallel bucket", like.shape(), DType::F32)?;
                copy_region(avg, at, &t, 0, like.len())?;
                at += like.len();
                out.push((e, t));
            }
        }
        Ok(out)
    }
}
