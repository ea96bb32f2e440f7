//! [`Decoder`]: the skeleton every causal decoder family shares — token
//! (and position) embedding, a range of the family's blocks, the final norm
//! and a tied or untied head, the loss — built from a [`DecoderConfig`]
//! as a whole model (layers `0..L`) or as one pipeline stage (its range:
//! the first stage embeds, the last norms, projects and takes the loss, and
//! keeps its own copy of a tied table).

use std::ops::Range;

use super::block::Block;
use super::options::LoadOptions;
use super::spec::{BlockBuild, DecoderConfig, DecoderSpec, FinalNorm, IntoDecoderConfig};
use crate::device::Mesh;
use crate::element::DType;
use crate::error::{Error, Result};
use crate::nn::cross_entropy::{CrossEntropyConfig, Reduction, VocabParallelCrossEntropy};
use crate::nn::dropout::{Dropout, DropoutConfig};
use crate::nn::embedding::{Embedding, EmbeddingConfig, VocabParallelEmbedding};
use crate::nn::generation_config::GenerationConfig;
use crate::nn::init::{Init, InitRng};
use crate::nn::linear::{ColumnParallelConfig, ColumnParallelLinear};
use crate::nn::norm::{LayerNorm, Norm, NormConfig, RMSNorm};
use crate::nn::pipeline::Pipeline;

/// A causal decoder of any family, whole or one pipeline stage (module doc).
#[derive(Debug)]
pub struct Decoder {
    /// The token embedding: on the first stage, and on the last when tied.
    pub(crate) embed: Option<VocabParallelEmbedding>,
    /// The learned position embedding (first stage; GPT-2).
    pub(crate) positions: Option<Embedding>,
    /// Dropout of the embeddings.
    pub(crate) drop: Dropout,
    /// This stage's blocks, layers `range` of the model.
    pub(crate) blocks: Vec<Box<dyn Block>>,
    /// The final norm (last stage).
    pub(crate) norm: Option<Norm>,
    /// The untied head (last stage).
    pub(crate) head: Option<ColumnParallelLinear>,
    pub(crate) loss: VocabParallelCrossEntropy,
    pub(crate) config: Box<dyn DecoderConfig>,
    pub(crate) spec: DecoderSpec,
    pub(crate) options: LoadOptions,
    pub(crate) range: Range<usize>,
    pub(crate) stage: (usize, usize),
    pub(crate) mesh: Mesh,
    pub(crate) generation: GenerationConfig,
    /// The adapters' settings, once [`Decoder::add_lora`] added them.
    pub(crate) lora: Option<crate::nn::lora::LoraConfig>,
    /// Activation recomputation ([`Decoder::set_recompute`]).
    pub(crate) recompute: bool,
}

impl Decoder {
    /// A model of `config` whose weights are drawn from `seed` (the same at
    /// every world size): N(0, 0.02²) matrices (as the family scales
    /// them), ones in the norms, zero biases.
    pub fn new(mesh: &Mesh, config: impl IntoDecoderConfig, seed: u64) -> Result<Decoder> {
        Self::new_with(mesh, config, seed, LoadOptions::default())
    }

    /// [`Decoder::new`] with [`LoadOptions`] (sequence parallelism, the
    /// activations' and the weights' dtypes).
    pub fn new_with(
        mesh: &Mesh,
        config: impl IntoDecoderConfig,
        seed: u64,
        opts: LoadOptions,
    ) -> Result<Decoder> {
        let mut model = Self::build(mesh, config.into_config(), Some(seed), opts, None)?;
        model.keep_weights(opts.weight_dtype)?;
        Ok(model)
    }

    /// The stage of `pipeline` that `group` (a mesh of the other axes)
    /// belongs to: the layers [`Pipeline::layers`] gives it, with the
    /// weights [`Decoder::new`] draws from `seed` for them and the whole
    /// model's names. f32 activations.
    pub fn stage(
        group: &Mesh,
        config: impl IntoDecoderConfig,
        seed: u64,
        pipeline: &Pipeline,
        opts: LoadOptions,
    ) -> Result<Decoder> {
        if opts.activations != DType::F32 {
            return Err(Error::invalid(
                "Decoder::stage",
                "pipeline stages pass f32 activations: use LoadOptions::activations(F32)",
            ));
        }
        let mut model = Self::build(
            group,
            config.into_config(),
            Some(seed),
            opts,
            Some(pipeline),
        )?;
        model.keep_weights(opts.weight_dtype)?;
        Ok(model)
    }

