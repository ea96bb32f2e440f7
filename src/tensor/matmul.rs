//! [`DTensor::matmul`]: `y = x·w` (or `x·wᵀ`) shard by shard, one
//! [`gemm`](crate::kernels::gemm) of a weight per rank and no
//! communication, so layers can be written on `DTensor` operations instead
//! of per-shard GEMMs. `x` is
//! `[T, K]`; `w` is `[K, N]`, or `[N, K]` with `transpose_w` (a layer's
//! weight `[out, in]`, `y = x·Wᵀ`). Which placements multiply shard by shard
//! (w's dims named by role, whichever is stored first):
//!
//! | x | w | y | why |
//! |---|---|---|---|
//! | `Replicate` | `Shard(N)` | `Shard(1)` | column parallel: rank r computes its columns |
//! | `Shard(1)` (K split) | `Shard(K)`, same split | `Partial(Sum)` | row parallel: `x·w = Σ_r x_r·w_r` |
//! | `Replicate` | `Replicate` | `Replicate` | every rank computes the whole product |
//! | `Shard(0)` (tokens) | `Replicate` | `Shard(0)` | rows of y depend only on rows of x |
//!
//! Anything else (a `Partial` operand, `Shard(1)` x with replicated w, …) is
//! refused with an error naming both placements: `redistribute` first. The
//! split dims must line up rank by rank (same per-rank sizes, so a column
//! output is split like the weight's rows, in its shard unit). x and w are
//! both f32 or both f16 (accumulated in f32), or x is f32 and w a weight
//! kept in bf16 or f16 (read as stored for a few tokens, widened per call
//! beyond; its gradient is rounded to w's dtype, and optimisers refuse such
//! a weight); y is x's dtype unless
//! [`MatmulOptions::out_dtype`] says otherwise (a row-parallel partial sum
//! kept in f32 is reduced before it is rounded). With `transpose_w`, a `w`
//! shard or product past one storage binding (a tied head's vocab rows and
//! logits) is multiplied block by block, forward and backward
//! (`tied_head.rs`); a bias is refused there.

use super::autograd::{record, tracking};
use super::dtensor::DTensor;
use super::matmul_grad::product_vjp;
// Where it was defined before `matmul_plan.rs`: files written against that
// path still build.
pub(super) use super::matmul_plan::MatmulOptions;
use super::product::product;
use crate::element::DType;
use crate::error::Result;
use crate::kernels::Activation;

impl DTensor {
    /// `self · w` (`self · wᵀ` when `transpose_w`), shard by shard with no
    /// communication; y is in self's dtype. See [`DTensor::matmul_with`] and
    /// the module table for the placements it takes and gives: column
    /// parallel (`Replicate` × w split along N → `Shard(1)`), row parallel
    /// (`Shard(1)` × w split along K → `Partial(Sum)`), and replicated
    /// weights (`Replicate` or `Shard(0)` x keeps its placement).
    ///
    /// ```
    /// # fn main() -> wgpu_tp::Result<()> {
    /// use wgpu_tp::{DTensor, Mesh, Placement, ReduceOp};
    /// let mesh = Mesh::simulated(2)?;
    /// // x [2, 3]; W1 [4, 3] and W2 [3, 4] stored [out, in]: y = (x·W1ᵀ)·W2ᵀ.
    /// let x = [1.0, 2.0, 3.0, -1.0, 0.5, 2.0];
    /// let w1: Vec<f32> = (0..12).map(|i| i as f32 * 0.25 - 1.0).collect();
    /// let w2: Vec<f32> = (0..12).map(|i| 1.0 - i as f32 * 0.125).collect();
    /// let xd = DTensor::from_host(&mesh, &[2, 3], &x, Placement::Replicate)?;
    /// let w1d = DTensor::from_host(&mesh, &[4, 3], &w1, Placement::Shard(0))?;
    /// let w2d = DTensor::from_host(&mesh, &[3, 4], &w2, Placement::Shard(1))?;
    /// let h = xd.matmul(&w1d, true)?; // column parallel
    /// assert_eq!(h.placement(), Placement::Shard(1));
    /// let y = h.matmul(&w2d, true)?; // row parallel: partial sums per rank
    /// assert_eq!(y.placement(), Placement::Partial(ReduceOp::Sum));
    /// let y = y.redistribute(Placement::Replicate)?.to_host()?; // the one all-reduce
    /// // The same product on the host.
    /// let mm = |a: &[f32], b: &[f32], (m, k, n): (usize, usize, usize)| -> Vec<f32> {
    ///     (0..m * n)
    ///         .map(|i| (0..k).map(|l| a[i / n * k + l] * b[i % n * k + l]).sum())
    ///         .collect()
    /// };
    /// let want = mm(&mm(&x, &w1, (2, 3, 4)), &w2, (2, 4, 3));
    /// for (g, w) in y.iter().zip(&want) {
    ///     assert!((g - w).abs() <= 1e-5 * w.abs().max(1.0));
    /// }
    /// # Ok(()) }
    /// ```
    pub fn matmul(&self, w: &DTensor, transpose_w: bool) -> Result<DTensor> {
        self.matmul_with(
            w,
            MatmulOptions {
                transpose_w,
                ..Default::default()
            },
        )
    }

