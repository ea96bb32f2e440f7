//! [`Dropout`]: inverted dropout whose mask depends on the logical tensor,
//! not on its sharding.
//!
//! In training mode `y = x·m/(1 − p)` and `dx = dy·m/(1 − p)` with a mask
//! `m ∈ {0, 1}` drawn per logical element by the counter-based kernel
//! [`kernels::dropout`](crate::kernels::dropout::dropout) from
//! `(seed, step, layer id, global element index)`. A `Shard(d)` rank
//! computes each element's global index from its shard's offset, so P = 1, 3
//! and 4 give bit-identical masks, and replicated (or partial) tensors get the
//! same mask on every rank. Backward regenerates the mask from the key the
//! forward used. Nothing is communicated.
//!
//! The step is the caller's: forward uses the current [`Dropout::step`] and
//! does not change it; call [`Dropout::advance_step`] (or
//! [`Dropout::set_step`]) once per training step, or two forwards of one step
//! draw the same mask. `p = 0` and evaluation mode are the identity (the
//! input is returned as is, no kernel runs); `p = 1` gives zeros (and zero
//! gradients), as PyTorch does.

use super::Params;
use crate::device::LocalTensor;
use crate::element::DType;
use crate::error::{Error, Result};
use crate::kernels::dropout::{PhiloxKey, ShardWindow, dropout};
use crate::shard::split_range_in_units;
use crate::tensor::{DTensor, Placement, local_shape_in_units};

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

/// What the last forward did, so backward applies the same map.
#[derive(Clone, Debug)]
enum Saved {
    /// Evaluation mode or `p = 0`.
    Identity {
        shape: Vec<usize>,
        placement: Placement,
    },
    /// `p = 1`.
    Zeros {
        shape: Vec<usize>,
        placement: Placement,
    },
    /// The mask of this key.
    Masked {
        key: PhiloxKey,
        shape: Vec<usize>,
        placement: Placement,
    },
}

/// Inverted dropout keyed on the logical element index.
#[derive(Debug, Params)]
pub struct Dropout {
    #[params(skip)]
    config: DropoutConfig,
    #[params(skip)]
    step: u64,
    #[params(skip)]
    training: bool,
    #[params(skip)]
    saved: Option<Saved>,
}

/// Apply the mask of `key` to every shard of `x`, each at its logical offset.
fn masked(x: &DTensor, p: f32, key: PhiloxKey) -> Result<DTensor> {
    let size = x.mesh().size();
    let shards = x
        .shards()
        .iter()
        .enumerate()
        .map(|(r, s)| {
            let window = match x.placement() {
                Placement::Shard(d) => Some(ShardWindow {
                    dim: d,
                    start: split_range_in_units(x.shape()[d], size, r, x.shard_unit()).start,
                    total: x.shape()[d],
                }),
                // Replicate and Partial shards are full-shape: the mask
                // applies alike to every term of a partial sum.
                _ => None,
            };
            dropout(s, p, key, window)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(x.with_shards(shards, x.shape().to_vec(), x.placement()))
}

fn zeros_like(x: &DTensor) -> Result<DTensor> {
    let p = x.mesh().size();
    let shards = x
        .mesh()
        .ranks()
        .iter()
        .map(|r| {
            r.zeros(
                &local_shape_in_units(x.shape(), x.placement(), p, r.index(), x.shard_unit()),
                x.dtype(),
            )
        })
        .collect::<Result<Vec<LocalTensor>>>()?;
    DTensor::from_shards_in_units(x.mesh(), shards, x.shape(), x.placement(), x.shard_unit())
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
            saved: None,
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

    /// Whether the layer is in training mode.
    pub fn is_training(&self) -> bool {
        self.training
    }

    /// `x` (f32 or f16, any placement) → `x·m/(1 − p)`, placed like `x`, in
    /// x's dtype (f16 is masked and scaled in f32, then rounded).
    pub fn forward(&mut self, x: &DTensor) -> Result<DTensor> {
        const OP: &str = "Dropout::forward";
        if x.dtype() == DType::I32 {
            return Err(Error::DTypeMismatch {
                op: OP,
                expected: DType::F32,
                got: x.dtype(),
            });
        }
        let (shape, placement) = (x.shape().to_vec(), x.placement());
        let p = self.config.p;
        let (y, saved) = if !self.training || p == 0.0 {
            (x.clone(), Saved::Identity { shape, placement })
        } else if p == 1.0 {
            (zeros_like(x)?, Saved::Zeros { shape, placement })
        } else {
            let key = PhiloxKey {
                seed: self.config.seed,
                step: self.step,
                layer: self.config.layer,
            };
            let y = masked(&x.cast(DType::F32)?, p, key)?.cast(x.dtype())?;
            let saved = Saved::Masked {
                key,
                shape,
                placement,
            };
            (y, saved)
        };
        self.saved = Some(saved);
        Ok(y)
    }

    /// `dy` (f32 or f16, placed and shaped like the forward's output; any
    /// placement on one rank) → `dy·m/(1 − p)` with the forward's mask, in
    /// dy's dtype.
    pub fn backward(&mut self, dy: &DTensor) -> Result<DTensor> {
        const OP: &str = "Dropout::backward";
        let saved = self
            .saved
            .take()
            .ok_or_else(|| Error::invalid(OP, "call forward before backward"))?;
        let (Saved::Identity { shape, placement }
        | Saved::Zeros { shape, placement }
        | Saved::Masked {
            shape, placement, ..
        }) = &saved;
        if dy.shape() != shape.as_slice()
            || (dy.placement() != *placement && dy.mesh().size() > 1)
            || dy.dtype() == DType::I32
        {
            let err = Error::invalid(
                OP,
                format!(
                    "dy must be float {shape:?} placed {placement:?} like the output, got {:?} {:?} {:?}",
                    dy.dtype(),
                    dy.shape(),
                    dy.placement()
                ),
            );
            self.saved = Some(saved);
            return Err(err);
        }
        match saved {
            Saved::Identity { .. } => Ok(dy.clone()),
            Saved::Zeros { .. } => zeros_like(dy),
            Saved::Masked { key, .. } => {
                masked(&dy.cast(DType::F32)?, self.config.p, key)?.cast(dy.dtype())
            }
        }
    }
}