    /// The model or stage of `config`, drawn from `seed` or (`None`) zeroed
    /// to load over. Every size and the memory are checked first.
    pub(crate) fn build(
        mesh: &Mesh,
        config: Box<dyn DecoderConfig>,
        seed: Option<u64>,
        opts: LoadOptions,
        pipeline: Option<&Pipeline>,
    ) -> Result<Decoder> {
        const OP: &str = "Decoder::new";
        config.check()?;
        let spec = config.spec();
        check_spec(OP, mesh, &spec, opts)?;
        let (stage, stages) = match pipeline {
            Some(p) => (p.stage_of(mesh)?, p.stages()),
            None => (0, 1),
        };
        let range = match pipeline {
            Some(p) => p.layers(spec.layers, stage)?,
            None => 0..spec.layers,
        };
        let (first, last) = (stage == 0, stage + 1 == stages);
        let bytes = parameter_bytes(&*config, mesh, (first, last), range.clone());
        let what = format!("{} parameters", range.len());
        mesh.check_memory(OP, &what, bytes)?;
        let random = seed.is_some();
        let seed = seed.unwrap_or(0);
        let build = BlockBuild {
            random,
            init: if random { Init::default() } else { Init::Zeros },
            sequence_parallel: opts.sequence_parallel,
            seed,
        };
        let mut rng = InitRng::new(seed);
        let table = |rows: usize| {
            let mut c = EmbeddingConfig::new(rows, spec.hidden);
            c.init = build.init;
            c
        };
        let embed = match first || (last && spec.tied) {
            true => {
                let mut t = table(spec.vocab);
                t.padding_idx = spec.padding_idx;
                Some(VocabParallelEmbedding::new(mesh, t, &mut rng)?)
            }
            false => {
                rng.skip(1);
                None
            }
        };
        let positions = match (spec.positions, first) {
            (true, true) => Some(Embedding::new(mesh, table(spec.context), &mut rng)?),
            (true, false) => {
                rng.skip(1);
                None
            }
            (false, _) => None,
        };
        let keys = config.block_keys();
        rng.skip(keys.saturating_mul(range.start as u64));
        let blocks = range
            .clone()
            .map(|i| config.block(mesh, i, &build, &mut rng))
            .collect::<Result<Vec<_>>>()?;
        rng.skip(keys.saturating_mul((spec.layers - range.end) as u64));
        let head = match last && !spec.tied {
            true => {
                let mut h = ColumnParallelConfig::new(spec.hidden, spec.vocab);
                (h.bias, h.init) = (false, build.init);
                h.sequence_parallel = opts.sequence_parallel;
                Some(ColumnParallelLinear::new(mesh, h, &mut rng)?)
            }
            false => None,
        };
        let norm = match last {
            true => Some(final_norm(mesh, spec.hidden, spec.norm)?),
            false => None,
        };
        Ok(Decoder {
            embed,
            positions,
            drop: Dropout::new(DropoutConfig {
                p: spec.embed_dropout,
                seed,
                layer: 0,
            })?,
            blocks,
            norm,
            head,
            loss: VocabParallelCrossEntropy::new(CrossEntropyConfig {
                reduction: Reduction::Mean,
                // transformers' label for a position not trained on.
                ignore_index: Some(-100),
                ..Default::default()
            })?,
            config,
            spec,
            options: opts,
            range,
            stage: (stage, stages),
            mesh: mesh.clone(),
            generation: GenerationConfig::default(),
            lora: None,
            recompute: false,
        })
    }

    /// Keep the weight matrices in `dtype` and give the f32 values' memory
    /// back to the devices.
    pub(crate) fn keep_weights(&mut self, dtype: DType) -> Result<()> {
        if dtype != DType::F32 {
            crate::nn::Params::store_weights_as(self, dtype)?;
        }
        // Also after loading quantized blocks over the f32 zeros built first.
        for r in self.mesh.ranks() {
            r.device().trim_pool();
        }
        self.options.weight_dtype = dtype;
        Ok(())
    }
}

