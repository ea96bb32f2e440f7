//! [`LlamaStage`]: the part of a [`Llama`](super::Llama) one pipeline stage
//! holds, as [`GptStage`](crate::models::GptStage) is for GPT: the first
//! stage embeds, every stage runs its contiguous decoder layers, the last
//! applies `model.norm`, the head and the loss. A tied head keeps its own
//! copy of `model.embed_tokens` on the last stage, whose gradient
//! [`Pipeline::forward_backward`] sums with the first stage's; an untied
//! `lm_head` lives on the last stage only. Names and initial values are the
//! whole model's.

use std::ops::Range;

use super::{
    LAYER_KEYS, LlamaConfig, LlamaDecoderLayer, check_layers, decoder_layer, embedding, head,
    mean_loss, rms, untied_head,
};
use crate::device::Mesh;
use crate::error::{Error, Result};
use crate::nn::{
    ColumnParallelLinear, Init, InitRng, KvCache, Parameter, Params, Pipeline, PipelineStage,
    RMSNorm, StageDecoder, VocabParallelCrossEntropy, VocabParallelEmbedding, join_name,
};
use crate::tensor::{DTensor, Mapping, Placement};

/// One pipeline stage of a Llama-family model (module doc).
#[derive(Debug)]
pub struct LlamaStage {
    /// `model.embed_tokens`: on the first stage, and on the last when tied.
    pub embed_tokens: Option<VocabParallelEmbedding>,
    /// This stage's decoder layers, layers [`LlamaStage::layers`] of the model.
    pub layers: Vec<LlamaDecoderLayer>,
    /// `model.norm` (last stage).
    pub norm: Option<RMSNorm>,
    /// The untied head (last stage).
    pub lm_head: Option<ColumnParallelLinear>,
    loss: VocabParallelCrossEntropy,
    config: LlamaConfig,
    sequence_parallel: bool,
    mesh: Mesh,
    stage: (usize, usize),
    range: Range<usize>,
}

impl LlamaStage {
    /// The stage of `pipeline` that `group` belongs to, with the weights
    /// [`Llama::new`](super::Llama::new) (or, with `sequence_parallel`,
    /// `Llama::new_sequence_parallel`) draws from `seed` for its layers.
    pub fn new(
        group: &Mesh,
        config: LlamaConfig,
        seed: u64,
        sequence_parallel: bool,
        pipeline: &Pipeline,
    ) -> Result<Self> {
        const OP: &str = "LlamaStage::new";
        let c = &config;
        check_layers(OP, c)?;
        let (stage, stages) = (pipeline.stage_of(group)?, pipeline.stages());
        let range = pipeline.layers(c.num_hidden_layers, stage)?;
        let (first, last) = (stage == 0, stage + 1 == stages);
        let what = format!("stage {stage}'s parameters");
        group.check_memory(OP, &what, c.stage_bytes(group, first, last, range.len()))?;
        let (init, sp) = (Init::default(), sequence_parallel);
        let mut rng = InitRng::new(seed);
        let tied = c.tie_word_embeddings;
        let embed_tokens = match first || (last && tied) {
            true => Some(embedding(group, c, init, &mut rng)?),
            false => {
                rng.skip(1);
                None
            }
        };
        rng.skip(LAYER_KEYS * range.start as u64);
        let layers = range
            .clone()
            .map(|i| decoder_layer(group, c, i, (init, sp), &mut rng))
            .collect::<Result<Vec<_>>>()?;
        rng.skip(LAYER_KEYS * (c.num_hidden_layers - range.end) as u64);
        let lm_head = match last && !tied {
            true => Some(untied_head(group, c, (init, sp), &mut rng)?),
            false => None,
        };
        Ok(LlamaStage {
            embed_tokens,
            layers,
            norm: if last { Some(rms(group, c)?) } else { None },
            lm_head,
            loss: mean_loss()?,
            config,
            sequence_parallel,
            mesh: group.clone(),
            stage: (stage, stages),
            range,
        })
    }

    /// The settings of the whole model.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// The model's layers this stage holds.
    pub fn layers(&self) -> Range<usize> {
        self.range.clone()
    }

    /// The stage's input: the embedding of `ids` on the first stage, else
    /// what the previous stage sent.
    fn input(&self, input: Option<&DTensor>, ids: &[i32], split: bool) -> Result<DTensor> {
        match (input, &self.embed_tokens) {
            (Some(x), _) => Ok(x.clone()),
            (None, Some(e)) if self.stage.0 == 0 => {
                let x = e.forward(ids)?;
                match split {
                    true => Mapping::ScatterToParallel(0).forward(&x),
                    false => Ok(x),
                }
            }
            _ => Err(Error::invalid(
                "LlamaStage::forward_stage",
                format!(
                    "stage {} of {} holds no embedding: pass the previous stage's output",
                    self.stage.0, self.stage.1
                ),
            )),
        }
    }

