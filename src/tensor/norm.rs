//! [`DTensor::layer_norm`] and [`DTensor::rms_norm`] over the last dim of
//! `[tokens, dim]` activations, with [`kernels::norm`](crate::kernels::norm)'s
//! maths shard by shard and no communication forward.
//!
//! The input is `Replicate` (every rank normalises the same rows) or, with
//! sequence parallelism, `Shard(0)` (each rank its own tokens); on one rank
//! any placement (all hold the same bytes). `weight` (`γ`) and `bias` (`β`)
//! are `[dim]`, `Replicate`. The VJP gives `dx` placed like `x` and
//! `Replicate` `dγ`, `dβ`: for a `Replicate` input every rank's sums are
//! whole already; for a `Shard(0)` input each rank's `[dγ; dβ]` is a partial
//! sum over its tokens, all-reduced at once as one `[2, dim]` tensor (`[1,
//! dim]` without a bias) through [`Mapping::ReduceFromParallel`]: **one
//! all-reduce per backward**, before anything reaches the optimiser
//! (Megatron's rule), so the replicas stay bit-identical and the tape
//! reduces nothing more.
//!
//! An f16 input is normalised in f32 (statistics, `γ`, `β` and gradients are
//! f32) and `y`, `dx` are rounded back to f16.
//!
//! [`DTensor::rms_norm_heads`] normalises each head of a `[tokens,
//! heads·head_dim]` projection over its `head_dim` (Qwen3's `q_norm` /
//! `k_norm`): `Replicate` or `Shard(1)` in whole heads. Its `dγ` is each
//! rank's sum over its own heads, `Partial(Sum)` when the heads are split
//! or the incoming gradient is a partial sum, reduced once at the parameter.

use super::aliased::per_shard;
use super::autograd::{linear_dy, placed, record};
use super::dtensor::DTensor;
use super::mappings::Mapping;
use super::placement::Placement;
use crate::device::LocalTensor;
use crate::element::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::kernels::{self, NormKind};

/// A `[dim]` float parameter on x's mesh, `Replicate` (any placement on one rank).
fn check_param(op: &'static str, what: &str, p: &DTensor, x: &DTensor, dim: usize) -> Result<()> {
    if !p.mesh().same_as(x.mesh()) {
        return Err(Error::invalid(op, format!("{what} lives on another mesh")));
    }
    if p.shape() != [dim] {
        return Err(Error::shape(op, format!("{what} [{dim}]"), p.shape()));
    }
    if p.dtype() == DType::I32 {
        return Err(Error::DTypeMismatch {
            op,
            expected: DType::F32,
            got: p.dtype(),
        });
    }
    if p.placement() != Placement::Replicate && p.mesh().size() > 1 {
        return Err(Error::invalid(
            op,
            format!(
                "{what} must be Replicate (every rank normalises with the whole γ, β), got {:?}",
                p.placement()
            ),
        ));
    }
    Ok(())
}

/// `x` f32 or f16 `[tokens, dim]`, `Replicate` or `Shard(0)` (any on one rank).
fn check_input(op: &'static str, x: &DTensor) -> Result<usize> {
    let [_, dim] = *x.shape() else {
        return Err(Error::shape(op, "x as [tokens, dim]", x.shape()));
    };
    if x.dtype() == DType::I32 {
        return Err(Error::DTypeMismatch {
            op,
            expected: DType::F32,
            got: x.dtype(),
        });
    }
    match x.placement() {
        _ if x.mesh().size() == 1 => Ok(dim),
        Placement::Replicate | Placement::Shard(0) => Ok(dim),
        other => Err(Error::invalid(
            op,
            format!("x must be placed Replicate or Shard(0) (tokens), got {other:?}"),
        )),
    }
}