/// The skeleton's own checks: sizes and the activations' dtype.
fn check_spec(op: &'static str, mesh: &Mesh, s: &DecoderSpec, opts: LoadOptions) -> Result<()> {
    if s.vocab == 0 || s.hidden == 0 || s.layers == 0 || s.context == 0 {
        return Err(Error::invalid(
            op,
            "vocab, hidden, layers and context must be at least 1",
        ));
    }
    if let Some(pad) = s.padding_idx.filter(|&p| p >= s.vocab) {
        return Err(Error::invalid(
            op,
            format!("pad_token_id {pad} is past the vocabulary of {}", s.vocab),
        ));
    }
    if !(0.0..1.0).contains(&s.embed_dropout) {
        return Err(Error::invalid(
            op,
            format!("embedding dropout {} must lie in [0, 1)", s.embed_dropout),
        ));
    }
    match opts.activations {
        DType::F32 => Ok(()),
        DType::F16 => {
            // Fails here, naming the feature, rather than at the first step.
            for r in mesh.ranks() {
                r.device().check_dtype(op, DType::F16)?;
            }
            Ok(())
        }
        DType::I32 | DType::BF16 | DType::Quant(_) => Err(Error::invalid(
            op,
            "the activation dtype must be F32 or F16 (bf16 is for weights: \
             LoadOptions::weights, Params::store_weights_as)",
        )),
    }
}

/// The final norm a spec asks for.
fn final_norm(mesh: &Mesh, hidden: usize, norm: FinalNorm) -> Result<Norm> {
    Ok(match norm {
        FinalNorm::Layer(eps) => {
            let mut c = NormConfig::new(hidden);
            c.eps = eps;
            Norm::Layer(LayerNorm::new(mesh, c)?)
        }
        FinalNorm::Rms(eps) => {
            let mut c = NormConfig::rms(hidden);
            c.eps = eps;
            Norm::Rms(RMSNorm::new(mesh, c)?)
        }
        FinalNorm::RmsPlusOne(eps) => {
            let mut c = NormConfig::rms(hidden);
            (c.eps, c.offset) = (eps, 1.0);
            Norm::Rms(RMSNorm::new(mesh, c)?)
        }
    })
}

/// The number of parameters of the whole model `config` describes.
pub fn num_parameters(config: &dyn DecoderConfig) -> u128 {
    let s = config.spec();
    let [v, h, n] = [s.vocab, s.hidden, s.context].map(|x| x as u128);
    let heads = if s.tied { 1 } else { 2 };
    let positions = if s.positions { n * h } else { 0 };
    let norm = match s.norm {
        FinalNorm::Layer(_) => 2 * h,
        _ => h,
    };
    (0..s.layers)
        .map(|i| config.block_parameters(i))
        .fold(0u128, u128::saturating_add)
        .saturating_add(v.saturating_mul(h).saturating_mul(heads))
        .saturating_add(positions)
        .saturating_add(norm)
}

/// Bytes of f32 parameters a stage holding `range` puts on this process's
/// ranks of `mesh`.
fn parameter_bytes(
    config: &dyn DecoderConfig,
    mesh: &Mesh,
    (first, last): (bool, bool),
    range: Range<usize>,
) -> u128 {
    let s = config.spec();
    let [v, h, n] = [s.vocab, s.hidden, s.context].map(|x| x as u128);
    let flag = |b: bool, x: u128| if b { x } else { 0 };
    let table = v.saturating_mul(h);
    let split = flag(first || (last && s.tied), table).saturating_add(flag(last && !s.tied, table));
    let norm = match s.norm {
        FinalNorm::Layer(_) => 2 * h,
        _ => h,
    };
    let whole = flag(first && s.positions, n.saturating_mul(h)).saturating_add(flag(last, norm));
    range
        .map(|i| config.block_bytes(mesh, i))
        .fold(mesh.held_bytes(split, whole, 4), u128::saturating_add)
}