    /// `x` normed and through the head (last stage), else `x`.
    fn output(&self, x: DTensor) -> Result<DTensor> {
        match &self.norm {
            Some(norm) => head(
                self.lm_head.as_ref(),
                self.embed_tokens.as_ref(),
                self.sequence_parallel,
                &norm.forward(&x)?,
            ),
            None => Ok(x),
        }
    }
}

impl PipelineStage for LlamaStage {
    fn stage_mesh(&self) -> &Mesh {
        &self.mesh
    }

    fn stage(&self) -> (usize, usize) {
        self.stage
    }

    fn boundary(&self, tokens: usize) -> (Vec<usize>, Placement) {
        let placement = match self.sequence_parallel {
            true => Placement::Shard(0),
            false => Placement::Replicate,
        };
        (vec![tokens, self.config.hidden_size], placement)
    }

    fn forward_stage(
        &self,
        input: Option<&DTensor>,
        ids: &[i32],
        targets: &[i32],
        seq: usize,
    ) -> Result<DTensor> {
        if seq == 0 || !ids.len().is_multiple_of(seq) || ids.len() != targets.len() {
            return Err(Error::invalid(
                "LlamaStage::forward_stage",
                format!(
                    "{} ids and {} targets are not whole sequences of {seq}",
                    ids.len(),
                    targets.len()
                ),
            ));
        }
        let mut x = self.input(input, ids, self.sequence_parallel)?;
        for layer in &self.layers {
            x = layer.forward(&x, seq)?;
        }
        match self.norm {
            Some(_) => self.loss.forward(&self.output(x)?, targets),
            None => Ok(x),
        }
    }

    fn shared_parameters(&self) -> Vec<(String, usize)> {
        let (s, n) = self.stage;
        match (s == 0, s + 1 == n, self.config.tie_word_embeddings) {
            (true, false, true) => vec![("model.embed_tokens.weight".into(), n - 1)],
            (false, true, true) => vec![("model.embed_tokens.weight".into(), 0)],
            _ => Vec::new(),
        }
    }
}

impl StageDecoder for LlamaStage {
    fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }

    fn context(&self) -> usize {
        self.config.max_position_embeddings
    }

    fn num_caches(&self) -> usize {
        self.layers.len()
    }

    fn decode_stage(
        &self,
        input: Option<&DTensor>,
        ids: &[i32],
        caches: &mut [KvCache],
    ) -> Result<DTensor> {
        if self.sequence_parallel {
            return Err(Error::invalid(
                "LlamaStage::decode_stage",
                "decode with stages built without sequence parallelism",
            ));
        }
        crate::models::gpt2::check_decode(ids, caches.len(), self.layers.len())?;
        let mut x = self.input(input, ids, false)?;
        for (layer, cache) in self.layers.iter().zip(caches.iter_mut()) {
            x = layer.decode((&x, None), cache, None)?.0;
        }
        match self.norm {
            Some(_) => self.output(x.narrow(0, x.shape()[0] - 1, 1)?),
            None => Ok(x),
        }
    }
}

impl Params for LlamaStage {
    fn visit_params<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Parameter)) {
        let model = join_name(prefix, "model");
        if let Some(e) = &self.embed_tokens {
            e.visit_params(&join_name(&model, "embed_tokens"), f);
        }
        for (i, l) in self.range.clone().zip(&self.layers) {
            l.visit_params(&join_name(&model, &format!("layers.{i}")), f);
        }
        if let Some(n) = &self.norm {
            n.visit_params(&join_name(&model, "norm"), f);
        }
        if let Some(h) = &self.lm_head {
            h.visit_params(&join_name(prefix, "lm_head"), f);
        }
    }

    fn visit_params_mut<'a>(
        &'a mut self,
        prefix: &str,
        f: &mut dyn FnMut(String, &'a mut Parameter),
    ) {
        let model = join_name(prefix, "model");
        if let Some(e) = &mut self.embed_tokens {
            e.visit_params_mut(&join_name(&model, "embed_tokens"), f);
        }
        for (i, l) in self.range.clone().zip(&mut self.layers) {
            l.visit_params_mut(&join_name(&model, &format!("layers.{i}")), f);
        }
        if let Some(n) = &mut self.norm {
            n.visit_params_mut(&join_name(&model, "norm"), f);
        }
        if let Some(h) = &mut self.lm_head {
            h.visit_params_mut(&join_name(prefix, "lm_head"), f);
        }
    }
}
