//! Column- and row-parallel linear layers (`y = x Wᵀ + b`, `W` is `[out, in]`).
//!
//! - [`ColumnParallelLinear`]: rank r holds rows `W_r` (a slice of `out`) and
//!   `b_r`; `y_r = f(x) W_rᵀ + b_r`, output `Shard(1)` or, with
//!   `gather_output`, `Replicate`. Backward: `dW_r = dy_rᵀ x`,
//!   `db_r = Σ_rows dy_r`, `dx = all-reduce(dy_r W_r)` (f's backward).
//! - [`RowParallelLinear`]: rank r holds columns `W_r` (a slice of `in`), the
//!   bias is replicated; `y = g(x_r W_rᵀ) + b` (bias added once, after the
//!   reduce). Backward: `dW_r = dyᵀ x_r`, `db = Σ_rows dy`, `dx_r = dy W_r`.
//!
//! Sequence parallelism (Megatron's `sequence_parallel`, a config flag on
//! both layers): activations outside the tensor-parallel pair are split along
//! tokens (`Shard(0)`). The column layer's f becomes
//! [`Mapping::AllGatherToParallel(0)`](Mapping::AllGatherToParallel)
//! (forward all-gather of the tokens, backward reduce-scatter of dx) and the
//! row layer's g becomes
//! [`Mapping::ReduceScatterToParallel(0)`](Mapping::ReduceScatterToParallel)
//! (forward reduce-scatter, bias added to each rank's rows, backward
//! all-gather of dy).
//!
//! With [`Overlap::Ring`] those gathers and reduce-scatters run as `P − 1`
//! point-to-point ring steps ([`crate::comm::RingShift`]), each step's
//! transfer started before the GEMM on the chunk already present is recorded
//! (xlstm-jax's `TPAsyncDense`). This ring path is the one place a layer
//! drives communication itself rather than through a [`Mapping`]; the
//! default paths compose [`Mapping`]s only. Inputs are 2-D
//! `[tokens, features]`.

use super::init::{Init, InitRng};
use super::parameter::{Module, Parameter};
use crate::comm::RingShift;
use crate::device::Mesh;
use crate::error::{Error, Result};
use crate::kernels::{self, GemmOptions};
use crate::shard::split_range;
use crate::tensor::{DTensor, Mapping, Placement};
use crate::{LocalTensor, ReduceOp};

/// How a sequence-parallel layer runs its token all-gather / reduce-scatter.
///
/// Only meaningful with `sequence_parallel`; a layer built with
/// [`Overlap::Ring`] but without it is a construction error.
///
/// Honest expectations: on one controller "overlap" means the layer starts
/// step s's transfer, records every rank's GEMM for step s, then completes
/// the transfer. With separate real GPUs and the host-staged transport the
/// device → host → device copies then run while the GEMMs execute. On CPU
/// adapters (lavapipe, llvmpipe) the devices are the host's own cores, and
/// each ring step costs a device round-trip, so the ring is slower than one
/// collective; on a shared-device mesh a ring step moves no bytes (the next
/// rank gets the same buffer), so there is nothing to overlap and the ring
/// only costs its extra, smaller dispatches. `benches/overlap.rs` measures it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Overlap {
    /// One collective per gather / reduce-scatter (the default).
    #[default]
    None,
    /// `P − 1` ring steps ([`crate::Collective::SendRecv`]), each overlapped
    /// with the GEMM on the chunk already present; no all-gather or
    /// reduce-scatter collective is issued.
    Ring,
}

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
            sequence_parallel: false,
            overlap: Overlap::None,
        }
    }
}

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
            sequence_parallel: false,
            overlap: Overlap::None,
        }
    }
}

fn check_input(op: &'static str, x: &DTensor, features: usize) -> Result<()> {
    if x.shape().len() != 2 || x.shape()[1] != features {
        return Err(Error::shape(op, format!("[tokens, {features}]"), x.shape()));
    }
    Ok(())
}

fn check_master(op: &'static str, what: &str, got: usize, want: usize) -> Result<()> {
    if got != want {
        return Err(Error::invalid(
            op,
            format!("{what} has {got} values, expected {want}"),
        ));
    }
    Ok(())
}

