//! Element-wise operations on a [`DTensor`]: [`DTensor::add`] (residuals),
//! [`DTensor::scale`], [`DTensor::activation`] and
//! [`DTensor::activation_backward`]. Each acts shard by shard with the
//! kernels of [`crate::kernels::elementwise`] and communicates nothing; the
//! result keeps the operands' placement. Which placements each accepts
//! follows from what "shard by shard" means for the logical value:
//!
//! | operation | placements | why |
//! |---|---|---|
//! | `add` | both operands alike: `Replicate`, `Shard(d)` or `Partial(Sum)` | `Σa + Σb = Σ(a + b)`; a sum of maxima is not the maximum of sums |
//! | `mul` | both operands alike: `Replicate` or `Shard(d)` | `Σa · Σb ≠ Σ(a · b)` |
//! | `scale(α)` | any; `Partial(Max)` needs `α ≥ 0` | `α·Σx = Σ αx`, `α·max x = max αx` only for `α ≥ 0` |
//! | activations | `Replicate`, `Shard(d)` | `act(Σx) ≠ Σ act(x)` |
//! | `cast` (f32 ↔ f16) | any | rounding each shard rounds each element; a `Partial(Sum)` rounds its addends |
//!
//! f16 operands (both of one dtype) are widened, computed in f32 and the
//! result rounded back to f16 once.

use super::aliased::per_shard1;
use super::autograd::{placed, record};
use super::dtensor::DTensor;
use super::placement::Placement;
use crate::device::LocalTensor;
use crate::element::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::kernels::{self, Activation};

/// A float tensor: f32, or f16 (widened, computed in f32, rounded back).
fn expect_float(op: &'static str, x: &DTensor) -> Result<()> {
    if x.dtype() == DType::I32 {
        return Err(Error::DTypeMismatch {
            op,
            expected: DType::F32,
            got: x.dtype(),
        });
    }
    Ok(())
}

/// `f` on the f32 values of `xs` (all of one dtype), the result in that dtype.
fn in_f32(xs: &[&DTensor], f: impl FnOnce(&[DTensor]) -> Result<DTensor>) -> Result<DTensor> {
    let dtype = xs[0].dtype();
    let wide = xs
        .iter()
        .map(|x| x.cast(DType::F32))
        .collect::<Result<Vec<_>>>()?;
    f(&wide)?.cast(dtype)
}

/// Both operands on one mesh, of one shape and one placement.
pub(super) fn expect_alike(op: &'static str, a: &DTensor, b: &DTensor) -> Result<()> {
    if !a.mesh().same_as(b.mesh()) {
        return Err(Error::invalid(op, "the operands live on different meshes"));
    }
    if a.shape() != b.shape() {
        return Err(Error::shape(op, a.shape(), b.shape()));
    }
    if a.placement() != b.placement() {
        return Err(Error::invalid(
            op,
            format!(
                "the operands must be placed alike, got {:?} and {:?}",
                a.placement(),
                b.placement()
            ),
        ));
    }
    expect_float(op, a)?;
    if a.dtype() != b.dtype() {
        return Err(Error::DTypeMismatch {
            op,
            expected: a.dtype(),
            got: b.dtype(),
        });
    }
    Ok(())
}

/// Activations are only exact on tensors whose shards hold logical elements.
fn expect_not_partial(op: &'static str, x: &DTensor) -> Result<()> {
    expect_placed_not_partial(op, x.placement())
}

/// [`expect_not_partial`] of a result placed `placement`, before it exists.
pub(super) fn expect_placed_not_partial(op: &'static str, placement: Placement) -> Result<()> {
    if let Placement::Partial(_) = placement {
        return Err(Error::invalid(
            op,
            format!(
                "a non-linear function of a {placement:?} tensor is not the function of its value; \
                 redistribute to Replicate or Shard first"
            ),
        ));
    }
    Ok(())
}

