//! The gradient shards [`DataParallel`] averages, grouped by data-parallel
//! group, packed into buckets and all-reduced.

use super::DataParallel;
use crate::device::{LocalTensor, Mesh, copy_region};
use crate::element::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::nn::Parameter;
use crate::tensor::{DTensor, Placement};

const OP: &str = "DataParallel::average_gradients";

/// One gradient shard to average: replica, parameter, shard, and its place
/// (the data-parallel group and the rank's index in it).
pub(in crate::nn) struct Entry {
    pub(in crate::nn) replica: usize,
    pub(in crate::nn) param: usize,
    pub(in crate::nn) shard: usize,
    pub(in crate::nn) group: usize,
    pub(in crate::nn) pos: usize,
    pub(in crate::nn) tensor: LocalTensor,
}

impl DataParallel {
    /// Every gradient shard with its group and place, and the groups.
    pub(in crate::nn) fn entries(
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
                let Some(grad) = list[i].1.grad() else {
                    continue;
                };
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
                if m.axes().iter().any(|(a, _)| *a == self.axis) {
                    return Err(Error::invalid(
                        OP,
                        format!(
                            "{:?} lives on a mesh that spans the {:?} axis itself: build each replica on one of Mesh::axis_groups(\"tp\") (a group without {:?})",
                            first[i].0, self.axis, self.axis
                        ),
                    ));
                }
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
    pub(super) fn buckets(
        &self,
        entries: &[Entry],
        mine: &[usize],
        group: &Mesh,
    ) -> Result<Vec<Vec<usize>>> {
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
    pub(super) fn reduce_bucket(
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