impl DTensor {
    /// Layer normalisation of each row of `self` `[tokens, dim]`:
    /// `y = γ ⊙ (x − μ)/√(σ² + ε) + β`, placed like `self`, in its dtype.
    /// `weight` and `bias` are `[dim]`, `Replicate`. See the module docs for
    /// the placements and the one all-reduce of the VJP under sequence
    /// parallelism.
    ///
    /// ```
    /// # fn main() -> wgpu_tp::Result<()> {
    /// use wgpu_tp::{DTensor, Mesh, Placement};
    /// let mesh = Mesh::simulated(2)?;
    /// let x = DTensor::from_host(&mesh, &[2, 2], &[1.0, 3.0, 0.0, 4.0], Placement::Shard(0))?;
    /// let g = DTensor::from_host(&mesh, &[2], &[1.0, 1.0], Placement::Replicate)?;
    /// let b = DTensor::from_host(&mesh, &[2], &[0.0, 0.5], Placement::Replicate)?;
    /// let y = x.layer_norm(&g, Some(&b), 0.0)?.to_host()?;
    /// assert_eq!(y, vec![-1.0, 1.5, -1.0, 1.5]);
    /// # Ok(()) }
    /// ```
    pub fn layer_norm(
        &self,
        weight: &DTensor,
        bias: Option<&DTensor>,
        eps: f32,
    ) -> Result<DTensor> {
        norm(
            "DTensor::layer_norm",
            NormKind::LayerNorm,
            self,
            (weight, bias),
            eps,
        )
    }

    /// Root-mean-square normalisation of each row of `self` `[tokens, dim]`:
    /// `y = γ ⊙ x/√(Σx²/dim + ε)`, placed like `self`; as
    /// [`DTensor::layer_norm`] without a bias.
    pub fn rms_norm(&self, weight: &DTensor, eps: f32) -> Result<DTensor> {
        norm(
            "DTensor::rms_norm",
            NormKind::RmsNorm,
            self,
            (weight, None),
            eps,
        )
    }
}

/// What the VJP keeps: x widened, γ in f32, each rank's `(mean, rstd)` rows.
struct Saved {
    x: DTensor,
    gamma: DTensor,
    stats: Vec<LocalTensor>,
    kind: NormKind,
    bias: bool,
    dtype: DType,
}

fn norm(
    op: &'static str,
    kind: NormKind,
    x: &DTensor,
    (weight, bias): (&DTensor, Option<&DTensor>),
    eps: f32,
) -> Result<DTensor> {
    let dim = check_input(op, x)?;
    check_param(op, "weight", weight, x, dim)?;
    if let Some(b) = bias {
        check_param(op, "bias", b, x, dim)?;
    }
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(Error::invalid(
            op,
            format!("eps {eps} must be finite and ≥ 0"),
        ));
    }
    let mut inputs = vec![x, weight];
    inputs.extend(bias);
    record(op, &inputs, || {
        let dtype = x.dtype();
        let wide = x.cast(DType::F32)?;
        let gamma = weight.cast(DType::F32)?;
        let beta = bias.map(|b| b.cast(DType::F32)).transpose()?;
        let mut operands = vec![&wide, &gamma];
        operands.extend(beta.as_ref());
        let (mut ys, mut stats) = (Vec::new(), Vec::new());
        for [y, s] in per_shard(&operands, |r| {
            let b = beta.as_ref().map(|b| &b.shards()[r]);
            let (y, s) =
                kernels::norm_forward(&wide.shards()[r], &gamma.shards()[r], b, kind, eps)?;
            Ok([y, s])
        })? {
            ys.push(y);
            stats.push(s);
        }
        let y = wide
            .with_shards(ys, wide.shape().to_vec(), wide.placement())
            .cast(dtype)?;
        let saved = Saved {
            x: wide.detach(),
            gamma: gamma.detach(),
            stats,
            kind,
            bias: bias.is_some(),
            dtype,
        };
        Ok((y, move |dy: &DTensor| norm_vjp(saved, dy)))
    })
}

