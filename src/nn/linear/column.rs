//! [`ColumnParallelLinear`]: rank r holds rows `W_r` of `W` `[out, in]` (a
//! slice of the outputs) and `b_r`. Forward `y_r = f(x) W_rᵀ + b_r`, output
//! `Shard(1)` (or `Replicate` with `gather_output`); backward
//! `dW_r = dy_rᵀ x`, `db_r = Σ_rows dy_r`, `dx = f's backward(dy_r W_r)`.
//! f is [`Mapping::CopyToParallel`], or with sequence parallelism
//! [`Mapping::AllGatherToParallel(0)`](Mapping::AllGatherToParallel) (its
//! ring form with [`Overlap::Ring`]).
//!
//! Mixed precision: an f16 input makes the layer compute in f16 — the f32
//! master weight is cast per call, GEMMs accumulate in f32, `y` is f16; `dx`'s
//! partial sums are reduced in f32 and rounded once; `dW`, `db` stay f32.

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

/// Settings of a [`ColumnParallelLinear`].
#[derive(Clone, Debug)]
pub struct ColumnParallelConfig {
    /// Input features.
    pub in_features: usize,
    /// Output features (split over ranks).
    pub out_features: usize,
    /// Whether the layer has a bias.
    pub bias: bool,
    /// All-gather the output so every rank holds all `out_features`.
    pub gather_output: bool,
    /// Do not add the bias; the caller adds [`ColumnParallelLinear::bias`]
    /// (backward still accumulates its gradient as `Σ_rows dy`).
    pub skip_bias_add: bool,
    /// Weight initialiser (the bias starts at zero).
    pub init: Init,
    /// Fused-weight stride (e.g. 3 for QKV).
    pub stride: usize,
    /// Outputs are split over ranks in whole units of this many (e.g.
    /// `head_dim`, so each rank holds whole attention heads; the first ranks
    /// take one more unit and a rank may hold none). Default 1.
    pub shard_unit: usize,
    /// Sequence parallelism: the input `[tokens, in]` is `Shard(0)` (tokens
    /// split); forward all-gathers it, backward reduce-scatters dx (returned
    /// `Shard(0)`) instead of all-reducing it.
    pub sequence_parallel: bool,
    /// How the sequence-parallel gather / reduce-scatter runs (needs
    /// `sequence_parallel` for [`Overlap::Ring`]).
    pub overlap: Overlap,
}

impl ColumnParallelConfig {
    /// Defaults: bias on, no gather, bias added, N(0, 0.02²), stride 1, no
    /// sequence parallelism, no overlap.
    pub fn new(in_features: usize, out_features: usize) -> Self {
        ColumnParallelConfig {
            in_features,
            out_features,
            bias: true,
            gather_output: false,
            skip_bias_add: false,
            init: Init::default(),
            stride: 1,
            shard_unit: 1,
            sequence_parallel: false,
            overlap: Overlap::None,
        }
    }
}

/// What a column layer keeps for backward.
#[derive(Debug)]
enum SavedInput {
    /// The (gathered) input.
    Whole(DTensor),
    /// Ring path: `chunks[r][c]` is token chunk c as received by rank r.
    Chunks {
        chunks: Vec<Vec<LocalTensor>>,
        tokens: usize,
    },
}

impl SavedInput {
    fn tokens(&self) -> usize {
        match self {
            SavedInput::Whole(x) => x.shape()[0],
            SavedInput::Chunks { tokens, .. } => *tokens,
        }
    }
}

/// `Y = X Wᵀ + b` with `W` split along the output dimension.
#[derive(Debug, Params)]
pub struct ColumnParallelLinear {
    /// `[out, in]`, `Shard(0)`.
    pub weight: Parameter,
    /// `[out]`, `Shard(0)`.
    pub bias: Option<Parameter>,
    #[params(skip)]
    config: ColumnParallelConfig,
    #[params(skip)]
    saved_input: Option<SavedInput>,
}

impl ColumnParallelLinear {
    /// A layer holding the given master weight `[out, in]` and bias `[out]`.
    pub fn from_master(
        mesh: &Mesh,
        config: ColumnParallelConfig,
        weight: &[f32],
        bias: Option<&[f32]>,
    ) -> Result<Self> {
        const OP: &str = "ColumnParallelLinear::from_master";
        check_overlap(OP, config.sequence_parallel, config.overlap)?;
        let (n, stride, unit) = (config.out_features, config.stride, config.shard_unit);
        if config.gather_output && !split_is_plain(mesh, n, stride, unit) {
            return Err(Error::invalid(
                OP,
                "gather_output needs the outputs split plainly over ranks: shard_unit 1, and \
                 out_features a multiple of stride × ranks when stride > 1",
            ));
        }
        let (weight, bias) = shard_master(
            OP,
            mesh,
            [config.out_features, config.in_features],
            (weight, bias, config.bias),
            (Placement::Shard(0), Placement::Shard(0)),
            (config.stride, config.shard_unit),
        )?;
        Ok(ColumnParallelLinear {
            weight,
            bias,
            config,
            saved_input: None,
        })
    }

