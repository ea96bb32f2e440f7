//! Layer 2, kernels: one typed Rust wrapper per WGSL shader family in
//! `shaders/`. Each wrapper checks shapes, dtypes and ranks, allocates its
//! output on the operands' rank, and records one or more dispatches into that
//! device's pending encoder without waiting.

pub mod attention;
pub(crate) mod block;
pub mod cross_entropy;
pub mod dropout;
pub mod elementwise;
pub mod embedding;
pub mod gemm;
mod grid;
pub mod norm;
pub mod optim;
pub mod reduce;
pub mod slicing;
pub mod transpose;

/// Old name of [`slicing`], kept so existing paths compile.
#[doc(hidden)]
pub use slicing as layout;

pub use attention::{
    Attention, AttentionShape, Decoded, HeadWindow, ProbsDropout, attention_backward,
    attention_backward_with, attention_decode, attention_forward, attention_forward_with,
};
pub use cross_entropy::{
    CrossEntropy, CrossEntropyOptions, VocabShard, ce_grad, ce_loss, cross_entropy,
    cross_entropy_backward, row_max, row_sum, row_sum_exp, target_logit,
};
pub use dropout::{PhiloxKey, ShardWindow, dropout};
pub use elementwise::{Activation, activation, activation_backward, add, add_row, axpby, scale};
pub use embedding::{embedding_backward, embedding_lookup};
pub use gemm::{GemmOptions, GemmVariant, gemm, gemm_with, matmul};
pub use norm::{NormKind, norm_backward, norm_forward, norm_param_grads};
pub use reduce::sum_rows;
pub use slicing::{concat, narrow};
pub use transpose::transpose;

/// Every shader family's WGSL source by name, for validation and translation tests.
pub const SHADERS: &[(&str, &str)] = &[
    ("elementwise", grid::grid_source!("elementwise.wgsl")),
    ("optim", grid::grid_source!("optim.wgsl")),
    ("embedding", grid::grid_source!("embedding.wgsl")),
    ("cross_entropy", grid::grid_source!("cross_entropy.wgsl")),
    ("block", grid::grid_source!("block.wgsl")),
    ("norm", grid::grid_source!("norm.wgsl")),
    ("dropout", grid::grid_source!("dropout.wgsl")),
    ("attention", include_str!("../../shaders/attention.wgsl")),
    // The GEMM kernels are the shared header (gemm_header.wgsl) plus a kernel.
    ("gemm_tiled", gemm::SOURCE_TILED),
    ("transpose", include_str!("../../shaders/transpose.wgsl")),
    ("reduce", include_str!("../../shaders/reduce.wgsl")),
];

/// Every shader the crate builds: [`SHADERS`] plus the GEMM register
/// kernels, which `gemm.rs` generates per register tile (one per shipped
/// tile here), for validation and translation tests.
pub fn all_shaders() -> Vec<(&'static str, &'static str)> {
    let mut out = SHADERS.to_vec();
    out.extend(gemm::register_sources());
    out
}
