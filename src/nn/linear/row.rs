//! [`RowParallelLinear`]: rank r holds columns `W_r` of `W` `[out, in]` (a
//! slice of the inputs); the bias is replicated. Forward
//! `y = g(x_r W_rᵀ) + b`, the bias added once after the reduce; backward
//! `dW_r = dyᵀ x_r`, `db = Σ_rows dy`, `dx_r = dy W_r`. g is
//! [`Mapping::ReduceFromParallel`], or with sequence parallelism
//! [`Mapping::ReduceScatterToParallel(0)`](Mapping::ReduceScatterToParallel)
//! (its ring form with [`Overlap::Ring`]).
//!
//! Mixed precision: an f16 input makes the layer compute in f16 — the f32
//! master weight is cast per call, GEMMs accumulate in f32, the partial sums
//! are reduced in f32 and `y` is rounded to f16 once after the bias; `dx` is
//! f16, `dW`, `db` stay f32.

use super::shared::{
    Overlap, accumulate_grads, check_grad_dtype, check_input, check_overlap, gemm_each,
    linear_common, shard_master, split_is_plain, sum_rows_each,
};
use crate::device::{LocalTensor, Mesh};
use crate::element::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::kernels::{self, GemmOptions};
use crate::nn::Params;
use crate::nn::init::{Init, InitRng};
use crate::nn::parameter::Parameter;
use crate::tensor::{
    DTensor, Mapping, Placement, concat_token_chunks, ring_all_gather_fused,
    ring_reduce_scatter_fused, token_chunk,
};

/// Settings of a [`RowParallelLinear`].
#[derive(Clone, Debug)]
pub struct RowParallelConfig {
    /// Input features (split over ranks).
    pub in_features: usize,
    /// Output features.
    pub out_features: usize,
    /// Whether the layer has a bias.
    pub bias: bool,
    /// The input is already `Shard(1)` (the output of a column layer); else it
    /// is replicated and scattered first.
    pub input_is_parallel: bool,
    /// Weight initialiser (the bias starts at zero).
    pub init: Init,
    /// Fused-weight stride along `in`.
    pub stride: usize,
    /// Inputs are split over ranks in whole units of this many (e.g.
    /// `head_dim`, matching the column layer before it). Default 1.
    pub shard_unit: usize,
    /// Sequence parallelism: the output is reduce-scattered along tokens
    /// (`Shard(0)`, the bias added to each rank's rows) instead of
    /// all-reduced; backward all-gathers dy. Needs `input_is_parallel`.
    pub sequence_parallel: bool,
    /// How the sequence-parallel reduce-scatter / gather runs (needs
    /// `sequence_parallel` for [`Overlap::Ring`]).
    pub overlap: Overlap,
}

impl RowParallelConfig {
    /// Defaults: bias on, input parallel, N(0, 0.02²), stride 1, no sequence
    /// parallelism, no overlap.
    pub fn new(in_features: usize, out_features: usize) -> Self {
        RowParallelConfig {
            in_features,
            out_features,
            bias: true,
            input_is_parallel: true,
            init: Init::default(),
            stride: 1,
            shard_unit: 1,
            sequence_parallel: false,
            overlap: Overlap::None,
        }
    }
}

/// `Y = X Wᵀ + b` with `W` split along the input dimension.
#[derive(Debug, Params)]
pub struct RowParallelLinear {
    /// `[out, in]`, `Shard(1)`.
    pub weight: Parameter,
    /// `[out]`, `Replicate`.
    pub bias: Option<Parameter>,
    #[params(skip)]
    config: RowParallelConfig,
    #[params(skip)]
    saved_input: Option<DTensor>,
}

impl RowParallelLinear {
    /// A layer holding the given master weight `[out, in]` and bias `[out]`.
    pub fn from_master(
        mesh: &Mesh,
        config: RowParallelConfig,
        weight: &[f32],
        bias: Option<&[f32]>,
    ) -> Result<Self> {
        const OP: &str = "RowParallelLinear::from_master";
        check_overlap(OP, config.sequence_parallel, config.overlap)?;
        let (n, stride, unit) = (config.in_features, config.stride, config.shard_unit);
        if !config.input_is_parallel && !split_is_plain(mesh, n, stride, unit) {
            return Err(Error::invalid(
                OP,
                "input_is_parallel = false needs the inputs split plainly over ranks: \
                 shard_unit 1, and in_features a multiple of stride × ranks when stride > 1",
            ));
        }
        if config.sequence_parallel && !config.input_is_parallel {
            return Err(Error::invalid(
                OP,
                "sequence_parallel needs input_is_parallel = true (as in Megatron)",
            ));
        }
        let (weight, bias) = shard_master(
            OP,
            mesh,
            [config.out_features, config.in_features],
            (weight, bias, config.bias),
            (Placement::Shard(1), Placement::Replicate),
            (config.stride, config.shard_unit),
        )?;
        Ok(RowParallelLinear {
            weight,
            bias,
            config,
            saved_input: None,
        })
    }

