//! Layer 4, tensors: the distributed tensor [`DTensor`] with its
//! [`Placement`] (Replicate / Shard(d) / Partial), redistribution through the
//! collectives, and the conjugate autograd [`Mapping`]s layers compose,
//! including the ring-overlapped forms of the sequence-parallel pair
//! (`ring.rs`), and element-wise operations that keep the placement
//! (`elementwise.rs`: `add`, `scale`, activations), and the per-shard
//! products layers are written on (`matmul.rs`: `matmul`; `rows.rs`:
//! `add_row`, `sum_rows`), which communicate nothing. Layers above talk to
//! communication only through these.

mod attention;
mod autograd;
mod dtensor;
mod elementwise;
mod host;
mod mappings;
mod matmul;
mod matmul_grad;
mod norm;
mod redistribute;
mod ring;
mod rows;
mod tied_head;

pub use attention::AttentionDropout;
#[allow(unused_imports)]
pub(crate) use autograd::{GradSlot, Node, placed, record, tracking};
pub use autograd::{NoGradGuard, is_grad_enabled, no_grad};
pub use dtensor::{DTensor, Placement, local_shape, local_shape_in_units};
pub use mappings::Mapping;
pub use matmul::MatmulOptions;
pub use ring::{
    concat_token_chunks, ring_all_gather_fused, ring_reduce_scatter_fused, token_chunk,
};

/// Re-exported from where it lives, [`crate::shard`], for existing paths.
pub use crate::shard::host_narrow;
