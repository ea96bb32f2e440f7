//! The decoder's forward, one body for training, whole-sequence logits,
//! cached decoding and pipeline stages: embed (first stage) or take the
//! previous stage's output, run the blocks on a residual [`Stream`], then
//! (last stage) the final norm — of every row, or of the last row when
//! decoding — and the head.

use super::block::Block;
use super::model::Decoder;
use super::stream::Stream;
use crate::error::{Error, Result};
use crate::nn::kv_cache::{KvCache, Step};
use crate::tensor::{DTensor, Mapping};

/// What a forward runs over.
pub(crate) enum Over<'a> {
    /// Whole sequences of this many tokens.
    Sequences(usize),
    /// The tokens after those in the caches (one per block held).
    Cached(&'a mut [KvCache]),
}

impl Decoder {
    /// Token ids `[batch·seq]` (batch-major) → logits `[batch·seq, vocab]`,
    /// `Shard(1)` (each rank its vocab rows), every position, recorded on
    /// the tape unless inside [`no_grad`](crate::no_grad). A whole model
    /// only (a pipeline's stages run through [`Pipeline`](crate::nn::Pipeline)).
    pub fn logits(&self, ids: &[i32], seq: usize) -> Result<DTensor> {
        self.whole("Decoder::logits")?;
        self.body(None, ids, Over::Sequences(seq))
    }

    /// The mean cross-entropy (`[1]`, replicated) of the logits of `ids`
    /// against `targets` as given (no shift); `loss.backward()` fills every
    /// parameter's gradient.
    pub fn loss(&self, ids: &[i32], targets: &[i32], seq: usize) -> Result<DTensor> {
        if ids.len() != targets.len() {
            return Err(Error::shape("Decoder::loss", [ids.len()], [targets.len()]));
        }
        self.loss.forward(&self.logits(ids, seq)?, targets)
    }

    /// Cached decoding: `ids` follow the tokens already in `caches` (one
    /// per layer); returns the logits of the last one (`[1, vocab]`,
    /// `Shard(1)`). Not differentiable.
    pub fn decode_step(&self, ids: &[i32], caches: &mut [KvCache]) -> Result<DTensor> {
        self.whole("Decoder::decode_step")?;
        self.body(None, ids, Over::Cached(caches))
    }

    /// An error unless this is a whole model.
    fn whole(&self, op: &'static str) -> Result<()> {
        match self.stage {
            (_, 1) => Ok(()),
            (s, n) => Err(Error::invalid(
                op,
                format!("this is stage {s} of {n}: run the stages through a Pipeline"),
            )),
        }
    }

