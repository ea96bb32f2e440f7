//! Layer 4, tensors: the distributed tensor [`DTensor`] with its
//! [`Placement`] (Replicate / Shard(d) / Partial), redistribution through the
//! collectives, and the conjugate autograd [`Mapping`]s layers compose,
//! including the ring-overlapped forms of the sequence-parallel pair
//! (`ring.rs`) and the linear products fused with them
//! (`ring_gather_linear.rs`, `ring_linear_scatter.rs`; `scatter_bias.rs`
//! for the plain reduce-scatter with a bias); element-wise operations that
//! keep the placement (`elementwise.rs`: `add`, `scale`, activations); and
//! the per-shard products layers are written on (`matmul.rs`: `matmul`;
//! `rows.rs`: `add_row`, `sum_rows`), which communicate nothing; where a
//! shared device holds a replicated value once (`aliased.rs`), the ops on
//! it run once for every rank outside training. Layers above talk to
//! communication only through these.
//!
//! Beneath the products: `placement.rs` (how shards make up a value),
//! `checks.rs` (the placement checks operations share) and
//! `matmul_plan.rs` ([`MatmulOptions`] and the checks every product runs
//! first), so `matmul.rs`, `product.rs`, `paired.rs` and `matmul_grad.rs`
//! import them and not each other. Over a data-parallel axis:
//! `replicas.rs` (gradients averaged in buckets) and `sliced_adamw.rs`
//! (ZeRO-1's sliced update), so layers never index shards.

mod aliased;
mod attention;
mod autograd;
mod checks;
mod cross_entropy;
mod cross_entropy_config;
mod cross_entropy_grad;
mod dropout;
mod dtensor;
mod elementwise;
mod embedding;
mod gqa;
mod grouped;
mod holding;
mod host;
mod linear_residual;
mod mappings;
mod matmul;
mod matmul_grad;
mod matmul_plan;
mod narrow;
mod norm;
mod overwrite;
mod paired;
mod pipe;
mod placement;
mod product;
mod quant;
mod redistribute;
pub(crate) mod replicas;
mod ring;
mod ring_gather_linear;
mod ring_linear_scatter;
mod rotary;
mod row_product;
mod rows;
mod scatter_bias;
pub(crate) mod sliced_adamw;
mod tied_head;
mod topk;
mod update;

pub(crate) use aliased::made_once;
pub use attention::AttentionDropout;
#[allow(unused_imports)]
pub(crate) use autograd::{
    GradSlot, Node, grad_placement, placed, record, record_source, tracking,
};
pub use autograd::{NoGradGuard, is_grad_enabled, no_grad};
pub use cross_entropy_config::{CrossEntropyConfig, Reduction};
pub use dtensor::DTensor;
pub use gqa::GqaSpec;
pub use holding::Holding;
pub use mappings::Mapping;
pub use matmul_plan::MatmulOptions;
pub use pipe::Pipe;
pub use placement::{Placement, local_shape, local_shape_in_units};
pub(crate) use quant::k_unit;
pub use ring::{
    concat_token_chunks, ring_all_gather_fused, ring_reduce_scatter_fused, token_chunk,
};
pub use row_product::{RowProduct, RowReduce};
pub use topk::{
    RowPenalty, VocabCandidates, vocab_candidates, vocab_candidates_async, vocab_penalized_row,
    vocab_top_k, vocab_top_k_async,
};

/// Re-exported from where it lives, [`crate::shard`], for existing paths.
pub use crate::shard::host_narrow;
