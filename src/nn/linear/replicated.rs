//! [`ReplicatedLinear`]: `y = x Wᵀ + b` with `W` `[out, in]` and `b` whole
//! on every rank (`Replicate`), for a projection every rank needs all of
//! (grouped-query attention's key and value projections hold only each
//! rank's heads: [`KvHeadLinear`](super::KvHeadLinear)). Forward
//! communicates nothing. When
//! each rank uses its output for its own share of the work (its own query
//! heads), the gradient arriving is a partial sum and so are `dx`, `dW`
//! and `db` ([`DTensor::linear`]'s VJP): the parameters' are reduced once,
//! at the parameters, so every replica gets the same whole gradient.

use super::shared::{Weights, shard_master};
use crate::device::Mesh;
use crate::error::{Error, Result};
use crate::nn::Params;
use crate::nn::init::{Init, InitRng};
use crate::nn::parameter::Parameter;
use crate::tensor::{DTensor, MatmulOptions, Placement};

/// Settings of a [`ReplicatedLinear`].
#[derive(Clone, Debug)]
pub struct ReplicatedLinearConfig {
    /// Input features.
    pub in_features: usize,
    /// Output features.
    pub out_features: usize,
    /// Whether the layer has a bias.
    pub bias: bool,
    /// Weight initialiser (the bias starts at zero).
    pub init: Init,
}

impl ReplicatedLinearConfig {
    /// Defaults: bias on, N(0, 0.02²).
    pub fn new(in_features: usize, out_features: usize) -> Self {
        ReplicatedLinearConfig {
            in_features,
            out_features,
            bias: true,
            init: Init::default(),
        }
    }
}

/// `Y = X Wᵀ + b` with `W` and `b` replicated.
#[derive(Clone, Debug, Params)]
pub struct ReplicatedLinear {
    /// `[out, in]`, `Replicate`.
    pub weight: Parameter,
    /// `[out]`, `Replicate`.
    pub bias: Option<Parameter>,
    #[params(skip)]
    config: ReplicatedLinearConfig,
}

impl ReplicatedLinear {
    /// A layer initialised from `rng`, the weight drawn on every device
    /// (`Init::parameter`); the bias starts at zero.
    pub fn new(mesh: &Mesh, config: ReplicatedLinearConfig, rng: &mut InitRng) -> Result<Self> {
        let init = config.init;
        Self::build(mesh, config, Weights::Random(init, rng))
    }

    /// A layer holding the given weight `[out, in]` and bias `[out]`.
    pub fn from_master(
        mesh: &Mesh,
        config: ReplicatedLinearConfig,
        weight: &[f32],
        bias: Option<&[f32]>,
    ) -> Result<Self> {
        Self::build(mesh, config, Weights::Master(weight, bias))
    }

    fn build(mesh: &Mesh, config: ReplicatedLinearConfig, weights: Weights<'_>) -> Result<Self> {
        const OP: &str = "ReplicatedLinear::new";
        let (weight, bias) = shard_master(
            OP,
            mesh,
            [config.out_features, config.in_features],
            (weights, config.bias),
            (Placement::Replicate, Placement::Replicate),
            (1, 1),
        )?;
        Ok(ReplicatedLinear {
            weight,
            bias,
            config,
        })
    }

    /// The settings.
    pub fn config(&self) -> &ReplicatedLinearConfig {
        &self.config
    }

    /// `x` `[tokens, in]` (`Replicate`) → `[tokens, out]` (`Replicate`),
    /// in x's dtype. Recorded on the tape.
    pub fn forward(&self, x: &DTensor) -> Result<DTensor> {
        const OP: &str = "ReplicatedLinear::forward";
        if x.shape().len() != 2 || x.shape()[1] != self.config.in_features {
            let want = format!("[tokens, {}]", self.config.in_features);
            return Err(Error::shape(OP, want, x.shape()));
        }
        let w = self.weight.operand_for(x.dtype())?;
        let bias = self.bias.as_ref().map(|b| &b.value);
        x.linear(&w, bias, MatmulOptions::default())
    }
}
