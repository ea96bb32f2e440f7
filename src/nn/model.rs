//! A small language model built from the parallel layers, used by the
//! quickstart, the benches and the parity tests:
//!
//! `ids → VocabParallelEmbedding → ColumnParallelLinear → GELU →
//! RowParallelLinear → ColumnParallelLinear head (vocab-sharded logits) →
//! VocabParallelCrossEntropy`.
//!
//! Per step it performs 5 all-reduces forward (embedding, row, three in the
//! loss) and 2 backward (the two column layers' input gradients).

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
    #[params(skip)]
    saved_pre_act: Option<DTensor>,
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
            saved_pre_act: None,
        })
    }

    /// Forward to the mean loss (`[1]`, replicated); saves what backward needs.
    pub fn forward(&mut self, ids: &[i32], targets: &[i32]) -> Result<DTensor> {
        if ids.len() != targets.len() {
            return Err(Error::shape(
                "MlpLanguageModel::forward",
                [ids.len()],
                [targets.len()],
            ));
        }
        let h = self.embed.forward(ids)?;
        let pre = self.fc1.forward(&h)?;
        let act = pre.activation(Activation::Gelu)?;
        self.saved_pre_act = Some(pre);
        let h2 = self.fc2.forward(&act)?;
        let logits = self.head.forward(&h2)?;
        self.loss.forward(&logits, targets)
    }

    /// Backward from the loss; accumulates every parameter's gradient.
    pub fn backward(&mut self) -> Result<()> {
        let pre = self.saved_pre_act.take().ok_or_else(|| {
            Error::invalid("MlpLanguageModel::backward", "call forward before backward")
        })?;
        let dlogits = self.loss.backward(None)?;
        let dh2 = self.head.backward(&dlogits)?;
        let dact = self.fc2.backward(&dh2)?;
        let dpre = pre.activation_backward(&dact, Activation::Gelu)?;
        let dh = self.fc1.backward(&dpre)?;
        self.embed.backward(&dh)
    }
}