    /// `x` `[tokens, in]` (`Shard(1)` if `input_is_parallel`, else
    /// `Replicate`) → `[tokens, out]`, `Replicate` (`Shard(0)`, tokens split,
    /// with `sequence_parallel`).
    pub fn forward(&mut self, x: &DTensor) -> Result<DTensor> {
        const OP: &str = "RowParallelLinear::forward";
        check_input(OP, x, self.config.in_features, self.ring())?;
        let x = if self.config.input_is_parallel {
            x.clone()
        } else {
            Mapping::ScatterToParallel(1).forward(x)?
        };
        if x.mesh().size() > 1 && x.placement() != Placement::Shard(1) {
            return Err(Error::invalid(
                OP,
                format!("input must be placed Shard(1), got {:?}", x.placement()),
            ));
        }
        let w = &self.weight.value.cast(x.dtype())?;
        let widths = |t: &DTensor| t.shards().iter().map(|s| s.shape()[1]).collect::<Vec<_>>();
        if widths(&x) != widths(w) {
            return Err(Error::invalid(
                OP,
                format!(
                    "the input's per-rank widths {:?} differ from the weight's {:?}: split the \
                     input like the layer (shard_unit {})",
                    widths(&x),
                    widths(w),
                    self.config.shard_unit
                ),
            ));
        }
        let shape = [x.shape()[0], self.config.out_features];
        let y = if self.ring() {
            // Each chunk's partial product is computed while the running sum travels.
            let p = x.mesh().size();
            ring_reduce_scatter_fused(x.mesh(), &shape, |r, c| {
                let x_rc = token_chunk(&x.shards()[r], p, c)?;
                kernels::gemm_weight(
                    &x_rc,
                    &w.shards()[r],
                    GemmOptions {
                        trans_b: true,
                        ..Default::default()
                    },
                )
            })?
        } else {
            // Partial sums in f32 whatever x's dtype: reduced, then rounded once.
            let z = gemm_each(&x, w, (false, true), DType::F32)?;
            let z = x.with_shards(z, shape.to_vec(), Placement::Partial(ReduceOp::Sum));
            if self.config.sequence_parallel {
                Mapping::ReduceScatterToParallel(0).forward(&z)?
            } else {
                Mapping::ReduceFromParallel.forward(&z)?
            }
        };
        let dtype = x.dtype();
        self.saved_input = Some(x);
        let y = match &self.bias {
            Some(b) => {
                // Replicated bias, added once after the reduce (to each rank's rows with SP).
                let shards = y
                    .shards()
                    .iter()
                    .zip(b.value.shards())
                    .map(|(y, b)| kernels::add_row(y, b))
                    .collect::<Result<Vec<_>>>()?;
                y.with_shards(shards, y.shape().to_vec(), y.placement())
            }
            None => y,
        };
        y.cast(dtype)
    }

    /// Gradient of the output (`Replicate`, or `Shard(0)` with
    /// `sequence_parallel`) → gradient of the input (placed like the
    /// forward's input); accumulates `dW`, `db`.
    pub fn backward(&mut self, dy: &DTensor) -> Result<DTensor> {
        const OP: &str = "RowParallelLinear::backward";
        let x = self
            .saved_input
            .take()
            .ok_or_else(|| Error::invalid(OP, "call forward before backward"))?;
        let want = [x.shape()[0], self.config.out_features];
        if dy.shape() != want {
            self.saved_input = Some(x);
            return Err(Error::shape(OP, want, dy.shape()));
        }
        if let Err(e) = check_grad_dtype(OP, dy, self.ring()) {
            self.saved_input = Some(x);
            return Err(e);
        }
        let w = &self.weight.value;
        let (dx, dw, db) = if self.ring() {
            let p = x.mesh().size();
            let mut dw: Vec<Option<LocalTensor>> = vec![None; p];
            // The ring form of the reduce-scatter's backward: dy's token
            // chunks gathered, each used as it arrives.
            let gathered = ring_all_gather_fused(dy, |r, c, dy_c| {
                let x_rc = token_chunk(&x.shards()[r], p, c)?;
                dw[r] = Some(kernels::gemm(
                    dy_c,
                    &x_rc,
                    GemmOptions {
                        trans_a: true,
                        accumulate: dw[r].as_ref(),
                        ..Default::default()
                    },
                )?);
                let dx_c = kernels::gemm_weight(dy_c, &w.shards()[r], GemmOptions::default())?;
                Ok((dx_c, dy_c.clone()))
            });
            let gathered = match gathered {
                Ok(g) => g,
                Err(e) => {
                    self.saved_input = Some(x);
                    return Err(e);
                }
            };
            let (dxs, dys): (Vec<Vec<_>>, Vec<Vec<_>>) = gathered
                .into_iter()
                .map(|row| row.into_iter().unzip())
                .unzip();
            let dw = dw.into_iter().map(Option::unwrap).collect();
            // db from the gathered dy in chunk order, so every rank holds the same bits.
            let db = match &self.bias {
                Some(_) => Some(
                    concat_token_chunks(&dys)?
                        .iter()
                        .map(kernels::sum_rows)
                        .collect::<Result<Vec<_>>>()?,
                ),
                None => None,
            };
            (concat_token_chunks(&dxs)?, dw, db)
        } else {
            let dy = if self.config.sequence_parallel {
                Mapping::ReduceScatterToParallel(0).backward(dy)?
            } else {
                Mapping::ReduceFromParallel.backward(dy)?
            };
            // Computed in the input's dtype; dW in f32, dx in the input's dtype.
            let dy = dy.cast(x.dtype())?;
            let dw = gemm_each(&dy, &x, (true, false), DType::F32)?;
            let db = match &self.bias {
                Some(_) => Some(sum_rows_each(&dy)?),
                None => None,
            };
            let w = &w.cast(x.dtype())?;
            (gemm_each(&dy, w, (false, false), x.dtype())?, dw, db)
        };
        accumulate_grads(&mut self.weight, self.bias.as_mut(), dw, db)?;
        let dx = x.with_shards(dx, x.shape().to_vec(), Placement::Shard(1));
        if self.config.input_is_parallel {
            Ok(dx)
        } else {
            Mapping::ScatterToParallel(1).backward(&dx)
        }
    }
}

linear_common!(RowParallelLinear, RowParallelConfig);
