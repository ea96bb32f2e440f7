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
//! Layers compose [`Mapping`]s and never call a collective themselves.
//! Inputs are 2-D `[tokens, features]`.

use super::init::{Init, InitRng};
use super::parameter::{Module, Parameter};
use crate::device::Mesh;
use crate::error::{Error, Result};
use crate::kernels::{self, GemmOptions};
use crate::tensor::{DTensor, Mapping, Placement};

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
}

impl ColumnParallelConfig {
    /// Defaults: bias on, no gather, bias added, N(0, 0.02²), stride 1.
    pub fn new(in_features: usize, out_features: usize) -> Self {
        ColumnParallelConfig {
            in_features,
            out_features,
            bias: true,
            gather_output: false,
            skip_bias_add: false,
            init: Init::default(),
            stride: 1,
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
}

impl RowParallelConfig {
    /// Defaults: bias on, input parallel, N(0, 0.02²), stride 1.
    pub fn new(in_features: usize, out_features: usize) -> Self {
        RowParallelConfig {
            in_features,
            out_features,
            bias: true,
            input_is_parallel: true,
            init: Init::default(),
            stride: 1,
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

/// `Y = X Wᵀ + b` with `W` split along the output dimension.
#[derive(Debug)]
pub struct ColumnParallelLinear {
    /// `[out, in]`, `Shard(0)`.
    pub weight: Parameter,
    /// `[out]`, `Shard(0)`.
    pub bias: Option<Parameter>,
    config: ColumnParallelConfig,
    saved_input: Option<DTensor>,
}

impl ColumnParallelLinear {
    /// A layer initialised from `rng` (master drawn on the host, then sliced).
    pub fn new(mesh: &Mesh, config: ColumnParallelConfig, rng: &mut InitRng) -> Result<Self> {
        let w = config
            .init
            .sample(rng, config.out_features, config.in_features);
        let b = config.bias.then(|| vec![0.0; config.out_features]);
        Self::from_master(mesh, config, &w, b.as_deref())
    }

    /// A layer holding the given master weight `[out, in]` and bias `[out]`.
    pub fn from_master(
        mesh: &Mesh,
        config: ColumnParallelConfig,
        weight: &[f32],
        bias: Option<&[f32]>,
    ) -> Result<Self> {
        const OP: &str = "ColumnParallelLinear::from_master";
        check_master(
            OP,
            "weight",
            weight.len(),
            config.out_features * config.in_features,
        )?;
        if bias.is_some() != config.bias {
            return Err(Error::invalid(
                OP,
                "give a bias exactly when config.bias is true",
            ));
        }
        let weight = Parameter::from_master(
            mesh,
            &[config.out_features, config.in_features],
            weight,
            Placement::Shard(0),
            config.stride,
        )?;
        let bias = match bias {
            Some(b) => {
                check_master(OP, "bias", b.len(), config.out_features)?;
                Some(Parameter::from_master(
                    mesh,
                    &[config.out_features],
                    b,
                    Placement::Shard(0),
                    config.stride,
                )?)
            }
            None => None,
        };
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

    /// `x` `[tokens, in]` replicated → `[tokens, out]`, `Shard(1)` (or
    /// `Replicate` with `gather_output`). Saves `x` for [`Self::backward`].
    pub fn forward(&mut self, x: &DTensor) -> Result<DTensor> {
        const OP: &str = "ColumnParallelLinear::forward";
        check_input(OP, x, self.config.in_features)?;
        let x = Mapping::CopyToParallel.forward(x)?;
        let bias = match (&self.bias, self.config.skip_bias_add) {
            (Some(b), false) => Some(&b.value),
            _ => None,
        };
        let y = (0..x.mesh().size())
            .map(|r| {
                kernels::gemm(
                    &x.shards()[r],
                    &self.weight.value.shards()[r],
                    GemmOptions {
                        trans_b: true,
                        bias: bias.map(|b| &b.shards()[r]),
                        ..Default::default()
                    },
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let shape = vec![x.shape()[0], self.config.out_features];
        let y = x.with_shards(y, shape, Placement::Shard(1));
        self.saved_input = Some(x);
        if self.config.gather_output {
            Mapping::GatherFromParallel(1).forward(&y)
        } else {
            Ok(y)
        }
    }

    /// Gradient of the output (placed as the forward's output) → gradient of
    /// the input (`Replicate`); accumulates `dW`, `db`.
    pub fn backward(&mut self, dy: &DTensor) -> Result<DTensor> {
        const OP: &str = "ColumnParallelLinear::backward";
        let x = self
            .saved_input
            .take()
            .ok_or_else(|| Error::invalid(OP, "call forward before backward"))?;
        let want = [x.shape()[0], self.config.out_features];
        if dy.shape() != want {
            self.saved_input = Some(x);
            return Err(Error::shape(OP, want, dy.shape()));
        }
        let dy = if self.config.gather_output {
            Mapping::GatherFromParallel(1).backward(dy)?
        } else {
            dy.clone()
        };
        let (dw, db) = weight_grads(&dy, &x, self.bias.is_some())?;
        let dx = gemm_each(&dy, &self.weight.value, false, false)?;
        let w = &self.weight.value;
        self.weight
            .accumulate_grad(w.with_shards(dw, w.shape().to_vec(), w.placement()))?;
        if let (Some(b), Some(db)) = (&mut self.bias, db) {
            let v = &b.value;
            let g = v.with_shards(db, v.shape().to_vec(), v.placement());
            b.accumulate_grad(g)?;
        }
        let dx = x.with_shards(
            dx,
            x.shape().to_vec(),
            Placement::Partial(crate::ReduceOp::Sum),
        );
        Mapping::CopyToParallel.backward(&dx)
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

impl Module for ColumnParallelLinear {
    fn named_parameters(&self) -> Vec<(String, &Parameter)> {
        let mut v = vec![("weight".to_string(), &self.weight)];
        if let Some(b) = &self.bias {
            v.push(("bias".to_string(), b));
        }
        v
    }

    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Parameter)> {
        let mut v = vec![("weight".to_string(), &mut self.weight)];
        if let Some(b) = &mut self.bias {
            v.push(("bias".to_string(), b));
        }
        v
    }
}

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
    /// A layer initialised from `rng` (master drawn on the host, then sliced).
    pub fn new(mesh: &Mesh, config: RowParallelConfig, rng: &mut InitRng) -> Result<Self> {
        let w = config
            .init
            .sample(rng, config.out_features, config.in_features);
        let b = config.bias.then(|| vec![0.0; config.out_features]);
        Self::from_master(mesh, config, &w, b.as_deref())
    }

    /// A layer holding the given master weight `[out, in]` and bias `[out]`.
    pub fn from_master(
        mesh: &Mesh,
        config: RowParallelConfig,
        weight: &[f32],
        bias: Option<&[f32]>,
    ) -> Result<Self> {
        const OP: &str = "RowParallelLinear::from_master";
        check_master(
            OP,
            "weight",
            weight.len(),
            config.out_features * config.in_features,
        )?;
        if bias.is_some() != config.bias {
            return Err(Error::invalid(
                OP,
                "give a bias exactly when config.bias is true",
            ));
        }
        let weight = Parameter::from_master(
            mesh,
            &[config.out_features, config.in_features],
            weight,
            Placement::Shard(1),
            config.stride,
        )?;
        let bias = match bias {
            Some(b) => {
                check_master(OP, "bias", b.len(), config.out_features)?;
                Some(Parameter::from_master(
                    mesh,
                    &[config.out_features],
                    b,
                    Placement::Replicate,
                    1,
                )?)
            }
            None => None,
        };
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
    /// `Replicate`) → `[tokens, out]`, `Replicate`.
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
        let z = gemm_each(&x, &self.weight.value, false, true)?;
        let shape = vec![x.shape()[0], self.config.out_features];
        let z = x.with_shards(z, shape, Placement::Partial(crate::ReduceOp::Sum));
        self.saved_input = Some(x);
        let y = Mapping::ReduceFromParallel.forward(&z)?;
        match &self.bias {
            Some(b) => {
                let shards = add_bias_each(&y, &b.value)?;
                Ok(y.with_shards(shards, y.shape().to_vec(), Placement::Replicate))
            }
            None => Ok(y),
        }
    }

    /// Gradient of the output (`Replicate`) → gradient of the input (placed
    /// like the forward's input); accumulates `dW`, `db`.
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
        let dy = Mapping::ReduceFromParallel.backward(dy)?;
        let (dw, db) = weight_grads(&dy, &x, self.bias.is_some())?;
        let dx = gemm_each(&dy, &self.weight.value, false, false)?;
        let w = &self.weight.value;
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

    /// The full weight `[out, in]` on the host.
    pub fn master_weight(&self) -> Result<Vec<f32>> {
        self.weight.master()
    }

    /// The full bias `[out]` on the host.
    pub fn master_bias(&self) -> Result<Option<Vec<f32>>> {
        self.bias.as_ref().map(Parameter::master).transpose()
    }
}

impl Module for RowParallelLinear {
    fn named_parameters(&self) -> Vec<(String, &Parameter)> {
        let mut v = vec![("weight".to_string(), &self.weight)];
        if let Some(b) = &self.bias {
            v.push(("bias".to_string(), b));
        }
        v
    }

    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Parameter)> {
        let mut v = vec![("weight".to_string(), &mut self.weight)];
        if let Some(b) = &mut self.bias {
            v.push(("bias".to_string(), b));
        }
        v
    }
}