    /// `x` `[tokens, in]` replicated (`Shard(0)` with `sequence_parallel`)
    /// → `[tokens, out]`, `Shard(1)` (or `Replicate` with `gather_output`),
    /// in x's dtype (f32, or f16: see the module docs). Saves the (gathered)
    /// input for [`Self::backward`].
    pub fn forward(&mut self, x: &DTensor) -> Result<DTensor> {
        const OP: &str = "ColumnParallelLinear::forward";
        check_input(OP, x, self.config.in_features, self.ring())?;
        let bias = match (&self.bias, self.config.skip_bias_add) {
            (Some(b), false) => Some(&b.value),
            _ => None,
        };
        let w = &self.weight.value.cast(x.dtype())?;
        let opts = |r: usize| GemmOptions {
            trans_b: true,
            bias: bias.map(|b| &b.shards()[r]),
            ..Default::default()
        };
        let shape = vec![x.shape()[0], self.config.out_features];
        let (y, saved) = if self.ring() {
            // Each arriving token chunk is multiplied while the next travels.
            let done = ring_all_gather_fused(x, |r, _, chunk| {
                let y = kernels::gemm_weight(chunk, &w.shards()[r], opts(r))?;
                Ok((y, chunk.clone()))
            })?;
            let (ys, chunks): (Vec<Vec<_>>, Vec<Vec<_>>) =
                done.into_iter().map(|row| row.into_iter().unzip()).unzip();
            let saved = SavedInput::Chunks {
                chunks,
                tokens: x.shape()[0],
            };
            (concat_token_chunks(&ys)?, saved)
        } else {
            let x = if self.config.sequence_parallel {
                Mapping::AllGatherToParallel(0).forward(x)?
            } else {
                Mapping::CopyToParallel.forward(x)?
            };
            let y = (0..x.mesh().size())
                .map(|r| kernels::gemm_weight(&x.shards()[r], &w.shards()[r], opts(r)))
                .collect::<Result<Vec<_>>>()?;
            (y, SavedInput::Whole(x))
        };
        // The outputs are split like the weight's rows (whole units).
        let y = w.with_shards_in_units(y, shape, Placement::Shard(1), w.shard_unit());
        self.saved_input = Some(saved);
        if self.config.gather_output {
            Mapping::GatherFromParallel(1).forward(&y)
        } else {
            Ok(y)
        }
    }

    /// Gradient of the output (placed as the forward's output) → gradient of
    /// the input (`Replicate`, or `Shard(0)` with `sequence_parallel`);
    /// accumulates `dW`, `db`.
    pub fn backward(&mut self, dy: &DTensor) -> Result<DTensor> {
        const OP: &str = "ColumnParallelLinear::backward";
        let saved = self
            .saved_input
            .take()
            .ok_or_else(|| Error::invalid(OP, "call forward before backward"))?;
        let tokens = saved.tokens();
        let want = [tokens, self.config.out_features];
        if dy.shape() != want {
            self.saved_input = Some(saved);
            return Err(Error::shape(OP, want, dy.shape()));
        }
        if let Err(e) = check_grad_dtype(OP, dy, self.ring()) {
            self.saved_input = Some(saved);
            return Err(e);
        }
        let dy = if self.config.gather_output {
            Mapping::GatherFromParallel(1).backward(dy)?
        } else {
            dy.clone()
        };
        // Computed in the input's dtype (the ring's chunks are f32).
        let dtype = match &saved {
            SavedInput::Whole(x) => x.dtype(),
            SavedInput::Chunks { .. } => DType::F32,
        };
        let dy = dy.cast(dtype)?;
        let w = &self.weight.value;
        let x_shape = [tokens, self.config.in_features];
        let (dx, dw) = match &saved {
            SavedInput::Whole(x) => {
                // dW and dx's partials in f32.
                let w = &w.cast(x.dtype())?;
                let dw = gemm_each(&dy, x, (true, false), DType::F32)?;
                let dx = gemm_each(&dy, w, (false, false), DType::F32)?;
                let dx = x.with_shards(dx, x_shape.to_vec(), Placement::Partial(ReduceOp::Sum));
                let dx = if self.config.sequence_parallel {
                    Mapping::AllGatherToParallel(0).backward(&dx)?
                } else {
                    Mapping::CopyToParallel.backward(&dx)?
                };
                (dx.cast(x.dtype())?, dw)
            }
            SavedInput::Chunks { chunks, .. } => {
                let p = w.mesh().size();
                let mut dw: Vec<Option<LocalTensor>> = vec![None; p];
                // The ring form of the gather's backward: per-chunk partials
                // of dx, reduce-scattered along tokens; dW accumulates per chunk.
                let dx = ring_reduce_scatter_fused(w.mesh(), &x_shape, |r, c| {
                    let dy_rc = token_chunk(&dy.shards()[r], p, c)?;
                    dw[r] = Some(kernels::gemm(
                        &dy_rc,
                        &chunks[r][c],
                        GemmOptions {
                            trans_a: true,
                            accumulate: dw[r].as_ref(),
                            ..Default::default()
                        },
                    )?);
                    kernels::gemm_weight(&dy_rc, &w.shards()[r], GemmOptions::default())
                })?;
                let dw = dw.into_iter().map(Option::unwrap).collect();
                (dx, dw)
            }
        };
        let db = match &self.bias {
            Some(_) => Some(sum_rows_each(&dy)?),
            None => None,
        };
        accumulate_grads(&mut self.weight, self.bias.as_mut(), dw, db)?;
        Ok(dx)
    }
}

linear_common!(ColumnParallelLinear, ColumnParallelConfig);
