//! Layer 4, `src/tensor/`: the distributed tensor and the conjugate mappings.
//! - `dtensor`: placements, redistribution, construction checks;
//! - `mappings`: each mapping's forward/backward value and communication;
//! - `elementwise`: add, scale and activations on every placement;
//! - `matmul`: the shard-by-shard product's placement rules, against f64;
//! - `rows`: `add_row` and `sum_rows` on every placement, against f64;
//! - `ops_vs_layers`: those operations give the linear layers' bits;
//! - `norm`, `attention`: the norms' and attention's VJPs against finite
//!   differences (`fd`), decoding against the full attention;
//! - `tied_head`: the matmul of a tied head past one storage binding.

mod attention;
mod dtensor;
mod elementwise;
mod fd;
mod mappings;
mod matmul;
mod norm;
mod ops_vs_layers;
mod rows;
mod tied_head;
