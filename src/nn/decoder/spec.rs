//! What a model family gives the decoder skeleton: its config as a
//! [`DecoderConfig`] (sizes, names, its block, where its parameters live in
//! a checkpoint) and the skeleton's part of it, [`DecoderSpec`].

use std::ops::Range;

use super::any::AsAny;
use super::block::Block;
use crate::device::Mesh;
use crate::error::Result;
use crate::nn::init::{Init, InitRng};

/// The skeleton's names for its own parameters (each under `.weight`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Names {
    /// The token embedding (`model.embed_tokens`; GPT-2 `wte`).
    pub embed: &'static str,
    /// The learned position embedding, if any (GPT-2 `wpe`).
    pub positions: &'static str,
    /// The blocks, numbered under it (`model.layers`; GPT-2 `h`).
    pub layers: &'static str,
    /// The final norm (`model.norm`; GPT-2 `ln_f`).
    pub norm: &'static str,
    /// The untied output head (`lm_head`).
    pub head: &'static str,
}

impl Names {
    /// Hugging Face's names of the Llama family and most decoders since:
    /// `model.embed_tokens`, `model.layers`, `model.norm`, `lm_head`.
    pub const HF: Names = Names {
        embed: "model.embed_tokens",
        positions: "model.embed_positions",
        layers: "model.layers",
        norm: "model.norm",
        head: "lm_head",
    };
}

/// The norm after the last block.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FinalNorm {
    /// LayerNorm with this ε (GPT-2).
    Layer(f32),
    /// RMSNorm with this ε.
    Rms(f32),
    /// RMSNorm scaling by `1 + γ` (γ starting at zero) with this ε (Gemma).
    RmsPlusOne(f32),
}

/// The skeleton's part of a family's config: sizes, embedding, final norm
/// and head.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DecoderSpec {
    /// Vocabulary size.
    pub vocab: usize,
    /// Model width.
    pub hidden: usize,
    /// Number of blocks.
    pub layers: usize,
    /// Longest sequence (rows of the position table where there is one).
    pub context: usize,
    /// The head is the token embedding.
    pub tied: bool,
    /// A learned position embedding of `context` rows (GPT-2).
    pub positions: bool,
    /// Embeddings multiplied by this (Gemma: √hidden).
    pub embed_scale: Option<f32>,
    /// Dropout of the embeddings in training mode (GPT-2's `embd_pdrop`).
    pub embed_dropout: f32,
    /// The token whose embedding row gets no gradient from lookups
    /// (`pad_token_id`: transformers' `padding_idx`).
    pub padding_idx: Option<usize>,
    /// The final norm.
    pub norm: FinalNorm,
    /// Logits soft-capped to `cap · tanh(logits / cap)` (Gemma 2).
    pub logit_softcap: Option<f32>,
    /// Parameter names.
    pub names: Names,
}

impl DecoderSpec {
    /// A decoder of Hugging Face's layout (`model.embed_tokens`,
    /// `model.layers`, `model.norm`, `lm_head`): no position table, no
    /// embedding scale, dropout or padding row, no logit cap.
    pub fn hf(
        (vocab, hidden, layers, context): (usize, usize, usize, usize),
        tied: bool,
        norm: FinalNorm,
    ) -> Self {
        DecoderSpec {
            vocab,
            hidden,
            layers,
            context,
            tied,
            positions: false,
            embed_scale: None,
            embed_dropout: 0.0,
            padding_idx: None,
            norm,
            logit_softcap: None,
            names: Names::HF,
        }
    }
}

/// How blocks are built: drawn or zeroed, and the model-wide settings.
#[derive(Clone, Copy, Debug)]
pub struct BlockBuild {
    /// Draw weights (`true`) or start at zero to load over (`false`).
    pub random: bool,
    /// The initialiser of drawn weights (N(0, 0.02²)), or zeros.
    pub init: Init,
    /// Sequence parallelism.
    pub sequence_parallel: bool,
    /// Seed of dropout masks.
    pub seed: u64,
}

impl BlockBuild {
    /// `init` if drawing, else zeros.
    pub fn pick(&self, init: Init) -> Init {
        if self.random { init } else { Init::Zeros }
    }
}

