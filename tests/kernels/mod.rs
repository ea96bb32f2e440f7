//! Layer 2, `src/kernels/`: each kernel family on one rank against f64.

mod cross_entropy;
mod elementwise;
mod embedding;
mod gemm;
