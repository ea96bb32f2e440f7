//! [`ZeroAdamW`]: AdamW with its moments and its update sharded over a
//! data-parallel axis (ZeRO stage 1).
//!
//! After [`DataParallel::average_gradients`] every replica holds the same
//! gradient. Each parameter shard of n values is cut into the axis's
//! uneven split (the first n % dp ranks one more); the rank at index q
//! along the axis keeps the moments of slice q only, updates that slice of
//! the parameter with the AdamW kernel, and an all-gather over the axis
//! gives every replica the whole updated shard. The kernel does per element
//! what unsharded AdamW does, on the same inputs, so the parameters are the
//! same bits; the moments take 1/dp of the memory.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};

use super::data_parallel::DataParallel;
use super::optim::check_trainable;
use super::{ParamId, Parameter, Params};
use crate::device::{LocalTensor, Mesh, copy_region};
use crate::element::DType;
use crate::error::Result;
use crate::kernels::optim::{AdamWStep, adamw_step};
use crate::shard::split_range;
use crate::tensor::{DTensor, Placement};

const OP: &str = "ZeroAdamW::step";

/// A rank's slice of one parameter shard: step count and moments m, v.
struct Slice {
    step: u32,
    m: LocalTensor,
    v: LocalTensor,
    /// The root rank holding it (for [`ZeroAdamW::state_bytes`]).
    root_rank: usize,
}

/// AdamW whose state and update are sharded over a data-parallel axis (see
/// the module doc). Settings as [`AdamW`](super::AdamW)'s.
pub struct ZeroAdamW {
    /// Learning rate.
    pub lr: f32,
    /// β1.
    pub beta1: f32,
    /// β2.
    pub beta2: f32,
    /// ε.
    pub eps: f32,
    /// Decoupled weight decay.
    pub weight_decay: f32,
    dp: DataParallel,
    state: HashMap<(ParamId, usize), Slice>,
}

impl ZeroAdamW {
    /// PyTorch's AdamW defaults (β = (0.9, 0.999), ε = 1e-8, weight decay
    /// 0.01), sharded over `dp`'s axis.
    pub fn new(dp: &DataParallel, lr: f32) -> ZeroAdamW {
        ZeroAdamW {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
            dp: dp.clone(),
            state: HashMap::new(),
        }
    }

    /// Bytes of optimiser state each rank holds, by root rank.
    pub fn state_bytes(&self) -> BTreeMap<usize, u64> {
        let mut out = BTreeMap::new();
        for s in self.state.values() {
            *out.entry(s.root_rank).or_default() += s.m.byte_len() + s.v.byte_len();
        }
        out
    }

    /// Update every parameter that has a gradient in `replicas` (this
    /// process's replicas, as given to [`DataParallel::average_gradients`],
    /// whose gradients are already averaged). Bad input (half-precision
    /// weights, replicas built differently, state made for other shards) is
    /// refused before anything changes; a failure midway (a lost MPI rank)
    /// leaves the step partly applied: restart from a checkpoint.
    pub fn step(&mut self, replicas: &mut [&mut dyn Params]) -> Result<()> {
        let mut lists: Vec<Vec<(String, &mut Parameter)>> = replicas
            .iter_mut()
            .map(|r| r.named_parameters_mut())
            .collect();
        for list in &lists {
            for (name, p) in list {
                check_trainable(OP, name, p)?;
            }
        }
        let (entries, groups) = self.dp.entries(&lists)?;
        let dp = self.dp.size();
        for e in &entries {
            let p = &lists[e.replica][e.param].1;
            let want = split_range(e.tensor.len(), dp, e.pos).len();
            if let Some(s) = self
                .state
                .get(&(p.id(), e.shard))
                .filter(|s| s.m.len() != want)
            {
                return Err(crate::error::Error::invalid(
                    OP,
                    format!(
                        "optimiser state for {:?} holds {} values, its slice now {want} (was the parameter replaced?); use a new ZeroAdamW",
                        lists[e.replica][e.param].0,
                        s.m.len()
                    ),
                ));
            }
        }
        for e in &entries {
            lists[e.replica][e.param].1.own_buffers()?;
        }
        for (g, group) in groups.iter().enumerate() {
            let mut params: Vec<usize> = entries
                .iter()
                .filter(|e| e.group == g)
                .map(|e| e.param)
                .collect();
            params.dedup();
            for i in params {
                let mut members: Vec<_> = entries
                    .iter()
                    .filter(|e| e.group == g && e.param == i)
                    .collect();
                members.sort_by_key(|e| e.pos);
                let n = members[0].tensor.len();
                let mut slices = Vec::with_capacity(members.len());
                for e in &members {
                    let p = &lists[e.replica][i].1;
                    let r = &group.ranks()[group
                        .ranks()
                        .iter()
                        .position(|r| r.index() == e.pos)
                        .unwrap_or(0)];
                    let range = split_range(n, dp, e.pos);
                    let w = p.value.shards()[e.shard].retagged(e.pos);
                    let w_s = r.alloc(OP, &[range.len()], DType::F32)?;
                    let g_s = r.alloc(OP, &[range.len()], DType::F32)?;
                    copy_region(&w, range.start, &w_s, 0, range.len())?;
                    copy_region(&e.tensor.retagged(e.pos), range.start, &g_s, 0, range.len())?;
                    let key = (p.id(), e.shard);
                    let s = match self.state.entry(key) {
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
                            lr: self.lr,
                            beta1: self.beta1,
                            beta2: self.beta2,
                            eps: self.eps,
                            weight_decay: self.weight_decay,
                            step: s.step,
                        };
                        adamw_step(&w_s, &g_s, &s.m, &s.v, step)?;
                    }
                    slices.push(w_s);
                }
                let whole = gather(group, slices, n)?;
                for (e, full) in members.iter().zip(whole.shards()) {
                    let w = lists[e.replica][i].1.value.shards()[e.shard].retagged(e.pos);
                    copy_region(full, 0, &w, 0, n)?;
                }
            }
        }
        Ok(())
    }
}

/// The updated slices of one parameter shard (`n` values), all-gathered
/// over the axis's group.
fn gather(group: &Mesh, slices: Vec<LocalTensor>, n: usize) -> Result<DTensor> {
    DTensor::from_shards(group, slices, &[n], Placement::Shard(0))?
        .redistribute(Placement::Replicate)
}
