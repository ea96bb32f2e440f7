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
//! point-to-point ring steps, each step's transfer started before the GEMM
//! on the chunk already present is recorded (xlstm-jax's `TPAsyncDense`):
//! the tensor layer's ring mappings
//! ([`ring_all_gather_fused`](crate::tensor::ring_all_gather_fused),
//! [`ring_reduce_scatter_fused`](crate::tensor::ring_reduce_scatter_fused)).
//! Layers compose mappings only and never call a collective. Inputs are 2-D
//! `[tokens, features]`.
//!
//! Files: `column.rs` and `row.rs` (each layer with its config), `shared.rs`
//! (what both share: [`Overlap`], master-weight sharding, per-rank GEMMs,
//! gradient accumulation, the accessors both layers have).

mod column;
mod row;
mod shared;

pub use column::{ColumnParallelConfig, ColumnParallelLinear};
pub use row::{RowParallelConfig, RowParallelLinear};
pub use shared::Overlap;
