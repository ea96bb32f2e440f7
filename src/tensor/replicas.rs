//! Tensors at the same place in every replica of a model laid out along
//! one axis of a mesh (data parallelism): each replica lives on its own
//! group of the other axes, so the shards at one place (same tensor, same
//! rank within the replica) of every replica form a group along the axis.
//! [`Replicas::places`] finds each shard's group and index in it;
//! [`Replicas::mean`] sums them over the axis and divides by its size,
//! packed into buckets (one all-reduce per bucket per group, in the order
//! given), so the result never depends on timing and every replica ends
//! with the same bytes; [`Replicas::mean_of_values`] averages one value per
//! replica (a loss). The ZeRO update over the same places is
//! `sliced_adamw.rs`.

use crate::device::{LocalTensor, Mesh, copy_region};
use crate::element::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::tensor::{DTensor, Placement};

/// The replicas of a model along `axis` of `root` (a mesh with named axes).
#[derive(Clone, Debug)]
pub(crate) struct Replicas {
    root: Mesh,
    axis: String,
    size: usize,
    /// The axis's groups this process drives, held so that each stays one
    /// mesh (and keeps its communication counts) between steps.
    _groups: Vec<Mesh>,
}

/// One shard at a place: tensor `item` of replica `replica`, its shard
/// `shard`, in the axis's group `group` at index `pos`.
pub(crate) struct Entry {
    pub(crate) replica: usize,
    pub(crate) item: usize,
    pub(crate) shard: usize,
    pub(crate) group: usize,
    pub(crate) pos: usize,
    pub(crate) tensor: LocalTensor,
}

/// Every shard of some tensors with its place ([`Replicas::places`]).
pub(crate) struct Places {
    pub(crate) entries: Vec<Entry>,
    pub(crate) groups: Vec<Mesh>,
    /// The tensors, `[item][replica]`.
    tensors: Vec<Vec<DTensor>>,
}

impl Places {
    /// The items of group `g`, in the order given (each once).
    pub(crate) fn items_of(&self, g: usize) -> Vec<usize> {
        let mut items: Vec<usize> = (self.entries.iter())
            .filter(|e| e.group == g)
            .map(|e| e.item)
            .collect();
        items.dedup();
        items
    }
}

impl Replicas {
    /// The replicas along axis `axis` of `mesh` (or of the mesh `mesh` was
    /// taken from).
    pub(crate) fn new(mesh: &Mesh, axis: &str) -> Result<Replicas> {
        let root = mesh.root();
        let size = root.axis_size(axis)?;
        Ok(Replicas {
            _groups: root.axis_groups(axis)?,
            root,
            axis: axis.to_string(),
            size,
        })
    }

    /// The number of replicas (the axis's size).
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// The axis's name.
    pub(crate) fn axis(&self) -> &str {
        &self.axis
    }

    /// The axis's group holding root rank `root_rank`, and the rank's index in it.
    fn group_of(&self, root_rank: usize) -> Result<(Mesh, usize)> {
        let group = self.root.group_of(&[self.axis.as_str()], root_rank)?;
        let pos = (group.members())
            .and_then(|m| m.iter().position(|&r| r == root_rank))
            .unwrap_or(0);
        Ok((group, pos))
    }

    /// Every shard of `items` (each `(name, one f32 tensor per replica this
    /// process drives)`, names for messages) with its group along the axis
    /// and index in it, and the groups. Refuses, naming the item, tensors
    /// that are not f32, live on a mesh spanning the axis or not taken from
    /// the root, or whose groups this process does not give one shard each.
    pub(crate) fn places(
        &self,
        op: &'static str,
        items: &[(String, Vec<DTensor>)],
    ) -> Result<Places> {
        let mut groups: Vec<Mesh> = Vec::new();
        let mut entries = Vec::new();
        for (i, (name, per_replica)) in items.iter().enumerate() {
            for (k, t) in per_replica.iter().enumerate() {
                if t.dtype() != DType::F32 {
                    return Err(Error::invalid(
                        op,
                        format!(
                            "{name:?}'s gradient is {}; averaging needs f32 gradients",
                            t.dtype()
                        ),
                    ));
                }
                let m = t.mesh();
                if m.axes().iter().any(|(a, _)| *a == self.axis) {
                    return Err(Error::invalid(
                        op,
                        format!(
                            "{name:?} lives on a mesh that spans the {:?} axis itself: build each replica on one of Mesh::axis_groups(\"tp\") (a group without {:?})",
                            self.axis, self.axis
                        ),
                    ));
                }
                if !m.root().same_as(&self.root) {
                    return Err(Error::invalid(
                        op,
                        format!(
                            "{name:?} lives on a mesh not taken from the one given to DataParallel::new; build each replica on one of its Mesh::axis_groups"
                        ),
                    ));
                }
                for (j, s) in t.shards().iter().enumerate() {
                    let (group, pos) = self.group_of(m.root_rank(s.rank_index())?)?;
                    let g = match groups.iter().position(|x| x.same_as(&group)) {
                        Some(g) => g,
                        None => {
                            groups.push(group);
                            groups.len() - 1
                        }
                    };
                    entries.push(Entry {
                        replica: k,
                        item: i,
                        shard: j,
                        group: g,
                        pos,
                        tensor: s.clone(),
                    });
                }
            }
        }
        let places = Places {
            entries,
            groups,
            tensors: items.iter().map(|(_, t)| t.clone()).collect(),
        };
        // Each group's ranks in this process give one shard of each item, alike.
        for (g, group) in places.groups.iter().enumerate() {
            let local = group.ranks().len();
            for i in places.items_of(g) {
                let of: Vec<&Entry> = (places.entries.iter())
                    .filter(|e| e.group == g && e.item == i)
                    .collect();
                let mut pos: Vec<usize> = of.iter().map(|e| e.pos).collect();
                pos.sort_unstable();
                pos.dedup();
                if of.len() != local
                    || pos.len() != local
                    || of.iter().any(|e| e.tensor.shape() != of[0].tensor.shape())
                {
                    return Err(Error::invalid(
                        op,
                        format!(
                            "{:?}: this process has {local} ranks of a {:?} group but {} replicas' shards for it; pass every replica this process drives, one per rank of the axis",
                            items[i].0,
                            self.axis,
                            of.len()
                        ),
                    ));
                }
            }
        }
        Ok(places)
    }

