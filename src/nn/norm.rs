//! [`LayerNorm`] and [`RMSNorm`] over the last dimension of `[tokens, dim]`
//! activations, with replicated parameters `weight` (`γ`, ones) and, for
//! LayerNorm, `bias` (`β`, zeros): forward code on
//! [`DTensor::layer_norm`] / [`DTensor::rms_norm`], whose VJPs give the
//! gradients.
//!
//! The input is `Replicate` (every rank normalises the same rows, and every
//! rank computes the same `dγ`, `dβ`: no communication) or, with sequence
//! parallelism, `Shard(0)` (each rank normalises its own tokens). Then each
//! rank's `[dγ; dβ]` is a partial sum over its tokens; backward all-reduces it
//! at once, as one `[2, dim]` tensor (`[1, dim]` without a bias): **one
//! all-reduce per backward**, before anything can reach the optimiser
//! (Megatron's rule), so the replicas stay bit-identical. With one rank
//! nothing is communicated, and any placement is accepted (all hold the same
//! bytes there).
//!
//! An f16 input is normalised in f32 (statistics, `γ`, `β` and gradients are
//! f32) and `y`, `dx` are rounded back to f16 (`dx` comes back in the
//! input's dtype whichever float `dy` is, as for the linear layers).

use super::Params;
use super::parameter::{Parameter, check_master};
use crate::device::Mesh;
use crate::error::{Error, Result};
use crate::kernels::NormKind;
use crate::tensor::{DTensor, Placement};

/// Settings of a [`LayerNorm`] or [`RMSNorm`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NormConfig {
    /// The normalised (last) dimension.
    pub dim: usize,
    /// Added to the variance (mean square) inside the square root; finite, ≥ 0.
    pub eps: f32,
    /// Whether the layer has a bias `β` (LayerNorm only: an [`RMSNorm`] with
    /// `bias = true` is a construction error).
    pub bias: bool,
    /// [`RMSNorm`] only: scale by `offset + γ` rather than `γ` (Gemma's
    /// norms: 1, with γ starting at zero); 0 for a plain norm.
    pub offset: f32,
}

impl NormConfig {
    /// A LayerNorm's defaults (PyTorch's): `eps = 1e-5`, with a bias.
    pub fn new(dim: usize) -> Self {
        NormConfig {
            dim,
            eps: 1e-5,
            bias: true,
            offset: 0.0,
        }
    }

    /// An RMSNorm's defaults: `eps = 1e-5`, no bias.
    pub fn rms(dim: usize) -> Self {
        NormConfig {
            dim,
            eps: 1e-5,
            bias: false,
            offset: 0.0,
        }
    }

    fn check(&self, op: &'static str, kind: NormKind) -> Result<()> {
        if self.dim == 0 {
            return Err(Error::invalid(op, "dim must be at least 1"));
        }
        if !(self.eps.is_finite() && self.eps >= 0.0) {
            return Err(Error::invalid(
                op,
                format!("eps {} must be finite and ≥ 0", self.eps),
            ));
        }
        if kind == NormKind::RmsNorm && self.bias {
            return Err(Error::invalid(op, "RMSNorm has no bias: set bias = false"));
        }
        if !self.offset.is_finite() || (kind == NormKind::LayerNorm && self.offset != 0.0) {
            return Err(Error::invalid(
                op,
                format!(
                    "offset {} must be finite, and 0 for a LayerNorm",
                    self.offset
                ),
            ));
        }
        Ok(())
    }
}

