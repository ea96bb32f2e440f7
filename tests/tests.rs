//! One integration-test binary, so every module shares the meshes in `util`.
//! Each module covers one topic:
//! - `kernels_elementwise`: add/scale/axpy and activations against f64.
//! - `comm`: collectives on both transports, every world size, bad inputs.
//! - `device`: adapter selection errors and software adapters.
//! - `shaders`: every WGSL family validated by naga and translated to MSL,
//!   HLSL, SPIR-V and GLSL.

mod util;

mod comm;
mod device;
mod kernels_elementwise;
mod shaders;