    /// This stage's part of a forward (module doc): the first stage embeds
    /// `ids`, the others take `input`; the last returns logits, the others
    /// their output.
    pub(crate) fn body(
        &self,
        input: Option<&DTensor>,
        ids: &[i32],
        over: Over<'_>,
    ) -> Result<DTensor> {
        const OP: &str = "Decoder::forward";
        let sp = self.options.sequence_parallel;
        let x = match (input, over_past(&over, self.blocks.len(), ids)?) {
            (Some(x), _) => x.clone(),
            (None, past) if self.stage.0 == 0 => {
                let x = self.embed_ids(ids, &over, past)?;
                match (&over, sp) {
                    (Over::Sequences(_), true) => Mapping::ScatterToParallel(0).forward(&x)?,
                    _ => x,
                }
            }
            (None, _) => {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "stage {} of {} holds no embedding: pass the previous stage's output",
                        self.stage.0, self.stage.1
                    ),
                ));
            }
        };
        let mut stream = Stream::new(x);
        let cached = matches!(over, Over::Cached(_));
        match over {
            Over::Sequences(seq) if self.recompute && crate::tensor::is_grad_enabled() => {
                for block in &self.blocks {
                    stream = Stream::new(recomputed_block(&**block, stream.value()?, seq)?);
                }
            }
            Over::Sequences(seq) => {
                for block in &self.blocks {
                    block.forward(&mut stream, Step::Sequences(seq))?;
                }
            }
            Over::Cached(caches) => {
                if sp {
                    return Err(Error::invalid(
                        OP,
                        "decode a model built without sequence parallelism",
                    ));
                }
                for (block, cache) in self.blocks.iter().zip(caches.iter_mut()) {
                    block.forward(&mut stream, Step::Cached(cache))?;
                }
            }
        }
        let Some(norm) = &self.norm else {
            return stream.value();
        };
        // Decoding wants the last position's next token only.
        let x = match cached {
            true => stream.finish_last_row(norm)?,
            false => stream.finish_normed(norm)?,
        };
        self.head(&x)
    }

    /// The embeddings of `ids`: tokens, positions (`i mod seq`, or after
    /// `past` cached ones), the scale, the dtype, dropout.
    fn embed_ids(&self, ids: &[i32], over: &Over<'_>, past: usize) -> Result<DTensor> {
        let embed = self.embed.as_ref().ok_or_else(|| {
            Error::invalid(
                "Decoder::forward",
                "internal: the first stage has no embedding",
            )
        })?;
        let mut x = embed.forward(ids)?;
        if let Some(table) = &self.positions {
            let positions: Vec<i32> = match over {
                Over::Sequences(seq) => (0..ids.len()).map(|i| (i % seq) as i32).collect(),
                Over::Cached(_) => (past..past + ids.len()).map(|p| p as i32).collect(),
            };
            x = x.add(&table.forward(&positions)?)?;
        }
        if let Some(s) = self.spec.embed_scale {
            x = x.scale(s)?;
        }
        self.drop.forward(&x.cast(self.options.activations)?)
    }

    /// The output head of normed activations: `lm_head`, or the tied
    /// embedding's rows, giving vocab-sharded logits (soft-capped where the
    /// family caps them).
    fn head(&self, x: &DTensor) -> Result<DTensor> {
        let logits = match (&self.head, &self.embed) {
            (Some(h), _) => h.forward(x)?,
            (None, Some(table)) => {
                let f = match self.options.sequence_parallel {
                    true => Mapping::AllGatherToParallel(0),
                    false => Mapping::CopyToParallel,
                };
                let h = f.forward(x)?;
                h.matmul(&table.weight().operand_for(h.dtype())?, true)?
            }
            (None, None) => {
                return Err(Error::invalid("Decoder::head", "internal: no output head"));
            }
        };
        match self.spec.logit_softcap {
            Some(cap) => logits.softcap(cap),
            None => Ok(logits),
        }
    }
}

/// Check `ids` against `over` (whole sequences of `seq`, or one cache per
/// block and at least one token); the positions already cached.
fn over_past(over: &Over<'_>, blocks: usize, ids: &[i32]) -> Result<usize> {
    match over {
        Over::Sequences(seq) => {
            if *seq == 0 || !ids.len().is_multiple_of(*seq) {
                return Err(Error::invalid(
                    "Decoder::forward",
                    format!("{} ids are not whole sequences of {seq}", ids.len()),
                ));
            }
            Ok(0)
        }
        Over::Cached(caches) => {
            if ids.is_empty() || caches.len() != blocks {
                return Err(Error::invalid(
                    "Decoder::decode",
                    format!(
                        "{} tokens and {} caches: give at least one token and one cache per \
                         layer this model or stage holds ({blocks})",
                        ids.len(),
                        caches.len()
                    ),
                ));
            }
            Ok(caches.first().map_or(0, KvCache::len))
        }
    }
}

/// `block` over whole sequences of `x`, recomputed in backward
/// ([`DTensor::recomputed`]): only `x` and the output are kept.
fn recomputed_block(block: &dyn Block, x: DTensor, seq: usize) -> Result<DTensor> {
    let trainable = block
        .named_parameters()
        .iter()
        .any(|(_, p)| !p.is_frozen() && p.value.dtype().quant().is_none());
    let block: std::sync::Arc<dyn Block> = std::sync::Arc::from(block.alias());
    x.recomputed(trainable, move |x| {
        let mut stream = Stream::new(x.clone());
        block.forward(&mut stream, Step::Sequences(seq))?;
        stream.value()
    })
}