/// Replicated `weight` and optional `bias` from host masters `[dim]`.
fn parameters(
    op: &'static str,
    mesh: &Mesh,
    config: &NormConfig,
    kind: NormKind,
    weight: &[f32],
    bias: Option<&[f32]>,
) -> Result<(Parameter, Option<Parameter>)> {
    config.check(op, kind)?;
    check_master(op, "weight", weight.len(), config.dim)?;
    if bias.is_some() != config.bias {
        return Err(Error::invalid(
            op,
            "give a bias exactly when config.bias is true",
        ));
    }
    let replicated =
        |v: &[f32]| Parameter::from_master(mesh, &[v.len()], v, Placement::Replicate, 1);
    let bias = bias
        .map(|b| {
            check_master(op, "bias", b.len(), config.dim)?;
            replicated(b)
        })
        .transpose()?;
    Ok((replicated(weight)?, bias))
}

/// Layer normalisation: `y = γ ⊙ (x − μ)/√(σ² + ε) + β` over each row.
#[derive(Clone, Debug, Params)]
pub struct LayerNorm {
    /// `γ` `[dim]`, `Replicate`, starts at ones.
    pub weight: Parameter,
    /// `β` `[dim]`, `Replicate`, starts at zeros (`None` without a bias).
    pub bias: Option<Parameter>,
    #[params(skip)]
    config: NormConfig,
}

/// Root-mean-square normalisation: `y = γ ⊙ x/√(Σx²/dim + ε)` over each
/// row (`(offset + γ)` with an offset).
#[derive(Clone, Debug, Params)]
pub struct RMSNorm {
    /// `γ` `[dim]`, `Replicate`, starts at ones (at zeros with an offset).
    pub weight: Parameter,
    #[params(skip)]
    config: NormConfig,
    /// `offset` in every element `[dim]`, where the config has one.
    #[params(skip)]
    offset: Option<DTensor>,
}

impl LayerNorm {
    /// `γ = 1`, `β = 0`.
    pub fn new(mesh: &Mesh, config: NormConfig) -> Result<Self> {
        let b = config.bias.then(|| vec![0.0; config.dim]);
        Self::from_master(mesh, config, &vec![1.0; config.dim], b.as_deref())
    }

    /// A layer holding the given `γ` `[dim]` and `β` `[dim]` (exactly when
    /// `config.bias`).
    pub fn from_master(
        mesh: &Mesh,
        config: NormConfig,
        weight: &[f32],
        bias: Option<&[f32]>,
    ) -> Result<Self> {
        const OP: &str = "LayerNorm::from_master";
        let (weight, bias) = parameters(OP, mesh, &config, NormKind::LayerNorm, weight, bias)?;
        Ok(LayerNorm {
            weight,
            bias,
            config,
        })
    }

    /// The settings.
    pub fn config(&self) -> &NormConfig {
        &self.config
    }

    /// `x` `[tokens, dim]` (`Replicate`, or `Shard(0)` with sequence
    /// parallelism) → `y`, placed like `x`, in x's dtype
    /// ([`DTensor::layer_norm`]). Communicates nothing; on the tape, its
    /// backward gives `dγ`, `dβ` with one all-reduce when `x` is `Shard(0)`
    /// and P > 1.
    pub fn forward(&self, x: &DTensor) -> Result<DTensor> {
        let bias = self.bias.as_ref().map(|b| &b.value);
        x.layer_norm(&self.weight.value, bias, self.config.eps)
    }
}

impl RMSNorm {
    /// `γ = 1` (`γ = 0` with an offset, so the scale starts at one);
    /// `config.bias` must be false.
    pub fn new(mesh: &Mesh, config: NormConfig) -> Result<Self> {
        let start = if config.offset != 0.0 { 0.0 } else { 1.0 };
        Self::from_master(mesh, config, &vec![start; config.dim])
    }

    /// A layer holding the given `γ` `[dim]`.
    pub fn from_master(mesh: &Mesh, config: NormConfig, weight: &[f32]) -> Result<Self> {
        const OP: &str = "RMSNorm::from_master";
        let (weight, _) = parameters(OP, mesh, &config, NormKind::RmsNorm, weight, None)?;
        let offset = (config.offset != 0.0)
            .then(|| {
                let v = vec![config.offset; config.dim];
                DTensor::from_host(mesh, &[config.dim], &v, Placement::Replicate)
            })
            .transpose()?;
        Ok(RMSNorm {
            weight,
            config,
            offset,
        })
    }

