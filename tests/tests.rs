//! One integration-test binary, so every module shares the meshes in `util`.
//! Each module covers one topic:
//! - `kernels_elementwise`: add/scale/axpy and activations against f64.
//! - `kernels_gemm`: gemm (transposes, bias, accumulate) and sum_rows against f64.

mod util;

mod kernels_elementwise;
mod kernels_gemm;
