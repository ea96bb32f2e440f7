//! [`Dropout`]: inverted dropout whose mask depends on the logical tensor,
//! not on its sharding.
//!
//! In training mode `y = x·m/(1 − p)` and `dx = dy·m/(1 − p)` with a mask
//! `m ∈ {0, 1}` drawn per logical element by the counter-based kernel
//! [`kernels::dropout`](crate::kernels::dropout::dropout) from
//! `(seed, step, layer id, global element index)`. A `Shard(d)` rank
//! computes each element's global index from its shard's offset, so P = 1, 3
//! and 4 give bit-identical masks, and replicated (or partial) tensors get the
//! same mask on every rank. The work is [`DTensor::dropout`], whose VJP on
//! the tape applies the forward's mask to `dy`. Nothing is communicated.
//!
//! The step is the caller's: forward uses the current [`Dropout::step`] and
//! does not change it; call [`Dropout::advance_step`] (or
//! [`Dropout::set_step`]) once per training step, or two forwards of one step
//! draw the same mask. `p = 0` and evaluation mode are the identity (the
//! input is returned as is, no kernel runs); `p = 1` gives zeros (and zero
//! gradients), as PyTorch does.

use super::Params;
use crate::error::{Error, Result};
use crate::kernels::dropout::PhiloxKey;
use crate::tensor::DTensor;

/// Settings of a [`Dropout`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DropoutConfig {
    /// Drop probability, in `[0, 1]`.
    pub p: f32,
    /// The run's seed.
    pub seed: u64,
    /// This layer's id: layers of one model need distinct ids (or seeds) to
    /// draw independent masks.
    pub layer: u32,
}

impl DropoutConfig {
    /// Drop probability `p`, seed 0, layer 0.
    pub fn new(p: f32) -> Self {
        DropoutConfig {
            p,
            seed: 0,
            layer: 0,
        }
    }
}

/// Inverted dropout keyed on the logical element index.
#[derive(Clone, Debug, Params)]
pub struct Dropout {
    #[params(skip)]
    config: DropoutConfig,
    #[params(skip)]
    step: u64,
    #[params(skip)]
    training: bool,
}

impl Dropout {
    /// A layer in training mode at step 0; `p` must lie in `[0, 1]`.
    pub fn new(config: DropoutConfig) -> Result<Self> {
        if !(0.0..=1.0).contains(&config.p) {
            return Err(Error::invalid(
                "Dropout::new",
                format!("p = {} must lie in [0, 1]", config.p),
            ));
        }
        Ok(Dropout {
            config,
            step: 0,
            training: true,
        })
    }

    /// The settings.
    pub fn config(&self) -> &DropoutConfig {
        &self.config
    }

    /// The step the next forward draws its mask for.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// Set the step (e.g. when resuming a run).
    pub fn set_step(&mut self, step: u64) {
        self.step = step;
    }

    /// Move to the next step (wrapping after `u64::MAX`).
    pub fn advance_step(&mut self) {
        self.step = self.step.wrapping_add(1);
    }

    /// Training mode: forward drops elements.
    pub fn train(&mut self) {
        self.training = true;
    }

    /// Evaluation mode: forward is the identity.
    pub fn eval(&mut self) {
        self.training = false;
    }

    /// Training mode (on, masks keyed by `step`) or evaluation (off).
    pub fn set_mode(&mut self, training: bool, step: u64) {
        self.training = training;
        self.set_step(step);
    }

    /// Whether the layer is in training mode.
    pub fn is_training(&self) -> bool {
        self.training
    }

    /// `x` (f32 or f16, any placement) → `x·m/(1 − p)`, placed like `x`, in
    /// x's dtype (f16 is masked and scaled in f32, then rounded), with the
    /// mask of (seed, [`Dropout::step`], layer); `x` itself in evaluation
    /// mode or with `p = 0`. On the tape, backward masks `dy` alike.
    pub fn forward(&self, x: &DTensor) -> Result<DTensor> {
        let p = if self.training { self.config.p } else { 0.0 };
        let key = PhiloxKey {
            seed: self.config.seed,
            step: self.step,
            layer: self.config.layer,
        };
        x.dropout(p, key)
    }
}