/// Per rank: `gemm(a_r, b_r, opts)`.
/// Check a master weight `[out, in]` and optional bias `[out]` and shard them:
/// the weight with `stride`, a sharded bias likewise, a replicated bias whole.
fn shard_master(
    op: &'static str,
    mesh: &Mesh,
    [out, inp]: [usize; 2],
    (weight, bias, want_bias): (&[f32], Option<&[f32]>, bool),
    (weight_placement, bias_placement): (Placement, Placement),
    stride: usize,
) -> Result<(Parameter, Option<Parameter>)> {
    check_master(op, "weight", weight.len(), out * inp)?;
    if bias.is_some() != want_bias {
        return Err(Error::invalid(
            op,
            "give a bias exactly when config.bias is true",
        ));
    }
    if let Some(b) = bias {
        check_master(op, "bias", b.len(), out)?;
    }
    let weight = Parameter::from_master(mesh, &[out, inp], weight, weight_placement, stride)?;
    let bias_stride = if bias_placement == Placement::Replicate {
        1
    } else {
        stride
    };
    let bias = bias
        .map(|b| Parameter::from_master(mesh, &[out], b, bias_placement, bias_stride))
        .transpose()?;
    Ok((weight, bias))
}

/// What both linear layers share: `new`, master accessors and their parameter list.
macro_rules! linear_common {
    ($ty:ident, $cfg:ident) => {
        impl $ty {
            /// A layer initialised from `rng` (master drawn on the host, then
            /// sliced; the bias starts at zero).
            pub fn new(mesh: &Mesh, config: $cfg, rng: &mut InitRng) -> Result<Self> {
                let w = config
                    .init
                    .sample(rng, config.out_features, config.in_features);
                let b = config.bias.then(|| vec![0.0; config.out_features]);
                Self::from_master(mesh, config, &w, b.as_deref())
            }

            /// The full weight `[out, in]` on the host.
            pub fn master_weight(&self) -> Result<Vec<f32>> {
                self.weight.master()
            }

            /// The full bias `[out]` on the host.
            pub fn master_bias(&self) -> Result<Option<Vec<f32>>> {
                self.bias.as_ref().map(Parameter::master).transpose()
            }
        }

        impl Module for $ty {
            fn named_parameters(&self) -> Vec<(String, &Parameter)> {
                let mut v = vec![("weight".to_string(), &self.weight)];
                v.extend(self.bias.iter().map(|b| ("bias".to_string(), b)));
                v
            }

            fn named_parameters_mut(&mut self) -> Vec<(String, &mut Parameter)> {
                let mut v = vec![("weight".to_string(), &mut self.weight)];
                v.extend(self.bias.iter_mut().map(|b| ("bias".to_string(), b)));
                v
            }
        }
    };
}

fn gemm_each(
    a: &DTensor,
    b: &DTensor,
    trans_a: bool,
    trans_b: bool,
) -> Result<Vec<crate::LocalTensor>> {
    a.shards()
        .iter()
        .zip(b.shards())
        .map(|(x, y)| {
            kernels::gemm(
                x,
                y,
                GemmOptions {
                    trans_a,
                    trans_b,
                    ..Default::default()
                },
            )
        })
        .collect()
}

/// Per rank: `x_r + b_r` broadcast over rows, via a gemm-free add of the bias row.
fn add_bias_each(y: &DTensor, b: &DTensor) -> Result<Vec<crate::LocalTensor>> {
    y.shards()
        .iter()
        .zip(b.shards())
        .map(|(y, b)| kernels::add_row(y, b))
        .collect()
}

/// Gradients of `y = x Wᵀ (+b)` per rank: (dW, db).
fn weight_grads(
    dy: &DTensor,
    x: &DTensor,
    with_bias: bool,
) -> Result<(Vec<crate::LocalTensor>, Option<Vec<crate::LocalTensor>>)> {
    let dw = gemm_each(dy, x, true, false)?;
    let db = if with_bias {
        Some(
            dy.shards()
                .iter()
                .map(kernels::sum_rows)
                .collect::<Result<Vec<_>>>()?,
        )
    } else {
        None
    };
    Ok((dw, db))
}

/// `Overlap::Ring` only makes sense on the sequence-parallel gather / reduce-scatter.
fn check_overlap(op: &'static str, sequence_parallel: bool, overlap: Overlap) -> Result<()> {
    if overlap == Overlap::Ring && !sequence_parallel {
        return Err(Error::invalid(
            op,
            "overlap: Overlap::Ring needs sequence_parallel = true (the ring runs the \
             sequence-parallel gather / reduce-scatter)",
        ));
    }
    Ok(())
}

/// A ring path's activation must be split along tokens.
fn expect_tokens_split(op: &'static str, x: &DTensor) -> Result<()> {
    if x.mesh().size() > 1 && x.placement() != Placement::Shard(0) {
        return Err(Error::invalid(
            op,
            format!(
                "with sequence_parallel the tensor must be placed Shard(0) (tokens split), got {:?}",
                x.placement()
            ),
        ));
    }
    Ok(())
}