impl DTensor {
    /// Apply `f` to every rank's shard (same shape and placement), reading
    /// `self` and `others`: once, aliased to every rank, where each of them
    /// is one buffer all ranks share (`aliased.rs`).
    fn map_shards(
        &self,
        others: &[&DTensor],
        f: impl Fn(usize) -> Result<LocalTensor>,
    ) -> Result<DTensor> {
        let mut operands = vec![self];
        operands.extend_from_slice(others);
        let shards = per_shard1(&operands, f)?;
        Ok(self.with_shards(shards, self.shape().to_vec(), self.placement()))
    }

    /// The same tensor stored as `dtype` (f32 ↔ f16), shard by shard; itself
    /// when it already is. Narrowing gives a neighbouring f16 (the nearest on
    /// lavapipe; WGSL allows either), widening is exact. f16 needs `SHADER_F16` on every rank's adapter
    /// ([`crate::Device::has_f16`]), else [`Error::Unsupported`].
    ///
    /// ```
    /// # fn main() -> wgpu_tp::Result<()> {
    /// use wgpu_tp::{DTensor, DType, Error, Mesh, Placement};
    /// let mesh = Mesh::simulated(2)?;
    /// let x = DTensor::from_host(&mesh, &[3], &[1.0, 0.1, 3.0], Placement::Shard(0))?;
    /// if mesh.ranks()[0].device().has_f16() {
    ///     let h = x.cast(DType::F16)?; // still Shard(0), half the bytes
    ///     assert_eq!(h.dtype(), DType::F16);
    ///     let back = h.to_host()?;
    ///     assert_eq!(back[0], 1.0); // exact in f16
    ///     assert!((back[1] - 0.1).abs() < 1e-4); // 0.1 is not: a neighbour of it
    /// } else {
    ///     assert!(matches!(x.cast(DType::F16), Err(Error::Unsupported { .. })));
    /// }
    /// # Ok(()) }
    /// ```
    pub fn cast(&self, dtype: DType) -> Result<DTensor> {
        if self.dtype() == dtype {
            return Ok(self.clone());
        }
        // Backward: the gradient goes back to the input's dtype (the tape
        // casts what reaches a node to the node's dtype).
        record("DTensor::cast", &[self], || {
            let y = self.map_shards(&[], |r| kernels::cast(&self.shards()[r], dtype))?;
            Ok((y, |dy: &DTensor| Ok(vec![Some(dy.clone())])))
        })
    }

    /// `self + other`, element-wise (a residual connection). Both must be f32 (or both f16)
    /// on the same mesh with the same shape and placement; `Partial(Sum)`
    /// operands add their partial sums, `Partial(Max)` ones are refused.
    /// Communicates nothing.
    pub fn add(&self, other: &DTensor) -> Result<DTensor> {
        const OP: &str = "DTensor::add";
        expect_alike(OP, self, other)?;
        if self.placement() == Placement::Partial(ReduceOp::Max) {
            return Err(Error::invalid(
                OP,
                "a sum of two Partial(Max) tensors is not the maximum of sums; \
                 redistribute to Replicate first",
            ));
        }
        record("DTensor::add", &[self, other], || {
            let y = in_f32(&[self, other], |w| {
                w[0].map_shards(&[&w[1]], |r| {
                    kernels::add(&w[0].shards()[r], &w[1].shards()[r])
                })
            })?;
            Ok((y, |dy: &DTensor| {
                Ok(vec![Some(dy.clone()), Some(dy.clone())])
            }))
        })
    }

    /// `self ⊙ other`, element-wise (SwiGLU's `silu(gate) ⊙ up`): both f32
    /// (or both f16) on one mesh, shaped and placed alike, `Replicate` or
    /// `Shard(d)`. Communicates nothing; the VJP is `(dy ⊙ other, dy ⊙ self)`.
    pub fn mul(&self, other: &DTensor) -> Result<DTensor> {
        const OP: &str = "DTensor::mul";
        expect_alike(OP, self, other)?;
        expect_not_partial(OP, self)?;
        record(OP, &[self, other], || {
            let y = in_f32(&[self, other], |w| {
                w[0].map_shards(&[&w[1]], |r| {
                    kernels::mul(&w[0].shards()[r], &w[1].shards()[r])
                })
            })?;
            let (a, b) = (self.detach(), other.detach());
            Ok((y, move |dy: &DTensor| {
                let dy = placed(dy, a.placement())?.cast(a.dtype())?;
                let times = |x: &DTensor| {
                    in_f32(&[&dy, x], |w| {
                        w[0].map_shards(&[&w[1]], |r| {
                            kernels::mul(&w[0].shards()[r], &w[1].shards()[r])
                        })
                    })
                };
                Ok(vec![Some(times(&b)?), Some(times(&a)?)])
            }))
        })
    }

