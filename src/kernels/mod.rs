//! Layer 2, kernels: one typed Rust wrapper per WGSL shader family in
//! `shaders/`. Each wrapper checks shapes, dtypes and ranks, allocates its
//! output on the operands' rank, and records one or more dispatches into that
//! device's pending encoder without waiting.

pub mod attention;
pub mod cast;
pub(crate) mod copy_fold;
pub mod cross_entropy;
pub mod dropout;
pub mod elementwise;
pub mod embedding;
pub(crate) mod fold_norm;
pub mod gemm;
pub mod gemv;
mod grid;
mod interned;
mod loops;
pub(crate) mod member_source;
pub mod norm;
pub mod optim;
pub mod quant;
pub mod random;
pub mod reduce;
pub mod rope;
mod row_blocks;
pub mod sampling;
pub mod slicing;
pub mod topk;
pub mod transpose;

/// Old name of [`slicing`], kept so existing paths compile.
#[doc(hidden)]
pub use slicing as layout;

pub use attention::{
    Attention, AttentionShape, Decoded, HeadGroups, HeadWindow, ProbsDropout, attention_backward,
    attention_backward_gqa, attention_backward_with, attention_decode, attention_decode_gqa,
    attention_decode_gqa_rotary, attention_forward, attention_forward_gqa, attention_forward_with,
};
pub use cast::cast;
pub use cross_entropy::{
    CrossEntropy, CrossEntropyOptions, VocabShard, ce_grad, ce_loss, cross_entropy,
    cross_entropy_backward, row_max, row_max_with, row_sum, row_sum_exp, row_sum_exp_with,
    row_sum_with, target_logit,
};
pub use dropout::{PhiloxKey, ShardWindow, dropout};
pub(crate) use elementwise::add_assign;
pub use elementwise::{
    Activation, activation, activation_backward, add, add_row, add_row_add, axpby, mul, scale,
    softcap, softcap_backward,
};
pub use embedding::{embedding_backward, embedding_lookup};
pub use gemm::{GemmOptions, GemmVariant, gemm};
pub use norm::{
    NormKind, RowsReduce, norm_backward, norm_forward, norm_forward_with, norm_param_grads,
};
pub use reduce::sum_rows;
pub use rope::{rotary, rotary_pair};
pub use sampling::{penalized_row, row_exp_sum};
pub use slicing::{concat, narrow};
pub use topk::top_k;
pub use transpose::transpose;

/// Every fixed shader family's WGSL source by name (f32); [`all_shaders`]
/// adds the composed GEMM and f16 kernels.
pub const SHADERS: &[(&str, &str)] = &[
    ("elementwise", grid::grid_source!("elementwise.wgsl")),
    ("optim", grid::grid_source!("optim.wgsl")),
    ("embedding", embedding::SOURCE),
    ("embedding_bf16", embedding::SOURCE_BF16),
    ("cross_entropy", grid::grid_source!("cross_entropy.wgsl")),
    ("copy_fold", grid::grid_source!("copy_fold.wgsl")),
    ("norm", grid::grid_source!("norm.wgsl")),
    ("norm_rows", norm::SOURCE_ROWS),
    ("rope", grid::grid_source!("rope.wgsl")),
    ("dropout", dropout::SOURCE),
    ("init", random::SOURCE),
    ("attention", attention::SOURCE),
    ("attention_vec4", attention::SOURCE_VEC4),
    ("attention_textures", attention::SOURCE_TEXTURES),
    ("transpose", transpose::SOURCE),
    ("reduce", include_str!("../../shaders/reduce.wgsl")),
    ("topk", include_str!("../../shaders/topk.wgsl")),
    ("sampling", include_str!("../../shaders/sampling.wgsl")),
];

/// Every shader the crate builds: [`SHADERS`] plus the GEMM register
/// kernels, which `gemm/register.rs` generates per register tile (one per shipped
/// tile and operand kind here), for validation and translation tests.
pub fn all_shaders() -> Vec<(&'static str, &'static str)> {
    let mut out = SHADERS.to_vec();
    // The GEMM kernels: the shared header (gemm_header.wgsl) plus a kernel,
    // in each (operand, output) precision.
    out.extend(gemm::tiled_sources());
    out.extend(gemm::register_sources());
    out.extend(gemv::gemv_sources());
    out.extend(quant::quant_sources());
    out.extend(attention::decode_sources());
    out.push(("fold_norm", fold_norm::source()));
    // f16 families (used only where the adapter has SHADER_F16).
    out.push(("transpose_f16", transpose::SOURCE_F16));
    out.push(("cast_to_f16", cast::SOURCE_TO_F16));
    out.push(("cast_to_f32", cast::SOURCE_TO_F32));
    out.push(("cast_bf16", cast::SOURCE_BF16));
    out
}

/// The shaders that need `EXPERIMENTAL_COOPERATIVE_MATRIX` (the
/// cooperative-matrix GEMM in its precisions), apart from [`all_shaders`]:
/// naga translates them to SPIR-V only (Vulkan's `VK_KHR_cooperative_matrix`).
pub fn coop_shaders() -> Vec<(&'static str, &'static str)> {
    gemm::coop_sources()
}