    /// The scale rows are multiplied by: `γ`, or `offset + γ` (on the
    /// tape, so `γ`'s gradient is the scale's).
    pub fn scale(&self) -> Result<DTensor> {
        match &self.offset {
            Some(o) => self.weight.value.add(o),
            None => Ok(self.weight.value.clone()),
        }
    }

    /// The settings.
    pub fn config(&self) -> &NormConfig {
        &self.config
    }

    /// `x` `[tokens, dim]` (`Replicate`, or `Shard(0)` with sequence
    /// parallelism) → `y`, placed like `x`, in x's dtype
    /// ([`DTensor::rms_norm`]). Communicates nothing; on the tape, its
    /// backward gives `dγ` with one all-reduce when `x` is `Shard(0)` and
    /// P > 1.
    pub fn forward(&self, x: &DTensor) -> Result<DTensor> {
        match &self.offset {
            Some(_) => x.rms_norm(&self.scale()?, self.config.eps),
            None => x.rms_norm(&self.weight.value, self.config.eps),
        }
    }
}

/// A norm a decoder's residual stream applies before a branch and after
/// the last block ([`Stream`](super::Stream)).
pub trait Normalize: std::fmt::Debug {
    /// The norm of `x` (`forward`).
    fn normalize(&self, x: &DTensor) -> Result<DTensor>;

    /// `(γ, ε)` where this is a plain RMS norm, which the sum before it may
    /// apply in its own pass ([`RowProduct::finish`](crate::tensor::RowProduct::finish)).
    fn rms_gamma(&self) -> Option<(&DTensor, f32)> {
        None
    }
}

impl Normalize for LayerNorm {
    fn normalize(&self, x: &DTensor) -> Result<DTensor> {
        self.forward(x)
    }
}

impl Normalize for RMSNorm {
    fn normalize(&self, x: &DTensor) -> Result<DTensor> {
        self.forward(x)
    }

    fn rms_gamma(&self) -> Option<(&DTensor, f32)> {
        // With an offset the scale is computed per call: the fused sum
        // takes a stored one only.
        match self.offset {
            Some(_) => None,
            None => Some((&self.weight.value, self.config.eps)),
        }
    }
}

/// Either norm, for a layer whose family chooses (a decoder's final norm).
#[derive(Debug)]
pub enum Norm {
    /// [`LayerNorm`] (GPT-2).
    Layer(LayerNorm),
    /// [`RMSNorm`] (the Llama family).
    Rms(RMSNorm),
}

impl Norm {
    /// The norm of `x`.
    pub fn forward(&self, x: &DTensor) -> Result<DTensor> {
        self.normalize(x)
    }
}

impl Normalize for Norm {
    fn normalize(&self, x: &DTensor) -> Result<DTensor> {
        match self {
            Norm::Layer(n) => n.forward(x),
            Norm::Rms(n) => n.forward(x),
        }
    }

    fn rms_gamma(&self) -> Option<(&DTensor, f32)> {
        match self {
            Norm::Layer(_) => None,
            Norm::Rms(n) => n.rms_gamma(),
        }
    }
}

impl Params for Norm {
    fn visit_params<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Parameter)) {
        match self {
            Norm::Layer(n) => n.visit_params(prefix, f),
            Norm::Rms(n) => n.visit_params(prefix, f),
        }
    }

    fn visit_params_mut<'a>(
        &'a mut self,
        prefix: &str,
        f: &mut dyn FnMut(String, &'a mut Parameter),
    ) {
        match self {
            Norm::Layer(n) => n.visit_params_mut(prefix, f),
            Norm::Rms(n) => n.visit_params_mut(prefix, f),
        }
    }
}
