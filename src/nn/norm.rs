//! [`LayerNorm`] and [`RMSNorm`] over the last dimension of `[tokens, dim]`
//! activations, with replicated parameters `weight` (`γ`, ones) and, for
//! LayerNorm, `bias` (`β`, zeros). The maths is
//! [`kernels::norm`](crate::kernels::norm)'s; this file adds placements and
//! the parameter-gradient rule.
//!
//! The input is `Replicate` (every rank normalises the same rows, and every
//! rank computes the same `dγ`, `dβ`: no communication) or, with sequence
//! parallelism, `Shard(0)` (each rank normalises its own tokens). Then each
//! rank's `[dγ; dβ]` is a partial sum over its tokens; backward all-reduces it
//! at once, as one `Partial(Sum)` tensor `[2, dim]` (`[1, dim]` without a
//! bias) redistributed to `Replicate` through
//! [`Mapping::ReduceFromParallel`]: **one all-reduce per backward call**,
//! before anything can reach the optimiser (Megatron's rule), so the replicas
//! stay bit-identical. With one rank nothing is communicated, and any
//! placement is accepted (all hold the same bytes there).
//!
//! An f16 input is normalised in f32 (statistics, `γ`, `β` and gradients are
//! f32) and `y`, `dx` are rounded back to f16 (`dx` comes back in the
//! input's dtype whichever float `dy` is, as for the linear layers).

use super::Params;
use super::parameter::{Parameter, check_master};
use crate::device::{LocalTensor, Mesh};
use crate::element::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::kernels::{self, NormKind};
use crate::tensor::{DTensor, Mapping, Placement};

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
}

impl NormConfig {
    /// A LayerNorm's defaults (PyTorch's): `eps = 1e-5`, with a bias.
    pub fn new(dim: usize) -> Self {
        NormConfig {
            dim,
            eps: 1e-5,
            bias: true,
        }
    }

    /// An RMSNorm's defaults: `eps = 1e-5`, no bias.
    pub fn rms(dim: usize) -> Self {
        NormConfig {
            dim,
            eps: 1e-5,
            bias: false,
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
        Ok(())
    }
}

/// What backward needs: the input and each rank's `(mean, rstd)` rows.
#[derive(Debug)]
struct Saved {
    /// The input, widened to f32.
    x: DTensor,
    stats: Vec<LocalTensor>,
    /// The input's own dtype: `y` and `dx` come back in it.
    dtype: DType,
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

/// `x` must be f32 or f16 `[tokens, dim]`, `Replicate` or `Shard(0)` (any
/// placement on one rank, where they all hold the same bytes, as for the
/// linear layers).
fn check_input(op: &'static str, x: &DTensor, dim: usize) -> Result<()> {
    if x.shape().len() != 2 || x.shape()[1] != dim {
        return Err(Error::shape(op, format!("[tokens, {dim}]"), x.shape()));
    }
    if x.dtype() == DType::I32 {
        return Err(Error::DTypeMismatch {
            op,
            expected: DType::F32,
            got: x.dtype(),
        });
    }
    match x.placement() {
        _ if x.mesh().size() == 1 => Ok(()),
        Placement::Replicate | Placement::Shard(0) => Ok(()),
        other => Err(Error::invalid(
            op,
            format!("input must be placed Replicate or Shard(0) (tokens), got {other:?}"),
        )),
    }
}

fn forward(
    op: &'static str,
    kind: NormKind,
    config: &NormConfig,
    (weight, bias): (&Parameter, Option<&Parameter>),
    x: &DTensor,
) -> Result<(DTensor, Saved)> {
    check_input(op, x, config.dim)?;
    if !x.mesh().same_as(weight.value.mesh()) {
        return Err(Error::invalid(op, "the input lives on another mesh"));
    }
    let dtype = x.dtype();
    let x = &x.cast(DType::F32)?;
    let mut ys = Vec::with_capacity(x.shards().len());
    let mut stats = Vec::with_capacity(x.shards().len());
    for (r, xr) in x.shards().iter().enumerate() {
        let beta = bias.map(|b| &b.value.shards()[r]);
        let (y, s) = kernels::norm_forward(xr, &weight.value.shards()[r], beta, kind, config.eps)?;
        ys.push(y);
        stats.push(s);
    }
    let y = x.with_shards(ys, x.shape().to_vec(), x.placement());
    Ok((
        y.cast(dtype)?,
        Saved {
            x: x.clone(),
            stats,
            dtype,
        },
    ))
}

fn backward(
    op: &'static str,
    kind: NormKind,
    saved: &mut Option<Saved>,
    (weight, bias): (&mut Parameter, Option<&mut Parameter>),
    dy: &DTensor,
) -> Result<DTensor> {
    let Some(s) = saved.take() else {
        return Err(Error::invalid(op, "call forward before backward"));
    };
    let placed = dy.placement() == s.x.placement() || dy.mesh().size() == 1;
    if dy.shape() != s.x.shape() || !placed || dy.dtype() == DType::I32 {
        let err = Error::invalid(
            op,
            format!(
                "dy must be f32 or f16 {:?} placed {:?} like the input, got {:?} {:?} {:?}",
                s.x.shape(),
                s.x.placement(),
                dy.dtype(),
                dy.shape(),
                dy.placement()
            ),
        );
        *saved = Some(s);
        return Err(err);
    }
    let dy = &dy.cast(DType::F32)?;
    let k = if bias.is_some() { 2 } else { 1 };
    let mut dxs = Vec::with_capacity(dy.shards().len());
    let mut grads = Vec::with_capacity(dy.shards().len());
    for (r, (xr, dyr)) in s.x.shards().iter().zip(dy.shards()).enumerate() {
        let gamma = &weight.value.shards()[r];
        dxs.push(kernels::norm_backward(xr, gamma, &s.stats[r], dyr, kind)?);
        grads.push(kernels::norm_param_grads(xr, &s.stats[r], dyr, k == 2)?);
    }
    let dim = s.x.shape()[1];
    let grads = if s.x.placement() == Placement::Replicate {
        // Every rank normalised the same rows: the sums are already whole.
        dy.with_shards(grads, vec![k, dim], Placement::Replicate)
    } else {
        // Each rank summed its own tokens: one all-reduce makes the whole sum.
        let partial = dy.with_shards(grads, vec![k, dim], Placement::Partial(ReduceOp::Sum));
        Mapping::ReduceFromParallel.forward(&partial)?
    };
    let row = |i: usize| -> Result<DTensor> {
        let shards = grads
            .shards()
            .iter()
            .map(|g| {
                let g = if k == 1 {
                    g.clone()
                } else {
                    kernels::narrow(g, 0, i, 1)?
                };
                g.reshape(&[dim])
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(grads.with_shards(shards, vec![dim], Placement::Replicate))
    };
    weight.accumulate_grad(row(0)?)?;
    if let Some(b) = bias {
        b.accumulate_grad(row(1)?)?;
    }
    dy.with_shards(dxs, dy.shape().to_vec(), dy.placement())
        .cast(s.dtype)
}

/// Layer normalisation: `y = γ ⊙ (x − μ)/√(σ² + ε) + β` over each row.
#[derive(Debug, Params)]
pub struct LayerNorm {
    /// `γ` `[dim]`, `Replicate`, starts at ones.
    pub weight: Parameter,
    /// `β` `[dim]`, `Replicate`, starts at zeros (`None` without a bias).
    pub bias: Option<Parameter>,
    #[params(skip)]
    config: NormConfig,
    #[params(skip)]
    saved: Option<Saved>,
}

/// Root-mean-square normalisation: `y = γ ⊙ x/√(Σx²/dim + ε)` over each row.
#[derive(Debug, Params)]
pub struct RMSNorm {
    /// `γ` `[dim]`, `Replicate`, starts at ones.
    pub weight: Parameter,
    #[params(skip)]
    config: NormConfig,
    #[params(skip)]
    saved: Option<Saved>,
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
            saved: None,
        })
    }