/// Token range of every chunk (the uneven-split rule), in chunk order.
fn token_ranges(tokens: usize, p: usize) -> Vec<std::ops::Range<usize>> {
    (0..p).map(|c| split_range(tokens, p, c)).collect()
}

/// Rows `range` of a 2-D tensor (the tensor itself when that is all of it).
fn rows(t: &LocalTensor, range: std::ops::Range<usize>) -> Result<LocalTensor> {
    if range.start == 0 && range.len() == t.shape()[0] {
        return Ok(t.clone());
    }
    kernels::narrow(t, 0, range.start, range.len())
}

/// Per rank, the chunks in chunk order joined along rows.
fn concat_rows(chunks: Vec<Vec<Option<LocalTensor>>>) -> Result<Vec<LocalTensor>> {
    chunks
        .into_iter()
        .map(|row| {
            let parts: Vec<LocalTensor> = row
                .into_iter()
                .map(|c| c.expect("the ring visits every chunk on every rank"))
                .collect();
            if parts.len() == 1 {
                return Ok(parts[0].clone());
            }
            kernels::concat(&parts.iter().collect::<Vec<_>>(), 0)
        })
        .collect()
}

/// Ring all-gather of token chunks overlapped with compute: rank r starts
/// with chunk r (`shards[r]`); at step s it holds chunk `(r − s) mod P`, and
/// `visit(r, chunk_index, chunk)` records that step's work after the step's
/// transfer has started. `P − 1` [`RingShift`]s in all.
fn ring_gather(
    shards: &[LocalTensor],
    mesh: &Mesh,
    mut visit: impl FnMut(usize, usize, &LocalTensor) -> Result<()>,
) -> Result<()> {
    let p = shards.len();
    let mut cur = shards.to_vec();
    for s in 0..p {
        let shift = if s + 1 < p {
            Some(RingShift::start(mesh, &cur)?)
        } else {
            None
        };
        for (r, chunk) in cur.iter().enumerate() {
            visit(r, (r + p - s) % p, chunk)?;
        }
        if let Some(shift) = shift {
            cur = shift.finish()?;
        }
    }
    Ok(())
}

