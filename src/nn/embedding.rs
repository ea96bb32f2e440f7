//! Embedding tables `E` `[vocab, dim]`, split over ranks or replicated.
//!
//! - [`VocabParallelEmbedding`]: rank r holds rows `[start_r, end_r)`;
//!   `out_r = E_r[id − start_r]` for owned ids, zero rows otherwise, then
//!   `out = all-reduce(out_r)`. Backward (the tape's VJP of
//!   [`DTensor::embedding`]) scatter-adds `dout` into the owned rows
//!   (deterministic order), no communication.
//! - [`ParallelEmbedding`]: rank r holds columns of `E`; local lookup, then
//!   all-gather along the last dim. Backward keeps its slice of `dout`.
//! - [`Embedding`]: every rank holds all of `E` (GPT-2's position table);
//!   local lookup, no communication either way.
//!
//! Ids come from the host (`&[i32]`): they are checked there (an id outside
//! `0..vocab` is an error, not a zero row) and uploaded once per call.
//! With `padding_idx`, that row starts at zero and never receives gradient.

use super::Params;
use super::init::{Init, InitRng};
use super::parameter::Parameter;
use crate::device::Mesh;
use crate::error::{Error, Result};
use crate::shard::split_range;
use crate::tensor::{DTensor, Mapping, Placement};

/// Settings of an embedding layer.
#[derive(Clone, Debug)]
pub struct EmbeddingConfig {
    /// Vocabulary size (rows of the table).
    pub num_embeddings: usize,
    /// Embedding size (columns).
    pub embedding_dim: usize,
    /// Row that stays zero and gets no gradient.
    pub padding_idx: Option<usize>,
    /// Table initialiser (PyTorch: N(0, 1); Megatron: N(0, 0.02²)).
    pub init: Init,
}

impl EmbeddingConfig {
    /// `num_embeddings × embedding_dim`, N(0, 0.02²), no padding row.
    pub fn new(num_embeddings: usize, embedding_dim: usize) -> Self {
        EmbeddingConfig {
            num_embeddings,
            embedding_dim,
            padding_idx: None,
            init: Init::default(),
        }
    }

    fn check(&self, op: &'static str, master_len: usize) -> Result<()> {
        if let Some(p) = self.padding_idx
            && p >= self.num_embeddings
        {
            return Err(Error::OutOfRange {
                op,
                what: "padding_idx",
                value: p as i64,
                bound: self.num_embeddings,
            });
        }
        if self.num_embeddings.checked_mul(self.embedding_dim) != Some(master_len) {
            return Err(Error::invalid(
                op,
                format!(
                    "table has {master_len} values, expected {} × {}",
                    self.num_embeddings, self.embedding_dim
                ),
            ));
        }
        Ok(())
    }
}

/// How a table is split: the parts of the two layers that differ.
#[derive(Clone, Copy, Debug)]
enum Split {
    /// Rows (vocab) split: lookups give partial sums, all-reduced.
    Vocab,
    /// Columns (embedding dim) split: lookups give column slices, all-gathered.
    Dim,
    /// Not split (GPT-2's position table): every rank looks up the same rows.
    Replicated,
}

impl Split {
    fn placement(self) -> Placement {
        match self {
            Split::Vocab => Placement::Shard(0),
            Split::Dim => Placement::Shard(1),
            Split::Replicated => Placement::Replicate,
        }
    }

    /// The mapping from the per-rank lookups to the replicated output (none
    /// when they are replicated already).
    fn mapping(self) -> Option<Mapping> {
        match self {
            Split::Vocab => Some(Mapping::ReduceFromParallel),
            Split::Dim => Some(Mapping::GatherFromParallel(1)),
            Split::Replicated => None,
        }
    }
}

/// The state both layers share; their methods delegate here.
#[derive(Clone, Debug, Params)]
struct Table {
    weight: Parameter,
    #[params(skip)]
    config: EmbeddingConfig,
    #[params(skip)]
    split: Split,
}

impl Table {
    fn from_master(
        op: &'static str,
        mesh: &Mesh,
        config: EmbeddingConfig,
        weight: &[f32],
        split: Split,
    ) -> Result<Table> {
        config.check(op, weight.len())?;
        let weight = Parameter::from_master(
            mesh,
            &[config.num_embeddings, config.embedding_dim],
            weight,
            split.placement(),
            1,
        )?;
        Ok(Table {
            weight,
            config,
            split,
        })
    }

