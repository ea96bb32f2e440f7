//! Layer 2, kernels: one typed Rust wrapper per WGSL shader family in
//! `shaders/`. Each wrapper checks shapes, dtypes and ranks, allocates its
//! output on the operands' rank, and records one or more dispatches into that
//! device's pending encoder without waiting.

pub(crate) mod collective;
pub mod cross_entropy;
pub mod elementwise;
pub mod embedding;
pub mod gemm;
pub mod layout;
pub mod optim;
pub mod reduce;

pub use cross_entropy::{
    CrossEntropy, CrossEntropyOptions, VocabShard, ce_grad, ce_loss, cross_entropy,
    cross_entropy_backward, row_max, row_sum, row_sum_exp, target_logit,
};
pub use elementwise::{Activation, activation, activation_backward, add, add_row, axpby, scale};
pub use embedding::{embedding_backward, embedding_lookup};
pub use gemm::{GemmOptions, GemmVariant, gemm, gemm_with, matmul};
pub use layout::{concat, narrow};
pub use reduce::sum_rows;

/// Every shader family's WGSL source by name, for validation and translation tests.
pub const SHADERS: &[(&str, &str)] = &[
    (
        "elementwise",
        include_str!("../../shaders/elementwise.wgsl"),
    ),
    ("layout", include_str!("../../shaders/layout.wgsl")),
    ("optim", include_str!("../../shaders/optim.wgsl")),
    ("embedding", include_str!("../../shaders/embedding.wgsl")),
    (
        "cross_entropy",
        include_str!("../../shaders/cross_entropy.wgsl"),
    ),
    ("collective", include_str!("../../shaders/collective.wgsl")),
    // gemm.wgsl is completed by a tail that declares b (two variants); the
    // CPU-adapter and workgroup-memory kernels are complete files.
    ("gemm", gemm::SOURCES[0].1),
    ("gemm_vec4", gemm::SOURCES[1].1),
    ("gemm_cpu", gemm::SOURCES[2].1),
    ("gemm_tiled", gemm::SOURCES[3].1),
    ("reduce", include_str!("../../shaders/reduce.wgsl")),
];
