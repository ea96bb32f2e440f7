//! What a [`Decoder`] tells about itself: its config (the family's own type
//! through [`Decoder::config`]), its parts, and its mode.

use std::ops::Range;

use super::block::Block;
use super::model::Decoder;
use super::options::LoadOptions;
use super::spec::{DecoderConfig, DecoderSpec};
use crate::device::Mesh;
use crate::nn::Params;
use crate::nn::embedding::VocabParallelEmbedding;
use crate::nn::linear::ColumnParallelLinear;

impl Decoder {
    /// The family's config as its own type (`model.config::<LlamaConfig>()`),
    /// or `None` for another family.
    pub fn config<C: DecoderConfig>(&self) -> Option<&C> {
        self.config.as_ref().as_any().downcast_ref()
    }

    /// The family's config, whichever the family.
    pub fn decoder_config(&self) -> &dyn DecoderConfig {
        &*self.config
    }

    /// The skeleton's sizes, embedding, norm, head and names.
    pub fn spec(&self) -> &DecoderSpec {
        &self.spec
    }

    /// How the model was built (sequence parallelism, dtypes).
    pub fn options(&self) -> LoadOptions {
        self.options
    }

    /// `model_type` (`gpt2`, `llama`, `qwen2`, …).
    pub fn model_type(&self) -> &str {
        self.config.model_type()
    }

    /// One line about the model: family, sizes, heads, a tied head.
    pub fn describe(&self) -> String {
        let tied = if self.spec.tied { " · tied head" } else { "" };
        format!("{}{tied}", self.config.describe())
    }

    /// Vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.spec.vocab
    }

    /// Longest sequence the model takes.
    pub fn context(&self) -> usize {
        self.spec.context
    }

    /// The mesh (a stage's group for a pipeline stage).
    pub fn mesh(&self) -> &Mesh {
        &self.mesh
    }

    /// The model's layers this model or stage holds (`0..L` when whole).
    pub fn layers(&self) -> Range<usize> {
        self.range.clone()
    }

    /// This stage's index and the number of stages (`(0, 1)` when whole).
    pub fn stage_index(&self) -> (usize, usize) {
        self.stage
    }

    /// The blocks this model or stage holds, in order.
    pub fn blocks(&self) -> &[Box<dyn Block>] {
        &self.blocks
    }

    /// Block `i` (of those held) as the family's block type
    /// (`model.block::<LlamaBlock>(0)`), or `None`.
    pub fn block<B: Block>(&self, i: usize) -> Option<&B> {
        self.blocks.get(i)?.as_ref().as_any().downcast_ref()
    }

    /// Block `i` as the family's block type, mutable.
    pub fn block_mut<B: Block>(&mut self, i: usize) -> Option<&mut B> {
        self.blocks.get_mut(i)?.as_mut().as_any_mut().downcast_mut()
    }

    /// The token embedding (first stage, and the last when tied).
    pub fn embed_tokens(&self) -> Option<&VocabParallelEmbedding> {
        self.embed.as_ref()
    }

    /// The untied output head (`None` when tied, or off the last stage).
    pub fn lm_head(&self) -> Option<&ColumnParallelLinear> {
        self.head.as_ref()
    }

    /// Whether the head is the token embedding.
    pub fn is_tied(&self) -> bool {
        self.spec.tied
    }

    /// Activation recomputation (gradient checkpointing) per block, on
    /// or off: a recorded forward keeps each block's input and output
    /// only, and backward runs each block again before its backward, with
    /// the same gradients bit for bit. Memory for one block's
    /// intermediates instead of every block's, for one more forward's
    /// time. Any family, mesh and pipeline stage; decoding is unaffected.
    pub fn set_recompute(&mut self, on: bool) {
        self.recompute = on;
    }

    /// Whether activation recomputation is on ([`Decoder::set_recompute`]).
    pub fn recomputes(&self) -> bool {
        self.recompute
    }

    /// Training mode (dropout on, at `step`: masks differ between steps and
    /// repeat for the same step) or evaluation mode (dropout off).
    /// A model read from a directory starts in evaluation mode, one built
    /// from a config in training mode (without dropout unless it asks).
    pub fn set_mode(&mut self, training: bool, step: u64) {
        self.drop.set_mode(training, step);
        self.visit_adaptable_mut("", &mut |_, l| l.set_lora_mode(training, step));
        for b in &mut self.blocks {
            b.set_mode(training, step);
        }
    }
}