    /// Every tensor of `places` averaged over the axis, `[item][replica]`,
    /// placed as given: buckets of at most `bucket_bytes` per rank (at
    /// least one item each; capped by the device's binding size), each
    /// all-reduced over its group in the replicas' order along the axis.
    pub(crate) fn mean(&self, places: &Places, bucket_bytes: u64) -> Result<Vec<Vec<DTensor>>> {
        let entries = &places.entries;
        let mut out: Vec<Option<LocalTensor>> = vec![None; entries.len()];
        for (g, group) in places.groups.iter().enumerate() {
            let mine: Vec<usize> = (0..entries.len())
                .filter(|&e| entries[e].group == g)
                .collect();
            for bucket in buckets(entries, &mine, group, bucket_bytes) {
                for (e, t) in self.reduce_bucket(entries, &bucket, group)? {
                    out[e] = Some(t);
                }
            }
        }
        // Each tensor from its averaged shards, on its own ranks.
        (places.tensors.iter().enumerate())
            .map(|(i, per_replica)| {
                (per_replica.iter().enumerate())
                    .map(|(k, t)| {
                        let shards = (entries.iter().zip(&out))
                            .filter(|(e, _)| e.replica == k && e.item == i)
                            .map(|(e, avg)| {
                                let avg = avg.as_ref().ok_or_else(|| {
                                    Error::invalid(
                                        "Replicas::mean",
                                        "internal: a shard was not averaged (please report this)",
                                    )
                                })?;
                                Ok(avg.retagged(t.shards()[e.shard].rank_index()))
                            })
                            .collect::<Result<Vec<_>>>()?;
                        Ok(t.with_shards(shards, t.shape().to_vec(), t.placement()))
                    })
                    .collect()
            })
            .collect()
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
        let per_rank: Vec<Vec<usize>> = (ranks.iter())
            .map(|r| {
                (bucket.iter().copied())
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

    /// The mean over all replicas of a one-value tensor each local replica
    /// holds (its loss, replicated over its group): one all-reduce over the
    /// axis, the same value on every process.
    pub(crate) fn mean_of_values(&self, op: &'static str, values: &[DTensor]) -> Result<f32> {
        let mut group: Option<Mesh> = None;
        let mut shards: Vec<(usize, LocalTensor)> = Vec::new();
        for v in values {
            if v.shape().iter().product::<usize>() != 1
                || v.dtype() != DType::F32
                || v.placement() != Placement::Replicate
            {
                return Err(Error::invalid(
                    op,
                    format!(
                        "takes one replicated f32 value per replica (a loss), got {:?} placed {:?}",
                        v.shape(),
                        v.placement()
                    ),
                ));
            }
            // Each replica's first rank here: its value's copy on that rank.
            let s = &v.shards()[0];
            let (g, pos) = self.group_of(v.mesh().root_rank(s.rank_index())?)?;
            match &group {
                None => group = Some(g),
                Some(first) if first.same_as(&g) => {}
                Some(_) => continue,
            }
            shards.push((pos, s.retagged(pos).reshape(&[1])?));
        }
        let Some(group) = group else {
            return Err(Error::invalid(
                op,
                "give the loss of every replica this process drives",
            ));
        };
        if shards.len() != group.ranks().len() {
            return Err(Error::invalid(
                op,
                "give the loss of every replica this process drives, one per rank of the axis",
            ));
        }
        shards.sort_by_key(|s| s.0);
        let shards = shards.into_iter().map(|s| s.1).collect();
        let sum = DTensor::from_shards(&group, shards, &[1], Placement::Partial(ReduceOp::Sum))?;
        Ok(sum.redistribute(Placement::Replicate)?.to_host()?[0] / self.size as f32)
    }
}

/// Split one group's entries `mine` (by item, in order) into buckets of at
/// most `bucket_bytes` per rank (capped by the device's binding size);
/// each bucket lists entry indices.
fn buckets(entries: &[Entry], mine: &[usize], group: &Mesh, bucket_bytes: u64) -> Vec<Vec<usize>> {
    let cap = (group.ranks().first()).map_or(u64::MAX, |r| r.device().block_limit().0);
    let cap = bucket_bytes.min(cap);
    let mut out: Vec<Vec<usize>> = Vec::new();
    let (mut bytes, mut last_item) = (0u64, None);
    let mut current: Vec<usize> = Vec::new();
    for &e in mine {
        let b = entries[e].tensor.byte_len();
        if last_item != Some(entries[e].item) {
            if !current.is_empty() && bytes + b > cap {
                out.push(std::mem::take(&mut current));
                bytes = 0;
            }
            bytes += b;
            last_item = Some(entries[e].item);
        }
        current.push(e);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}
