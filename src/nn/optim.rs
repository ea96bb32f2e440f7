//! Optimisers over sharded parameters: each rank updates its own shard in
//! place with the same rule, so a sharded model steps exactly like the serial
//! one. Gradients accumulate across `backward` calls until
//! [`Params::zero_grad`]; state is kept per parameter identity
//! ([`Parameter::id`]), so one optimiser steps any set of parameters (a
//! model, several models, `vec![&mut a, &mut b]`), even ones whose names repeat.
//!
//! State (momentum, moments) is created at a parameter's first step in
//! buffers of its own, not taken from the device pool's free list: the first
//! step's temporaries stay pooled, so every later step allocates nothing.

use std::collections::HashMap;

use super::Params;
use super::parameter::{ParamId, Parameter};
use crate::element::DType;
use crate::error::{Error, Result};
use crate::kernels::optim::{AdamWStep, SgdStep};
use crate::tensor::DTensor;

/// Stochastic gradient descent with optional momentum and L2 weight decay
/// (PyTorch's `torch.optim.SGD` rule, dampening 0, no Nesterov).
#[derive(Debug)]
pub struct Sgd {
    /// Learning rate.
    pub lr: f32,
    /// Momentum μ.
    pub momentum: f32,
    /// Weight decay.
    pub weight_decay: f32,
    /// Momentum buffers, placed like their parameters.
    buffers: HashMap<ParamId, DTensor>,
    /// Two 1-element tensors per rank for the state slots SGD leaves unused.
    spares: Option<(DTensor, DTensor)>,
}

impl Sgd {
    /// Plain SGD.
    pub fn new(lr: f32) -> Self {
        Sgd {
            lr,
            momentum: 0.0,
            weight_decay: 0.0,
            buffers: HashMap::new(),
            spares: None,
        }
    }

    /// With momentum μ.
    pub fn with_momentum(mut self, momentum: f32) -> Self {
        self.momentum = momentum;
        self
    }

    /// With weight decay.
    pub fn with_weight_decay(mut self, wd: f32) -> Self {
        self.weight_decay = wd;
        self
    }

    /// Update every parameter of `model` that has a gradient (any
    /// [`Params`]: a model, a layer, `vec![&mut a, &mut b]`).
    pub fn step(&mut self, model: &mut dyn Params) -> Result<()> {
        let mut params = model.named_parameters_mut();
        // Every check before the first update, so a refused step changes nothing.
        for (name, p) in &params {
            check_trainable("Sgd::step", name, p)?;
            if let Some(b) = self.buffers.get(&p.id()) {
                check_state("Sgd::step", name, b, p)?;
            }
        }
        for (_, p) in &mut params {
            self.step_one(p)?;
        }
        Ok(())
    }

    fn step_one(&mut self, p: &mut Parameter) -> Result<()> {
        let Some(grad) = p.grad() else {
            return Ok(());
        };
        let id = p.id();
        p.own_buffers()?;
        let first = !self.buffers.contains_key(&id);
        let spares = match self.spares.take() {
            Some(spares) => spares,
            // Kept for the optimiser's life: taken during a step they would
            // come from the pool's free list and cost the next step new buffers.
            None => p.value.spare_slots()?,
        };
        let spares = &*self.spares.insert(spares);
        if self.momentum != 0.0 && first {
            self.buffers.insert(id, p.value.zeros_persistent_like()?);
        }
        p.value.sgd_update(
            &grad,
            self.buffers.get(&id),
            spares,
            SgdStep {
                lr: self.lr,
                momentum: self.momentum,
                weight_decay: self.weight_decay,
                first_step: first,
            },
        )
    }
}

/// AdamW (Loshchilov & Hutter): decoupled weight decay, bias-corrected moments.
#[derive(Debug)]
pub struct AdamW {
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
    /// Step count and moments m, v (placed like their parameters).
    pub(super) state: HashMap<ParamId, (u32, DTensor, DTensor)>,
}

impl AdamW {
    /// PyTorch's defaults: β = (0.9, 0.999), ε = 1e-8, weight decay 0.01.
    pub fn new(lr: f32) -> Self {
        AdamW {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
            state: HashMap::new(),
        }
    }

    /// Set the weight decay.
    pub fn with_weight_decay(mut self, wd: f32) -> Self {
        self.weight_decay = wd;
        self
    }

    /// Update every parameter of `model` that has a gradient (any
    /// [`Params`]: a model, a layer, `vec![&mut a, &mut b]`).
    pub fn step(&mut self, model: &mut dyn Params) -> Result<()> {
        let params = model.named_parameters_mut();
        // Every check before the first update, so a refused step changes nothing.
        for (name, p) in &params {
            check_trainable("AdamW::step", name, p)?;
            if let Some((_, m, _)) = self.state.get(&p.id()) {
                check_state("AdamW::step", name, m, p)?;
            }
        }
        for (_, p) in params {
            let Some(grad) = p.grad() else { continue };
            let id = p.id();
            p.own_buffers()?;
            if let std::collections::hash_map::Entry::Vacant(slot) = self.state.entry(id) {
                let m = p.value.zeros_persistent_like()?;
                slot.insert((0, m, p.value.zeros_persistent_like()?));
            }
            let (step, m, v) = self.state.get_mut(&id).expect("inserted above");
            *step += 1;
            p.value.adamw_update(
                &grad,
                m,
                v,
                AdamWStep {
                    lr: self.lr,
                    beta1: self.beta1,
                    beta2: self.beta2,
                    eps: self.eps,
                    weight_decay: self.weight_decay,
                    step: *step,
                },
            )?;
        }
        Ok(())
    }
}

/// Refuse to update a parameter kept in bf16 or f16 (a model loaded for
/// generation): the update kernels keep f32 values.
pub(super) fn check_trainable(op: &'static str, name: &str, p: &Parameter) -> Result<()> {
    let dtype = p.value.dtype();
    if dtype == DType::F32 || p.grad().is_none() {
        return Ok(());
    }
    Err(Error::invalid(
        op,
        format!(
            "{name:?} is kept in {dtype} (weights for generation); optimisers update f32 values: \
             load the model with f32 weights, or call Parameter::store_as(DType::F32) first"
        ),
    ))
}

/// Refuse state whose shards no longer match the parameter (its `value` was
/// replaced by a tensor of another shape or on other ranks).
fn check_state(op: &'static str, name: &str, state: &DTensor, p: &Parameter) -> Result<()> {
    let same = p.value.same_shards(state);
    if same {
        return Ok(());
    }
    Err(Error::invalid(
        op,
        format!(
            "optimiser state for {name:?} was made for other shards than the parameter {:?} now has (was its value replaced by one of another shape or mesh?); use a new optimiser for it",
            p.shape()
        ),
    ))
}