    /// [`DTensor::matmul`] with [`MatmulOptions`] (the output dtype). Every
    /// check (mesh, shapes, dtypes, placements, how the shards line up) runs
    /// before any kernel is recorded, so a refused call leaves the mesh as it
    /// was. w's per-rank packs are kept with its buffers until it changes
    /// ([`GemmOptions::weight`](crate::kernels::GemmOptions::weight)), as the layers'
    /// weights are.
    pub fn matmul_with(&self, w: &DTensor, opts: MatmulOptions) -> Result<DTensor> {
        record("DTensor::matmul", &[self, w], || {
            let y = product(self, w, None, opts, (None, None))?;
            let (x, w) = (self.detach(), w.detach());
            Ok((y, move |dy: &DTensor| {
                let (dx, dw) = product_vjp(&x, &w, dy, opts)?;
                Ok(vec![Some(dx), dw])
            }))
        })
    }

    /// A linear layer's product with its bias fused in: `self·wᵀ + bias`
    /// (`w` `[N, K]`, as [`DTensor::matmul`] with `transpose_w`, and the bias
    /// `[N]` added in f32 before y is rounded). The bias is placed as
    /// [`DTensor::add_row`] takes it for y's placement (`Shard(0)` split like
    /// w's rows for a column-parallel y, else `Replicate`); a `Partial` y
    /// (row parallel) is refused: add the bias after the reduce. Only
    /// `opts.out_dtype` is read; w is always used transposed.
    pub fn linear(
        &self,
        w: &DTensor,
        bias: Option<&DTensor>,
        opts: MatmulOptions,
    ) -> Result<DTensor> {
        // w is a layer's [out, in] weight whatever opts.transpose_w says.
        let opts = MatmulOptions {
            transpose_w: true,
            ..opts
        };
        let Some(b) = bias else {
            return self.matmul_with(w, opts);
        };
        record("DTensor::linear", &[self, w, b], || {
            let y = product(self, w, Some(b), opts, (None, None))?;
            let (x, w) = (self.detach(), w.detach());
            Ok((y, move |dy: &DTensor| {
                let (dx, dw) = product_vjp(&x, &w, dy, opts)?;
                let db = dy.sum_rows()?;
                Ok(vec![Some(dx), dw, Some(db)])
            }))
        })
    }
}

impl DTensor {
    /// `act(self·wᵀ + bias)`: [`DTensor::linear`] and then
    /// [`DTensor::activation`], with the same bits. Where nothing is
    /// recorded (decoding under [`no_grad`](crate::no_grad)) and y is f32,
    /// the small-M kernel applies the activation as it stores (one dispatch
    /// and one pass over y fewer per token); on the tape the two
    /// operations are recorded as usual (backward needs the
    /// pre-activation).
    pub fn linear_activation(
        &self,
        w: &DTensor,
        bias: Option<&DTensor>,
        activation: Activation,
        opts: MatmulOptions,
    ) -> Result<DTensor> {
        let mut inputs = vec![self, w];
        inputs.extend(bias);
        if tracking(&inputs) || opts.out_dtype.unwrap_or(self.dtype()) != DType::F32 {
            return self.linear(w, bias, opts)?.activation(activation);
        }
        let opts = MatmulOptions {
            transpose_w: true,
            ..opts
        };
        product(self, w, bias, opts, (Some(activation), None))
    }

    /// `act(self·wᵀ + bias) ⊙ up` (SwiGLU's gate times its up
    /// projection): [`DTensor::linear_activation`] and then
    /// [`DTensor::mul`], with the same bits. `up` is shaped and placed as
    /// the product. Where nothing is recorded and y is f32, the small-M
    /// kernel multiplies as it stores (one dispatch and one pass over y
    /// fewer per token and layer); on the tape the operations are recorded
    /// as usual.
    pub fn linear_activation_mul(
        &self,
        w: &DTensor,
        bias: Option<&DTensor>,
        activation: Activation,
        up: &DTensor,
        opts: MatmulOptions,
    ) -> Result<DTensor> {
        let mut inputs = vec![self, w, up];
        inputs.extend(bias);
        let f32_out = opts.out_dtype.unwrap_or(self.dtype()) == DType::F32;
        let blocked = w.shards().iter().any(|s| s.is_blocked());
        if tracking(&inputs) || !f32_out || up.dtype() != DType::F32 || blocked {
            return self.linear_activation(w, bias, activation, opts)?.mul(up);
        }
        let opts = MatmulOptions {
            transpose_w: true,
            ..opts
        };
        product(self, w, bias, opts, (Some(activation), Some(up)))
    }
}
