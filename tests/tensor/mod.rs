//! Layer 4, `src/tensor/`: the distributed tensor and the conjugate mappings.
//! - `dtensor`: placements, redistribution, construction checks;
//! - `mappings`: each mapping's forward/backward value and communication;
//! - `elementwise`: add, scale and activations on every placement;
//! - `matmul`: the shard-by-shard product's placement rules, against f64;
//! - `rows`: `add_row` and `sum_rows` on every placement, against f64;
//! - `row_residual`: a row-parallel layer's bias and the residual in one
//!   kernel, against f64 and the two steps' bits;
//! - `reduce_residual`: on a shared device the all-reduce adds the
//!   residual in its fold, with the two steps' bits;
//! - `ops_vs_layers`: those operations give the linear layers' bits;
//! - `linears`: several layers of one input in shared dispatches, with
//!   each layer's bits;
//! - `grad_ops`: the VJPs of matmul, linear, add_row and sum_rows against
//!   finite differences (`fd`: the check they share);
//! - `grad_elementwise`: add, scale, activations, narrow and redistribute
//!   against finite differences;
//! - `grad_ring`: the sequence-parallel fused products and their VJPs.
//! - `embedding`, `cross_entropy`, `dropout`: those ops' VJPs against finite
//!   differences (`fd`), placements, communication;
//! - `norm`, `attention`: the norms' and attention's VJPs against finite
//!   differences (`fd`), decoding against the full attention;
//! - `gqa`: grouped-query attention's VJP against finite differences on
//!   every world size (dK, dV partial sums), decoding against the full op;
//! - `gqa_grouped`: ranks on one CPU adapter decode their attention
//!   steps in one dispatch, with each rank's bits;
//! - `gqa_held`: which key/value heads each rank holds, attention and
//!   decoding on held heads, `share_replicas`' summed gradients;
//! - `llama_ops`: `rotary`, `rms_norm_heads` and `mul` against f64 and
//!   finite differences, partial incoming gradients;
//! - `tied_head`: the matmul of a tied head past one storage binding;
//! - `aliased`: replicated ops on a shared device run once for every rank.

mod aliased;
mod attention;
mod autograd;
mod cross_entropy;
mod dropout;
mod dtensor;
mod elementwise;
mod embedding;
mod fd;
mod gqa;
mod gqa_grouped;
mod gqa_held;
mod grad_elementwise;
mod grad_ops;
mod grad_ring;
mod grouped;
mod linear_gated;
mod linears;
mod llama_ops;
mod mappings;
mod matmul;
mod norm;
mod ops_vs_layers;
mod quant;
mod reduce_residual;
mod row_residual;
mod rows;
mod tied_head;
