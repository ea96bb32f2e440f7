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

use std::collections::BTreeMap;

use super::data_parallel::DataParallel;
use super::optim::check_trainable;
use super::{ParamId, Parameter, Params};
use crate::error::Result;
use crate::kernels::optim::AdamWStep;
use crate::tensor::DTensor;
use crate::tensor::sliced_adamw::SlicedAdamW;

const OP: &str = "ZeroAdamW::step";

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
    state: SlicedAdamW<ParamId>,
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
            state: SlicedAdamW::default(),
        }
    }

    /// Bytes of optimiser state each rank holds, by root rank.
    pub fn state_bytes(&self) -> BTreeMap<usize, u64> {
        self.state.state_bytes()
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
        let (params, items) = self.dp.gradients(&lists)?;
        let places = (self.dp.replicas()).places("DataParallel::average_gradients", &items)?;
        // Per parameter and replica: its identity (the state's key).
        let keys: Vec<Vec<ParamId>> = (params.iter())
            .map(|&i| lists.iter().map(|l| l[i].1.id()).collect())
            .collect();
        let names: Vec<&str> = items.iter().map(|(n, _)| n.as_str()).collect();
        (self.state).check(OP, self.dp.replicas(), &places, (&keys, &names))?;
        for list in lists.iter_mut() {
            for &i in &params {
                list[i].1.own_buffers()?;
            }
        }
        let weights: Vec<Vec<DTensor>> = (params.iter())
            .map(|&i| lists.iter().map(|l| l[i].1.value.clone()).collect())
            .collect();
        let step = AdamWStep {
            lr: self.lr,
            beta1: self.beta1,
            beta2: self.beta2,
            eps: self.eps,
            weight_decay: self.weight_decay,
            step: 0,
        };
        let state = &mut self.state;
        state.step(OP, self.dp.replicas(), &places, (&weights, &keys), step)
    }
}
