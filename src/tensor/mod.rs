//! Layer 4, tensors: the distributed tensor [`DTensor`] with its
//! [`Placement`] (Replicate / Shard(d) / Partial), redistribution through the
//! collectives, and the conjugate autograd [`Mapping`]s layers compose.

mod dtensor;
mod mappings;

pub use dtensor::{DTensor, Placement, host_narrow, local_shape};
pub use mappings::Mapping;
