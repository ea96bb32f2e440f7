//! [`GptStage`]: the part of a [`Gpt`](super::Gpt) one pipeline stage
//! holds. The first stage embeds (`wte`, `wpe`, dropout), every stage runs
//! its contiguous blocks ([`Pipeline::layers`]), the last applies `ln_f`,
//! the tied head and the loss. The last stage keeps its own copy of `wte`
//! for the head (Megatron's layout): both copies start equal, and
//! [`Pipeline::forward_backward`] sums their gradients, so they stay equal
//! under any optimiser that updates them alike. Parameters keep the whole
//! model's names (`h.7.attn.c_attn.weight` on whichever stage holds block
//! 7) and its initial values: a stage draws the same keys, skipping those of
//! layers it does not hold.

use std::ops::Range;

use super::block::INIT_KEYS;
use super::generate::{decode_blocks, decode_embed};
use super::{
    GptConfig, TransformerBlock, block_template, build_block, check_config, embed,
    embedding_dropout, final_norm, mean_loss, table, tied_head,
};
use crate::device::Mesh;
use crate::element::DType;
use crate::error::{Error, Result};
use crate::nn::{
    Dropout, Embedding, InitRng, KvCache, LayerNorm, Parameter, Params, Pipeline, PipelineStage,
    StageDecoder, VocabParallelCrossEntropy, VocabParallelEmbedding, join_name,
};
use crate::tensor::{DTensor, Placement};

/// One pipeline stage of a GPT (module doc).
#[derive(Debug)]
pub struct GptStage {
    /// Token embedding (first stage) or the tied head's table (last stage).
    pub wte: Option<VocabParallelEmbedding>,
    /// Position embedding (first stage).
    pub wpe: Option<Embedding>,
    /// This stage's blocks, layers [`GptStage::layers`] of the model.
    pub h: Vec<TransformerBlock>,
    /// Final norm (last stage).
    pub ln_f: Option<LayerNorm>,
    /// Dropout of the summed embeddings (used on the first stage).
    pub drop: Dropout,
    loss: VocabParallelCrossEntropy,
    config: GptConfig,
    mesh: Mesh,
    stage: usize,
    stages: usize,
    layers: Range<usize>,
}

impl GptStage {
    /// The stage of `pipeline` that `group` (one of the mesh's groups
    /// without the pipeline axis, e.g. a tensor-parallel group) belongs to,
    /// with the weights [`Gpt::new`](super::Gpt::new) draws from `seed` for
    /// its layers. f32 activations only.
    pub fn new(group: &Mesh, config: GptConfig, seed: u64, pipeline: &Pipeline) -> Result<Self> {
        const OP: &str = "GptStage::new";
        check_config(OP, group, &config)?;
        if config.dtype != DType::F32 {
            return Err(Error::invalid(
                OP,
                "pipeline stages pass f32 activations: use dtype F32",
            ));
        }
        let (stage, stages) = (pipeline.stage_of(group)?, pipeline.stages());
        let layers = pipeline.layers(config.layers, stage)?;
        let (first, last) = (stage == 0, stage + 1 == stages);
        let (split, whole) = config.stage_split(first, last, layers.len());
        let what = format!("stage {stage}'s parameters");
        group.check_memory(OP, &what, group.held_bytes(split, whole, 4))?;
        let mut rng = InitRng::new(seed);
        let wte = match first || last {
            true => Some(VocabParallelEmbedding::new(
                group,
                table(&config, config.vocab, true),
                &mut rng,
            )?),
            false => {
                rng.skip(1);
                None
            }
        };
        let wpe = match first {
            true => Some(Embedding::new(
                group,
                table(&config, config.n_ctx, true),
                &mut rng,
            )?),
            false => {
                rng.skip(1);
                None
            }
        };
        rng.skip(INIT_KEYS * layers.start as u64);
        let block = block_template(&config, seed, true);
        let h = layers
            .clone()
            .map(|i| build_block(group, block, i, &mut rng))
            .collect::<Result<Vec<_>>>()?;
        Ok(GptStage {
            wte,
            wpe,
            h,
            ln_f: if last {
                Some(final_norm(group, &config)?)
            } else {
                None
            },
            drop: embedding_dropout(&config, seed)?,
            loss: mean_loss()?,
            config,
            mesh: group.clone(),
            stage,
            stages,
            layers,
        })
    }

    /// The settings of the whole model.
    pub fn config(&self) -> &GptConfig {
        &self.config
    }

    /// The model's layers this stage holds.
    pub fn layers(&self) -> Range<usize> {
        self.layers.clone()
    }

    /// Training mode (dropout on, masks keyed by `step`) or evaluation.
    pub fn set_mode(&mut self, training: bool, step: u64) {
        super::set_mode(&mut self.drop, &mut self.h, training, step);
    }