/// The norm's backward: `dx` placed like x in its dtype, `dγ` (and `dβ`)
/// `Replicate` f32, reduced once when x was split along tokens.
fn norm_vjp(s: Saved, dy: &DTensor) -> Result<Vec<Option<DTensor>>> {
    let dy = &placed(dy, s.x.placement())?.cast(DType::F32)?;
    let k = if s.bias { 2 } else { 1 };
    let mut dxs = Vec::with_capacity(dy.shards().len());
    let mut grads = Vec::with_capacity(dy.shards().len());
    for (r, (xr, dyr)) in s.x.shards().iter().zip(dy.shards()).enumerate() {
        let gamma = &s.gamma.shards()[r];
        dxs.push(kernels::norm_backward(xr, gamma, &s.stats[r], dyr, s.kind)?);
        grads.push(kernels::norm_param_grads(xr, &s.stats[r], dyr, s.bias)?);
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
    let dx = dy
        .with_shards(dxs, dy.shape().to_vec(), dy.placement())
        .cast(s.dtype)?;
    let mut out = vec![Some(dx), Some(row(0)?)];
    if s.bias {
        out.push(Some(row(1)?));
    }
    Ok(out)
}

impl DTensor {
    /// RMSNorm of every head of `self` `[tokens, heads·head_dim]` (f32) over
    /// its `head_dim` entries, with one `weight` `[head_dim]` (`Replicate`)
    /// shared by all heads: `y = γ ⊙ x/√(Σx²/head_dim + ε)` per head, placed
    /// like `self` (`Replicate` or `Shard(1)` in whole heads). Communicates
    /// nothing forward; see the module docs for the VJP's placements.
    pub fn rms_norm_heads(&self, weight: &DTensor, eps: f32, head_dim: usize) -> Result<DTensor> {
        const OP: &str = "DTensor::rms_norm_heads";
        let [_, cols] = *self.shape() else {
            return Err(Error::shape(
                OP,
                "x as [tokens, heads·head_dim]",
                self.shape(),
            ));
        };
        if self.dtype() != DType::F32 {
            return Err(Error::DTypeMismatch {
                op: OP,
                expected: DType::F32,
                got: self.dtype(),
            });
        }
        if head_dim == 0 || !cols.is_multiple_of(head_dim) {
            return Err(Error::invalid(
                OP,
                format!("head_dim {head_dim} must be ≥ 1 and divide the {cols} columns"),
            ));
        }
        check_param(OP, "weight", weight, self, head_dim)?;
        let split = self.placement() == Placement::Shard(1);
        if self.mesh().size() > 1 && !(split || self.placement() == Placement::Replicate) {
            return Err(Error::invalid(
                OP,
                format!(
                    "x must be Replicate or Shard(1) in whole heads, got {:?}",
                    self.placement()
                ),
            ));
        }
        if !(eps.is_finite() && eps >= 0.0) {
            return Err(Error::invalid(
                OP,
                format!("eps {eps} must be finite and ≥ 0"),
            ));
        }
        let per_head = move |t: &LocalTensor| {
            let rows = t.shape()[0] * t.shape()[1] / head_dim;
            t.reshape(&[rows, head_dim])
        };
        record(OP, &[self, weight], || {
            let gamma = weight.cast(DType::F32)?.detach();
            let mut ys = Vec::with_capacity(self.shards().len());
            let mut stats = Vec::with_capacity(self.shards().len());
            for (r, xr) in self.shards().iter().enumerate() {
                let (y, st) = kernels::norm_forward(
                    &per_head(xr)?,
                    &gamma.shards()[r],
                    None,
                    NormKind::RmsNorm,
                    eps,
                )?;
                ys.push(y.reshape(xr.shape())?);
                stats.push(st);
            }
            let y = self.with_shards(ys, self.shape().to_vec(), self.placement());
            let x = self.detach();
            Ok((y, move |dy: &DTensor| {
                let sum = Placement::Partial(ReduceOp::Sum);
                let p = x.mesh().size();
                let (dy, at) = linear_dy(dy, x.placement())?;
                let dy = dy.cast(DType::F32)?;
                let (mut dxs, mut dgs) = (vec![], vec![]);
                for (r, xr) in x.shards().iter().enumerate() {
                    let (x2, g2) = (per_head(xr)?, per_head(&dy.shards()[r])?);
                    let g = &gamma.shards()[r];
                    let dx = kernels::norm_backward(&x2, g, &stats[r], &g2, NormKind::RmsNorm)?;
                    dxs.push(dx.reshape(xr.shape())?);
                    let dg = kernels::norm_param_grads(&x2, &stats[r], &g2, false)?;
                    dgs.push(dg.reshape(&[head_dim])?);
                }
                let dg_at = if p > 1 && (at == sum || at == Placement::Shard(1)) {
                    sum
                } else {
                    Placement::Replicate
                };
                let dx = x.with_shards_in_units(dxs, x.shape().to_vec(), at, x.shard_unit());
                let dg = dy.with_shards(dgs, vec![head_dim], dg_at);
                Ok(vec![Some(dx), Some(dg)])
            }))
        })
    }
}
