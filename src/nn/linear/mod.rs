//! Column- and row-parallel linear layers (`y = x Wᵀ + b`, `W` is `[out, in]`),
//! written as forward code on [`DTensor`](crate::tensor::DTensor) operations;
//! backward is the tape's (each operation's VJP is the layer's old backward).
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
//! [`Mapping::AllGatherToParallel(0)`](crate::tensor::Mapping::AllGatherToParallel)
//! (forward all-gather of the tokens, backward reduce-scatter of dx) and the
//! row layer's g a reduce-scatter along tokens with the bias added to each
//! rank's rows
//! ([`DTensor::reduce_scatter_add_row`](crate::tensor::DTensor::reduce_scatter_add_row);
//! backward all-gathers dy, and the bias gradient comes from it).
//!
//! With [`Overlap::Ring`] those gathers and reduce-scatters run as `P − 1`
//! point-to-point ring steps, each step's transfer started before the GEMM
//! on the chunk already present is recorded (xlstm-jax's `TPAsyncDense`):
//! the tensor layer's fused products
//! [`DTensor::ring_gather_linear`](crate::tensor::DTensor::ring_gather_linear)
//! and
//! [`DTensor::ring_linear_reduce_scatter`](crate::tensor::DTensor::ring_linear_reduce_scatter).
//! Layers compose tensor operations only and never call a collective or
//! touch a shard. Inputs are 2-D `[tokens, features]`.
//!
//! [`ReplicatedLinear`] holds its weight whole on every rank;
//! [`KvHeadLinear`] holds on each rank the key/value heads its query heads
//! read (grouped-query attention's key and value projections).
//!
//! Files: `column.rs`, `row.rs`, `replicated.rs` and `kv_heads.rs` (each
//! layer with its config), `shared.rs`
//! (what both share: [`Overlap`], input checks, master-weight sharding, the
//! accessors both layers have).

mod column;
mod kv_heads;
mod replicated;
mod row;
mod shared;

pub use column::{ColumnParallelConfig, ColumnParallelLinear};
pub use kv_heads::{KvHeadConfig, KvHeadLinear};
pub use replicated::{ReplicatedLinear, ReplicatedLinearConfig};
pub use row::{RowParallelConfig, RowParallelLinear};
pub use shared::Overlap;
