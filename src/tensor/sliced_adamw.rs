//! AdamW over replicas with its moments and its update sliced over their
//! axis (ZeRO stage 1's step): each shard of n values at a place
//! ([`Places`]) is cut into the axis's uneven split (the first n % dp ranks
//! one more); the rank at index q along the axis keeps the moments of slice
//! q only, updates that slice of the weight with the AdamW kernel, and an
//! all-gather over the axis gives every replica the whole updated shard.
//! The kernel does per element what unsharded AdamW does, on the same
//! inputs, so the weights are the same bits; the moments take 1/dp of the
//! memory.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

use super::replicas::{Places, Replicas};
use crate::device::{LocalTensor, Mesh, copy_region};
use crate::element::DType;
use crate::error::{Error, Result};
use crate::kernels::optim::{AdamWStep, adamw_step};
use crate::shard::split_range;
use crate::tensor::{DTensor, Placement};

/// A rank's slice of one shard: step count and moments m, v.
struct Slice {
    step: u32,
    m: LocalTensor,
    v: LocalTensor,
    /// The root rank holding it (for [`SlicedAdamW::state_bytes`]).
    root_rank: usize,
}

/// The moments of every slice, keyed by the weight's key (`K`, one per
/// tensor of each replica) and its shard.
pub(crate) struct SlicedAdamW<K> {
    state: HashMap<(K, usize), Slice>,
}

impl<K: Copy + Eq + Hash> Default for SlicedAdamW<K> {
    fn default() -> Self {
        SlicedAdamW {
            state: HashMap::new(),
        }
    }
}

impl<K: Copy + Eq + Hash> SlicedAdamW<K> {
    /// Bytes of state each rank holds, by root rank.
    pub(crate) fn state_bytes(&self) -> BTreeMap<usize, u64> {
        let mut out = BTreeMap::new();
        for s in self.state.values() {
            *out.entry(s.root_rank).or_default() += s.m.byte_len() + s.v.byte_len();
        }
        out
    }

    /// Refuse, naming the item (`names[item]`), state made for slices of
    /// another size than `places`' (a replaced weight). `keys[item][replica]`.
    pub(crate) fn check(
        &self,
        op: &'static str,
        replicas: &Replicas,
        places: &Places,
        (keys, names): (&[Vec<K>], &[&str]),
    ) -> Result<()> {
        for e in &places.entries {
            let want = split_range(e.tensor.len(), replicas.size(), e.pos).len();
            let key = (keys[e.item][e.replica], e.shard);
            if let Some(s) = self.state.get(&key).filter(|s| s.m.len() != want) {
                return Err(Error::invalid(
                    op,
                    format!(
                        "optimiser state for {:?} holds {} values, its slice now {want} (was the parameter replaced?); use a new ZeroAdamW",
                        names[e.item],
                        s.m.len()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// One step in place of `weights` (`[item][replica]`, f32, shaped and
    /// placed as `places`' gradients) from those gradients, keyed by
    /// `keys[item][replica]`; `step.step` is each slice's own count.
    pub(crate) fn step(
        &mut self,
        op: &'static str,
        replicas: &Replicas,
        places: &Places,
        (weights, keys): (&[Vec<DTensor>], &[Vec<K>]),
        step: AdamWStep,
    ) -> Result<()> {
        let dp = replicas.size();
        for (g, group) in places.groups.iter().enumerate() {
            for i in places.items_of(g) {
                let mut members: Vec<_> = (places.entries.iter())
                    .filter(|e| e.group == g && e.item == i)
                    .collect();
                members.sort_by_key(|e| e.pos);
                let n = members[0].tensor.len();
                let mut slices = Vec::with_capacity(members.len());
                for e in &members {
                    let at = group.ranks().iter().position(|r| r.index() == e.pos);
                    let r = &group.ranks()[at.unwrap_or(0)];
                    let range = split_range(n, dp, e.pos);
                    let w = weights[i][e.replica].shards()[e.shard].retagged(e.pos);
                    let w_s = r.alloc(op, &[range.len()], DType::F32)?;
                    let g_s = r.alloc(op, &[range.len()], DType::F32)?;
                    copy_region(&w, range.start, &w_s, 0, range.len())?;
                    copy_region(&e.tensor.retagged(e.pos), range.start, &g_s, 0, range.len())?;
                    let s = match self.state.entry((keys[i][e.replica], e.shard)) {
                        Entry::Occupied(o) => o.into_mut(),
                        Entry::Vacant(v) => v.insert(Slice {
                            step: 0,
                            m: r.zeros_persistent(&[range.len()], DType::F32)?,
                            v: r.zeros_persistent(&[range.len()], DType::F32)?,
                            root_rank: group.root_rank(e.pos)?,
                        }),
                    };
                    s.step += 1;
                    if !range.is_empty() {
                        let step = AdamWStep {
                            step: s.step,
                            ..step
                        };
                        adamw_step(&w_s, &g_s, &s.m, &s.v, step)?;
                    }
                    slices.push(w_s);
                }
                let whole = gather(group, slices, n)?;
                for (e, full) in members.iter().zip(whole.shards()) {
                    let w = weights[i][e.replica].shards()[e.shard].retagged(e.pos);
                    copy_region(full, 0, &w, 0, n)?;
                }
            }
        }
        Ok(())
    }
}

/// The updated slices of one shard (`n` values), all-gathered over the
/// axis's group.
fn gather(group: &Mesh, slices: Vec<LocalTensor>, n: usize) -> Result<DTensor> {
    DTensor::from_shards(group, slices, &[n], Placement::Shard(0))?
        .redistribute(Placement::Replicate)
}
