//! A small language model built from the parallel layers, used by the
//! quickstart, the benches and the parity tests:
//!
//! `ids → VocabParallelEmbedding → ColumnParallelLinear → GELU →
//! RowParallelLinear → ColumnParallelLinear head (vocab-sharded logits) →
//! VocabParallelCrossEntropy`.
//!
//! Per step it performs 5 all-reduces forward (embedding, row, three in the
//! loss) and 2 backward (the two column layers' input gradients), the
//! backward run by the tape from the loss.

use super::Params;
use super::cross_entropy::{CrossEntropyConfig, Reduction, VocabParallelCrossEntropy};
use super::embedding::{EmbeddingConfig, VocabParallelEmbedding};
use super::init::InitRng;
use super::linear::{
    ColumnParallelConfig, ColumnParallelLinear, RowParallelConfig, RowParallelLinear,
};
use crate::device::Mesh;
use crate::error::{Error, Result};
use crate::kernels::Activation;
use crate::tensor::DTensor;

/// Sizes of a [`MlpLanguageModel`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MlpLmConfig {
    /// Vocabulary size.
    pub vocab: usize,
    /// Hidden (embedding) size.
    pub hidden: usize,
    /// Feed-forward size.
    pub ffn: usize,
}

/// Embedding → column → GELU → row → vocab-parallel head → cross-entropy.
#[derive(Debug, Params)]
pub struct MlpLanguageModel {
    /// Token embedding, vocab-split.
    pub embed: VocabParallelEmbedding,
    /// Up projection, column-parallel.
    pub fc1: ColumnParallelLinear,
    /// Down projection, row-parallel.
    pub fc2: RowParallelLinear,
    /// Output head, column-parallel over the vocab (no gather).
    pub head: ColumnParallelLinear,
    #[params(skip)]
    loss: VocabParallelCrossEntropy,
}

impl MlpLanguageModel {
    /// A model whose master weights are drawn from `seed` (the same for every world size).
    pub fn new(mesh: &Mesh, cfg: MlpLmConfig, seed: u64) -> Result<Self> {
        let mut rng = InitRng::new(seed);
        let embed = VocabParallelEmbedding::new(
            mesh,
            EmbeddingConfig::new(cfg.vocab, cfg.hidden),
            &mut rng,
        )?;
        let fc1 = ColumnParallelLinear::new(
            mesh,
            ColumnParallelConfig::new(cfg.hidden, cfg.ffn),
            &mut rng,
        )?;
        let fc2 =
            RowParallelLinear::new(mesh, RowParallelConfig::new(cfg.ffn, cfg.hidden), &mut rng)?;
        let mut head_cfg = ColumnParallelConfig::new(cfg.hidden, cfg.vocab);
        head_cfg.bias = false;
        let head = ColumnParallelLinear::new(mesh, head_cfg, &mut rng)?;
        let loss = VocabParallelCrossEntropy::new(CrossEntropyConfig {
            reduction: Reduction::Mean,
            ..Default::default()
        })?;
        Ok(MlpLanguageModel {
            embed,
            fc1,
            fc2,
            head,
            loss,
        })
    }

    /// Token ids → vocab-sharded logits `[tokens, vocab]` (`Shard(1)`).
    pub fn logits(&self, ids: &[i32]) -> Result<DTensor> {
        let h = self.embed.forward(ids)?;
        let act = self.fc1.forward(&h)?.activation(Activation::Gelu)?;
        let h2 = self.fc2.forward(&act)?;
        self.head.forward(&h2)
    }

    /// The mean next-token loss (`[1]`, replicated) of `ids` against
    /// `targets`; `loss.backward()` fills every parameter's gradient.
    pub fn loss(&self, ids: &[i32], targets: &[i32]) -> Result<DTensor> {
        if ids.len() != targets.len() {
            return Err(Error::shape(
                "MlpLanguageModel::loss",
                [ids.len()],
                [targets.len()],
            ));
        }
        let logits = self.logits(ids)?;
        self.loss.forward(&logits, targets)
    }
}