/// Ring reduce-scatter of token chunks overlapped with compute:
/// `partial(r, c)` records rank r's partial product for chunk c. At step s
/// rank r computes the partial for chunk `(r − 1 − s) mod P` while the
/// running sum from step s − 1 travels one hop, then adds it; after `P − 1`
/// [`RingShift`]s rank r holds the full sum of chunk r.
fn ring_reduce_scatter(
    p: usize,
    mesh: &Mesh,
    mut partial: impl FnMut(usize, usize) -> Result<LocalTensor>,
) -> Result<Vec<LocalTensor>> {
    let mut acc = (0..p)
        .map(|r| partial(r, (r + p - 1) % p))
        .collect::<Result<Vec<_>>>()?;
    for s in 1..p {
        let shift = RingShift::start(mesh, &acc)?;
        let parts = (0..p)
            .map(|r| partial(r, (r + 2 * p - 1 - s) % p))
            .collect::<Result<Vec<_>>>()?;
        let incoming = shift.finish()?;
        acc = parts
            .iter()
            .zip(&incoming)
            .map(|(a, b)| kernels::add(a, b))
            .collect::<Result<Vec<_>>>()?;
    }
    Ok(acc)
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
#[derive(Debug)]
pub struct ColumnParallelLinear {
    /// `[out, in]`, `Shard(0)`.
    pub weight: Parameter,
    /// `[out]`, `Shard(0)`.
    pub bias: Option<Parameter>,
    config: ColumnParallelConfig,
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
        let (weight, bias) = shard_master(
            OP,
            mesh,
            [config.out_features, config.in_features],
            (weight, bias, config.bias),
            (Placement::Shard(0), Placement::Shard(0)),
            config.stride,
        )?;
        Ok(ColumnParallelLinear {
            weight,
            bias,
            config,
            saved_input: None,
        })
    }

    /// The settings.
    pub fn config(&self) -> &ColumnParallelConfig {
        &self.config
    }

    /// `x` `[tokens, in]` replicated (`Shard(0)` with `sequence_parallel`)
    /// → `[tokens, out]`, `Shard(1)` (or `Replicate` with `gather_output`).
    /// Saves the (gathered) input for [`Self::backward`].
    pub fn forward(&mut self, x: &DTensor) -> Result<DTensor> {
        const OP: &str = "ColumnParallelLinear::forward";
        check_input(OP, x, self.config.in_features)?;
        let sp = self.config.sequence_parallel;
        let bias = match (&self.bias, self.config.skip_bias_add) {
            (Some(b), false) => Some(&b.value),
            _ => None,
        };
        let w = &self.weight.value;
        let opts = |r: usize| GemmOptions {
            trans_b: true,
            bias: bias.map(|b| &b.shards()[r]),
            ..Default::default()
        };
        let shape = vec![x.shape()[0], self.config.out_features];
        let (y, saved) = if sp && self.config.overlap == Overlap::Ring {
            expect_tokens_split(OP, x)?;
            let p = x.mesh().size();
            let mut ys = vec![vec![None; p]; p];
            let mut xs = vec![vec![None; p]; p];
            ring_gather(x.shards(), x.mesh(), |r, c, chunk| {
                ys[r][c] = Some(kernels::gemm(chunk, &w.shards()[r], opts(r))?);
                xs[r][c] = Some(chunk.clone());
                Ok(())
            })?;
            let chunks = xs
                .into_iter()
                .map(|row| row.into_iter().map(Option::unwrap).collect())
                .collect();
            let saved = SavedInput::Chunks {
                chunks,
                tokens: x.shape()[0],
            };
            (concat_rows(ys)?, saved)
        } else {
            let x = if sp {
                Mapping::AllGatherToParallel(0).forward(x)?
            } else {
                Mapping::CopyToParallel.forward(x)?
            };
            let y = (0..x.mesh().size())
                .map(|r| kernels::gemm(&x.shards()[r], &w.shards()[r], opts(r)))
                .collect::<Result<Vec<_>>>()?;
            (y, SavedInput::Whole(x))
        };
        let y = w.with_shards(y, shape, Placement::Shard(1));
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
        let dy = if self.config.gather_output {
            Mapping::GatherFromParallel(1).backward(dy)?
        } else {
            dy.clone()
        };
        let w = &self.weight.value;
        let x_shape = vec![tokens, self.config.in_features];
        let (dx, dw) = match &saved {
            SavedInput::Whole(x) => {
                let (dw, _) = weight_grads(&dy, x, false)?;
                let dx = gemm_each(&dy, w, false, false)?;
                let dx = x.with_shards(dx, x_shape, Placement::Partial(ReduceOp::Sum));
                let dx = if self.config.sequence_parallel {
                    Mapping::AllGatherToParallel(0).backward(&dx)?
                } else {
                    Mapping::CopyToParallel.backward(&dx)?
                };
                (dx, dw)
            }
            SavedInput::Chunks { chunks, .. } => {
                let p = w.mesh().size();
                let ranges = token_ranges(tokens, p);
                let mut dw: Vec<Option<LocalTensor>> = vec![None; p];
                let dx = ring_reduce_scatter(p, w.mesh(), |r, c| {
                    let dy_rc = rows(&dy.shards()[r], ranges[c].clone())?;
                    let g = kernels::gemm(
                        &dy_rc,
                        &chunks[r][c],
                        GemmOptions {
                            trans_a: true,
                            accumulate: dw[r].as_ref(),
                            ..Default::default()
                        },
                    )?;
                    dw[r] = Some(g);
                    kernels::gemm(&dy_rc, &w.shards()[r], GemmOptions::default())
                })?;
                let dw = dw.into_iter().map(Option::unwrap).collect();
                (w.with_shards(dx, x_shape, Placement::Shard(0)), dw)
            }
        };
        let db = match &self.bias {
            Some(_) => Some(
                dy.shards()
                    .iter()
                    .map(kernels::sum_rows)
                    .collect::<Result<Vec<_>>>()?,
            ),
            None => None,
        };
        self.weight
            .accumulate_grad(w.with_shards(dw, w.shape().to_vec(), w.placement()))?;
        if let (Some(b), Some(db)) = (&mut self.bias, db) {
            let v = &b.value;
            let g = v.with_shards(db, v.shape().to_vec(), v.placement());
            b.accumulate_grad(g)?;
        }
        Ok(dx)
    }
}

linear_common!(ColumnParallelLinear, ColumnParallelConfig);