    /// The settings.
    pub fn config(&self) -> &NormConfig {
        &self.config
    }

    /// `x` `[tokens, dim]` (`Replicate`, or `Shard(0)` with sequence
    /// parallelism) → `y`, placed like `x`. Saves what backward needs;
    /// communicates nothing.
    pub fn forward(&mut self, x: &DTensor) -> Result<DTensor> {
        let params = (&self.weight, self.bias.as_ref());
        let (y, saved) = forward(
            "LayerNorm::forward",
            NormKind::LayerNorm,
            &self.config,
            params,
            x,
        )?;
        self.saved = Some(saved);
        Ok(y)
    }

    /// `dy` (placed like the forward's input) → `dx`; accumulates `dγ`, `dβ`
    /// (all-reduced once when the input was `Shard(0)` and P > 1).
    pub fn backward(&mut self, dy: &DTensor) -> Result<DTensor> {
        let params = (&mut self.weight, self.bias.as_mut());
        backward(
            "LayerNorm::backward",
            NormKind::LayerNorm,
            &mut self.saved,
            params,
            dy,
        )
    }
}

impl RMSNorm {
    /// `γ = 1`; `config.bias` must be false.
    pub fn new(mesh: &Mesh, config: NormConfig) -> Result<Self> {
        Self::from_master(mesh, config, &vec![1.0; config.dim])
    }

    /// A layer holding the given `γ` `[dim]`.
    pub fn from_master(mesh: &Mesh, config: NormConfig, weight: &[f32]) -> Result<Self> {
        const OP: &str = "RMSNorm::from_master";
        let (weight, _) = parameters(OP, mesh, &config, NormKind::RmsNorm, weight, None)?;
        Ok(RMSNorm {
            weight,
            config,
            saved: None,
        })
    }

    /// The settings.
    pub fn config(&self) -> &NormConfig {
        &self.config
    }

    /// `x` `[tokens, dim]` (`Replicate`, or `Shard(0)` with sequence
    /// parallelism) → `y`, placed like `x`. Saves what backward needs;
    /// communicates nothing.
    pub fn forward(&mut self, x: &DTensor) -> Result<DTensor> {
        let params = (&self.weight, None);
        let (y, saved) = forward(
            "RMSNorm::forward",
            NormKind::RmsNorm,
            &self.config,
            params,
            x,
        )?;
        self.saved = Some(saved);
        Ok(y)
    }

    /// `dy` (placed like the forward's input) → `dx`; accumulates `dγ`
    /// (all-reduced once when the input was `Shard(0)` and P > 1).
    pub fn backward(&mut self, dy: &DTensor) -> Result<DTensor> {
        let params = (&mut self.weight, None);
        backward(
            "RMSNorm::backward",
            NormKind::RmsNorm,
            &mut self.saved,
            params,
            dy,
        )
    }
}