    fn random(
        op: &'static str,
        mesh: &Mesh,
        config: EmbeddingConfig,
        rng: &mut InitRng,
        split: Split,
    ) -> Result<Table> {
        let (rows, dim) = (config.num_embeddings, config.embedding_dim);
        let len = rows.checked_mul(dim).ok_or_else(|| {
            Error::invalid(op, format!("a table of {rows} × {dim} overflows usize"))
        })?;
        config.check(op, len)?;
        let weight = config
            .init
            .parameter(mesh, &[rows, dim], rng, split.placement(), (1, 1))?;
        if let Some(pad) = config.padding_idx {
            weight.value.zero_row(op, pad)?;
        }
        Ok(Table {
            weight,
            config,
            split,
        })
    }

    /// The lookup (each rank its rows or columns), then the mapping that
    /// makes it whole; the tape's VJP scatter-adds into the table.
    fn forward(&self, ids: &[i32]) -> Result<DTensor> {
        let local = self.weight.value.embedding(ids, self.config.padding_idx)?;
        match self.split.mapping() {
            Some(m) => m.forward(&local),
            None => Ok(local),
        }
    }
}

/// Embedding with the vocabulary split over ranks (Megatron's `VocabParallelEmbedding`):
/// table `Shard(0)`, one all-reduce forward, none backward.
#[derive(Debug)]
pub struct VocabParallelEmbedding(Table);

/// Embedding with the embedding dimension split over ranks (fairscale's / ml's
/// `ParallelEmbedding`): table `Shard(1)`, one all-gather forward, none backward.
#[derive(Debug)]
pub struct ParallelEmbedding(Table);

/// Embedding replicated on every rank (GPT-2's position table `wpe`): no
/// communication; every rank's gradient is the same, so replicas stay equal.
#[derive(Debug)]
pub struct Embedding(Table);

macro_rules! embedding_api {
    ($ty:ident, $split:expr, $name:literal) => {
        impl $ty {
            /// A table drawn from `rng`, each rank its part on its device
            /// (`Init::parameter`; the padding row zeroed).
            pub fn new(mesh: &Mesh, config: EmbeddingConfig, rng: &mut InitRng) -> Result<Self> {
                Table::random(concat!($name, "::new"), mesh, config, rng, $split).map($ty)
            }

            /// A table holding the given master `[vocab, dim]`.
            pub fn from_master(
                mesh: &Mesh,
                config: EmbeddingConfig,
                weight: &[f32],
            ) -> Result<Self> {
                Table::from_master(
                    concat!($name, "::from_master"),
                    mesh,
                    config,
                    weight,
                    $split,
                )
                .map($ty)
            }

            /// The settings.
            pub fn config(&self) -> &EmbeddingConfig {
                &self.0.config
            }

            /// The table, `[vocab, dim]`.
            pub fn weight(&self) -> &Parameter {
                &self.0.weight
            }

            /// The table, mutable: a tied output head accumulates its gradient here.
            pub fn weight_mut(&mut self) -> &mut Parameter {
                &mut self.0.weight
            }

            /// Ids (any flat list of tokens, checked on the host) → `[ids.len(), dim]`,
            /// `Replicate`. On the tape, backward scatter-adds into the table's gradient.
            pub fn forward(&self, ids: &[i32]) -> Result<DTensor> {
                self.0.forward(ids)
            }

            /// The full table on the host.
            pub fn master_weight(&self) -> Result<Vec<f32>> {
                self.0.weight.master()
            }
        }

        // The newtype lists its table's parameters: `weight`.
        impl Params for $ty {
            fn visit_params<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Parameter)) {
                self.0.visit_params(prefix, f);
            }

            fn visit_params_mut<'a>(
                &'a mut self,
                prefix: &str,
                f: &mut dyn FnMut(String, &'a mut Parameter),
            ) {
                self.0.visit_params_mut(prefix, f);
            }
        }
    };
}

embedding_api!(
    VocabParallelEmbedding,
    Split::Vocab,
    "VocabParallelEmbedding"
);
embedding_api!(ParallelEmbedding, Split::Dim, "ParallelEmbedding");
embedding_api!(Embedding, Split::Replicated, "Embedding");

impl VocabParallelEmbedding {
    /// The vocab rows `[start, end)` global rank `r` holds (any rank, in
    /// this process or another).
    pub fn vocab_range(&self, r: usize) -> std::ops::Range<usize> {
        split_range(
            self.0.config.num_embeddings,
            self.0.weight.value.mesh().size(),
            r,
        )
    }
}