    /// `x` through this stage's blocks; on the last stage then `ln_f` and
    /// the tied head (logits `[tokens, vocab]`, `Shard(1)`).
    pub fn forward_hidden(&self, x: &DTensor, seq: usize) -> Result<DTensor> {
        let mut x = x.clone();
        for block in &self.h {
            x = block.forward(&x, seq)?;
        }
        match (&self.ln_f, &self.wte) {
            (Some(ln_f), Some(wte)) => tied_head(wte, &self.config, &ln_f.forward(&x)?),
            _ => Ok(x),
        }
    }

    fn missing(&self, what: &str) -> Error {
        Error::invalid(
            "GptStage::forward_stage",
            format!("stage {} of {} holds no {what}", self.stage, self.stages),
        )
    }
}

impl PipelineStage for GptStage {
    fn stage_mesh(&self) -> &Mesh {
        &self.mesh
    }

    fn stage(&self) -> (usize, usize) {
        (self.stage, self.stages)
    }

    fn boundary(&self, tokens: usize) -> (Vec<usize>, Placement) {
        let placement = match self.config.sequence_parallel {
            true => Placement::Shard(0),
            false => Placement::Replicate,
        };
        (vec![tokens, self.config.hidden], placement)
    }

    fn forward_stage(
        &self,
        input: Option<&DTensor>,
        ids: &[i32],
        targets: &[i32],
        seq: usize,
    ) -> Result<DTensor> {
        let x = match (input, &self.wpe, &self.wte) {
            (Some(x), _, _) => x.clone(),
            (None, Some(wpe), Some(wte)) => embed(wte, wpe, &self.drop, &self.config, ids, seq)?,
            (None, _, _) => return Err(self.missing("embedding: pass the previous stage's output")),
        };
        let y = self.forward_hidden(&x, seq)?;
        match self.ln_f {
            Some(_) => self.loss.forward(&y, targets),
            None => Ok(y),
        }
    }

    fn shared_parameters(&self) -> Vec<(String, usize)> {
        let (first, last) = (self.stage == 0, self.stage + 1 == self.stages);
        match (first, last) {
            (true, false) => vec![("wte.weight".into(), self.stages - 1)],
            (false, true) => vec![("wte.weight".into(), 0)],
            _ => Vec::new(),
        }
    }
}

impl StageDecoder for GptStage {
    fn vocab_size(&self) -> usize {
        self.config.vocab
    }

    fn context(&self) -> usize {
        self.config.n_ctx
    }

    fn num_caches(&self) -> usize {
        self.h.len()
    }

    fn decode_stage(
        &self,
        input: Option<&DTensor>,
        ids: &[i32],
        caches: &mut [KvCache],
    ) -> Result<DTensor> {
        check_decode(ids, caches.len(), self.h.len())?;
        let x = match (input, &self.wpe, &self.wte) {
            (Some(x), _, _) => x.clone(),
            (None, Some(wpe), Some(wte)) => {
                let past = caches.first().map_or(0, KvCache::len);
                decode_embed(wte, wpe, &self.drop, &self.config, ids, past)?
            }
            (None, _, _) => return Err(self.missing("embedding: pass the previous stage's output")),
        };
        let x = decode_blocks(&self.h, x, caches)?;
        match (&self.ln_f, &self.wte) {
            (Some(ln_f), Some(wte)) => {
                // Only the last position's next token is wanted.
                let last = ln_f.forward(&x.narrow(0, x.shape()[0] - 1, 1)?)?;
                tied_head(wte, &self.config, &last)
            }
            _ => Ok(x),
        }
    }
}

impl Params for GptStage {
    fn visit_params<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Parameter)) {
        if let Some(w) = &self.wte {
            w.visit_params(&join_name(prefix, "wte"), f);
        }
        if let Some(w) = &self.wpe {
            w.visit_params(&join_name(prefix, "wpe"), f);
        }
        for (i, b) in self.layers.clone().zip(&self.h) {
            b.visit_params(&join_name(prefix, &format!("h.{i}")), f);
        }
        if let Some(n) = &self.ln_f {
            n.visit_params(&join_name(prefix, "ln_f"), f);
        }
    }

    fn visit_params_mut<'a>(
        &'a mut self,
        prefix: &str,
        f: &mut dyn FnMut(String, &'a mut Parameter),
    ) {
        if let Some(w) = &mut self.wte {
            w.visit_params_mut(&join_name(prefix, "wte"), f);
        }
        if let Some(w) = &mut self.wpe {
            w.visit_params_mut(&join_name(prefix, "wpe"), f);
        }
        for (i, b) in self.layers.clone().zip(&mut self.h) {
            b.visit_params_mut(&join_name(prefix, &format!("h.{i}")), f);
        }
        if let Some(n) = &mut self.ln_f {
            n.visit_params_mut(&join_name(prefix, "ln_f"), f);
        }
    }
}

/// A decoding step needs a token and one cache per layer held.
pub(crate) fn check_decode(ids: &[i32], caches: usize, layers: usize) -> Result<()> {
    if ids.is_empty() || caches != layers {
        return Err(Error::invalid(
            "StageDecoder::decode_stage",
            format!(
                "{} tokens and {caches} caches: give at least one token and one cache per layer this stage holds ({layers})",
                ids.len()
            ),
        ));
    }
    Ok(())
}