/// Where a parameter is kept in a checkpoint's files: a tensor (after the
/// family's [`DecoderConfig::sanitize`]), its shape there, and which of its
/// rows hold the parameter (Phi-3's fused `qkv_proj`), possibly transposed
/// (GPT-2's `Conv1D` weights, `[in, out]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// The tensor's key.
    pub key: String,
    /// Its shape in the file.
    pub shape: Vec<usize>,
    /// The rows (of the file's first dim) that hold the parameter.
    pub rows: Range<usize>,
    /// The parameter is the transpose of those rows.
    pub transposed: bool,
    /// Row `i` of the parameter is row `rows.start + order[i]` of the file
    /// (a family's permutation, e.g. Phi-3's partial rotary layout);
    /// `None`: in order.
    pub order: Option<Vec<usize>>,
}

impl Stored {
    /// The parameter whole under its own name.
    pub fn same(name: &str, shape: &[usize]) -> Stored {
        Stored {
            key: name.to_string(),
            shape: shape.to_vec(),
            rows: 0..shape.first().copied().unwrap_or(1),
            transposed: false,
            order: None,
        }
    }
}

/// A model family's config, as the decoder skeleton uses it (object safe:
/// [`Decoder`](super::Decoder) holds one whichever the family). Reach the
/// family's own type with [`AsAny::as_any`].
pub trait DecoderConfig: AsAny + CloneConfig + std::fmt::Debug + Send + Sync {
    /// `model_type` as `config.json` spells it.
    fn model_type(&self) -> &str;

    /// The skeleton's part: sizes, embedding, final norm, head, names.
    fn spec(&self) -> DecoderSpec;

    /// Every size and setting checked, as reading `config.json` checks
    /// them, before anything is allocated.
    fn check(&self) -> Result<()>;

    /// Keys one block draws from the [`InitRng`] (a pipeline stage skips
    /// those of the layers it does not hold): by default seven, a
    /// grouped-query block's q, k, v, o, gate, up and down.
    fn block_keys(&self) -> u64 {
        7
    }

    /// Block `layer` on `mesh`, drawn from `rng` or zeroed.
    fn block(
        &self,
        mesh: &Mesh,
        layer: usize,
        build: &BlockBuild,
        rng: &mut InitRng,
    ) -> Result<Box<dyn Block>>;

    /// Parameters of block `layer`.
    fn block_parameters(&self, layer: usize) -> u128;

    /// Bytes of f32 parameters block `layer` puts on this process's ranks
    /// of `mesh` (checked before anything is allocated).
    fn block_bytes(&self, mesh: &Mesh, layer: usize) -> u128;

    /// One line about the model: family, sizes, heads.
    fn describe(&self) -> String;

    /// Tie (or untie) the head to the embedding: a directory without head
    /// weights ties it.
    fn set_tied(&mut self, tied: bool);

    /// The `config.json` `save_pretrained` writes, naming `eos` as
    /// `eos_token_id`, which transformers reads as this model.
    fn to_json(&self, eos: &[i32]) -> Result<String>;

    /// The module `name` (a dotted path of this crate's names, e.g. a
    /// layer's) has in transformers' model: how PEFT names its adapters
    /// (`base_model.model.` + this). By default the same.
    fn module_name(&self, name: &str) -> String {
        name.to_string()
    }

    /// A checkpoint tensor's name as this crate's key, or `None` for a
    /// tensor that is no parameter (buffers such as `rotary_emb.inv_freq`).
    fn sanitize(&self, name: &str) -> Option<String> {
        Some(name.to_string())
    }

    /// Where parameter `name` of `shape` is kept in a checkpoint.
    fn stored(&self, name: &str, shape: &[usize]) -> Stored {
        Stored::same(name, shape)
    }
}

/// A config copied into a box (every `Clone` config is).
pub trait CloneConfig {
    /// A boxed copy.
    fn clone_box(&self) -> Box<dyn DecoderConfig>;
}

impl<T: DecoderConfig + Clone> CloneConfig for T {
    fn clone_box(&self) -> Box<dyn DecoderConfig> {
        Box::new(self.clone())
    }
}

impl Clone for Box<dyn DecoderConfig> {
    fn clone(&self) -> Self {
        self.as_ref().clone_box()
    }
}

/// What [`Decoder::new`](super::Decoder::new) takes: a family's config, or
/// one already boxed (code generic over families).
pub trait IntoDecoderConfig {
    /// The config, boxed once.
    fn into_config(self) -> Box<dyn DecoderConfig>;
}

impl<T: DecoderConfig> IntoDecoderConfig for T {
    fn into_config(self) -> Box<dyn DecoderConfig> {
        Box::new(self)
    }
}

impl IntoDecoderConfig for Box<dyn DecoderConfig> {
    fn into_config(self) -> Box<dyn DecoderConfig> {
        self
    }
}