/// `Y = X Wᵀ + b` with `W` split along the input dimension.
#[derive(Debug)]
pub struct RowParallelLinear {
    /// `[out, in]`, `Shard(1)`.
    pub weight: Parameter,
    /// `[out]`, `Replicate`.
    pub bias: Option<Parameter>,
    config: RowParallelConfig,
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
            config.stride,
        )?;
        Ok(RowParallelLinear {
            weight,
            bias,
            config,
            saved_input: None,
        })
    }

    /// The settings.
    pub fn config(&self) -> &RowParallelConfig {
        &self.config
    }

    /// `x` `[tokens, in]` (`Shard(1)` if `input_is_parallel`, else
    /// `Replicate`) → `[tokens, out]`, `Replicate` (`Shard(0)`, tokens split,
    /// with `sequence_parallel`).
    pub fn forward(&mut self, x: &DTensor) -> Result<DTensor> {
        const OP: &str = "RowParallelLinear::forward";
        check_input(OP, x, self.config.in_features)?;
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
        let w = &self.weight.value;
        let shape = vec![x.shape()[0], self.config.out_features];
        let y = if self.config.sequence_parallel && self.config.overlap == Overlap::Ring {
            let p = x.mesh().size();
            let ranges = token_ranges(x.shape()[0], p);
            let y = ring_reduce_scatter(p, x.mesh(), |r, c| {
                let x_rc = rows(&x.shards()[r], ranges[c].clone())?;
                kernels::gemm(
                    &x_rc,
                    &w.shards()[r],
                    GemmOptions {
                        trans_b: true,
                        ..Default::default()
                    },
                )
            })?;
            x.with_shards(y, shape, Placement::Shard(0))
        } else {
            let z = gemm_each(&x, w, false, true)?;
            let z = x.with_shards(z, shape, Placement::Partial(ReduceOp::Sum));
            if self.config.sequence_parallel {
                Mapping::ReduceScatterToParallel(0).forward(&z)?
            } else {
                Mapping::ReduceFromParallel.forward(&z)?
            }
        };
        self.saved_input = Some(x);
        match &self.bias {
            Some(b) => {
                // Replicated bias, added once after the reduce (to each rank's rows with SP).
                let shards = add_bias_each(&y, &b.value)?;
                Ok(y.with_shards(shards, y.shape().to_vec(), y.placement()))
            }
            None => Ok(y),
        }
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
        let w = &self.weight.value;
        let (dx, dw, db) = if self.config.sequence_parallel && self.config.overlap == Overlap::Ring
        {
            if let Err(e) = expect_tokens_split(OP, dy) {
                self.saved_input = Some(x);
                return Err(e);
            }
            let p = x.mesh().size();
            let ranges = token_ranges(x.shape()[0], p);
            let mut dxs = vec![vec![None; p]; p];
            let mut dys = vec![vec![None; p]; p];
            let mut dw: Vec<Option<LocalTensor>> = vec![None; p];
            ring_gather(dy.shards(), x.mesh(), |r, c, dy_c| {
                let x_rc = rows(&x.shards()[r], ranges[c].clone())?;
                let g = kernels::gemm(
                    dy_c,
                    &x_rc,
                    GemmOptions {
                        trans_a: true,
                        accumulate: dw[r].as_ref(),
                        ..Default::default()
                    },
                )?;
                dw[r] = Some(g);
                dxs[r][c] = Some(kernels::gemm(dy_c, &w.shards()[r], GemmOptions::default())?);
                dys[r][c] = Some(dy_c.clone());
                Ok(())
            })?;
            let dw = dw.into_iter().map(Option::unwrap).collect();
            // db from the gathered dy in chunk order, so every rank holds the same bits.
            let db = match &self.bias {
                Some(_) => Some(
                    concat_rows(dys)?
                        .iter()
                        .map(kernels::sum_rows)
                        .collect::<Result<Vec<_>>>()?,
                ),
                None => None,
            };
            (concat_rows(dxs)?, dw, db)
        } else {
            let dy = if self.config.sequence_parallel {
                Mapping::ReduceScatterToParallel(0).backward(dy)?
            } else {
                Mapping::ReduceFromParallel.backward(dy)?
            };
            let (dw, db) = weight_grads(&dy, &x, self.bias.is_some())?;
            (gemm_each(&dy, w, false, false)?, dw, db)
        };
        self.weight
            .accumulate_grad(w.with_shards(dw, w.shape().to_vec(), w.placement()))?;
        if let (Some(b), Some(db)) = (&mut self.bias, db) {
            let v = &b.value;
            let g = v.with_shards(db, v.shape().to_vec(), v.placement());
            b.accumulate_grad(g)?;
        }
        let dx = x.with_shards(dx, x.shape().to_vec(), Placement::Shard(1));
        if self.config.input_is_parallel {
            Ok(dx)
        } else {
            Mapping::ScatterToParallel(1).backward(&dx)
        }
    }
}

linear_common!(RowParallelLinear, RowParallelConfig);
