//! Layer 2, kernels: one typed Rust wrapper per WGSL shader family in
//! `shaders/`. Each wrapper checks shapes, dtypes and ranks, allocates its
//! output on the operands' rank, and records one or more dispatches into that
//! device's pending encoder without waiting.

pub mod elementwise;
pub mod gemm;
pub mod reduce;

pub use elementwise::{Activation, activation, activation_backward, add, axpby, scale};
pub use gemm::{GemmOptions, gemm, matmul};
pub use reduce::sum_rows;

/// Every shader family's WGSL source by name, for validation and translation tests.
pub const SHADERS: &[(&str, &str)] = &[
    (
        "elementwise",
        include_str!("../../shaders/elementwise.wgsl"),
    ),
    // gemm.wgsl is completed by a tail that declares b; these are both variants.
    ("gemm", gemm::SOURCES[0].1),
    ("gemm_vec4", gemm::SOURCES[1].1),
    ("reduce", include_str!("../../shaders/reduce.wgsl")),
];
