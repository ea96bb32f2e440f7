//! The decoder skeleton every causal language-model family shares
//! ([`Decoder`]): token (and position) embedding, a range of the family's
//! [`Block`]s on a residual [`Stream`], the final norm, a tied or untied
//! head and the loss, with prefill, cached decoding, pipeline stages,
//! parameter naming and generation written once. A family gives a
//! [`DecoderConfig`] (its config: sizes, names, how to build a block, where
//! its parameters live in a checkpoint) and a [`Block`]; everything else is
//! here.
//!
//! Files: `spec.rs` (what a family gives), `block.rs` ([`Block`]),
//! `stream.rs` (the residual stream, where fused paths are chosen),
//! `model.rs` (the type and building it), `forward.rs` (the one forward),
//! `params.rs` (names), `stage.rs` (as a pipeline stage), `generate.rs`,
//! `access.rs` (accessors, mode), `options.rs` ([`LoadOptions`]).

mod access;
mod any;
mod block;
mod forward;
mod generate;
mod model;
mod options;
mod params;
mod sizes;
mod spec;
mod stage;
mod stream;

pub use any::AsAny;
pub use block::{Block, BlockAlias};
pub use model::{Decoder, num_parameters};
pub use options::LoadOptions;
pub use sizes::GqaBlockSizes;
pub use spec::{
    BlockBuild, CloneConfig, DecoderConfig, DecoderSpec, FinalNorm, IntoDecoderConfig, Names,
    Stored,
};
pub use stream::{Branch, Stream};