    /// `alpha · self`, element-wise, on any placement (`alpha ≥ 0` for
    /// `Partial(Max)`; `alpha` must not be NaN). Communicates nothing.
    pub fn scale(&self, alpha: f32) -> Result<DTensor> {
        const OP: &str = "DTensor::scale";
        expect_float(OP, self)?;
        if alpha.is_nan() {
            return Err(Error::invalid(OP, "alpha is NaN"));
        }
        if self.placement() == Placement::Partial(ReduceOp::Max) && alpha < 0.0 {
            return Err(Error::invalid(
                OP,
                format!(
                    "scaling a Partial(Max) tensor by {alpha} < 0 would turn maxima into minima"
                ),
            ));
        }
        record("DTensor::scale", &[self], || {
            let y = in_f32(&[self], |w| {
                w[0].map_shards(&[], |r| kernels::scale(&w[0].shards()[r], alpha))
            })?;
            Ok((y, move |dy: &DTensor| Ok(vec![Some(dy.scale(alpha)?)])))
        })
    }

    /// `act(self)`, element-wise, for a `Replicate` or `Shard(d)` f32 or f16 tensor.
    /// Communicates nothing.
    pub fn activation(&self, act: Activation) -> Result<DTensor> {
        const OP: &str = "DTensor::activation";
        expect_float(OP, self)?;
        expect_not_partial(OP, self)?;
        record("DTensor::activation", &[self], || {
            let y = in_f32(&[self], |w| {
                w[0].map_shards(&[], |r| kernels::activation(&w[0].shards()[r], act))
            })?;
            let x = self.detach();
            Ok((y, move |dy: &DTensor| {
                let dy = placed(dy, x.placement())?;
                Ok(vec![Some(x.activation_backward(&dy, act)?)])
            }))
        })
    }

    /// `cap · tanh(self / cap)` (soft-capped logits, Gemma 2), element-wise,
    /// for a `Replicate` or `Shard(d)` tensor; `cap` finite and > 0.
    /// Communicates nothing.
    pub fn softcap(&self, cap: f32) -> Result<DTensor> {
        const OP: &str = "DTensor::softcap";
        expect_float(OP, self)?;
        expect_not_partial(OP, self)?;
        if !(cap.is_finite() && cap > 0.0) {
            return Err(Error::invalid(
                OP,
                format!("cap {cap} must be finite and > 0"),
            ));
        }
        record(OP, &[self], || {
            let y = in_f32(&[self], |w| {
                w[0].map_shards(&[], |r| kernels::softcap(&w[0].shards()[r], cap))
            })?;
            let x = self.detach();
            Ok((y, move |dy: &DTensor| {
                let dy = placed(dy, x.placement())?;
                expect_alike(OP, &x, &dy)?;
                let dx = in_f32(&[&x, &dy], |w| {
                    w[0].map_shards(&[&w[1]], |r| {
                        kernels::softcap_backward(&w[0].shards()[r], &w[1].shards()[r], cap)
                    })
                })?;
                Ok(vec![Some(dx)])
            }))
        })
    }

    /// `dy · act'(self)`, where `self` is the activation's input and `dy` the
    /// gradient of its output: both f32 or both f16, `Replicate` or `Shard(d)`, placed and
    /// shaped alike. Communicates nothing.
    pub fn activation_backward(&self, dy: &DTensor, act: Activation) -> Result<DTensor> {
        const OP: &str = "DTensor::activation_backward";
        expect_alike(OP, self, dy)?;
        expect_not_partial(OP, self)?;
        in_f32(&[self, dy], |w| {
            w[0].map_shards(&[&w[1]], |r| {
                kernels::activation_backward(&w[0].shards()[r], &w[1].shards()[r], act)
            })
        })
    }
}
