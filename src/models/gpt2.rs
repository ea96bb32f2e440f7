//! GPT-2 (`model_type` `gpt2`): [`Gpt2Config`] (its `config.json`),
//! [`Gpt2Attention`] (causal self-attention with a fused `c_attn`) and
//! [`Gpt2Block`] (pre-LN: `h = x + attn(ln_1(x))`, `y = h + mlp(ln_2(h))`),
//! and its checkpoint names: `wte`, `wpe`, `h.{i}`, `ln_f` (the files'
//! `transformer.` prefix stripped, the causal-mask buffers skipped), the
//! head tied to `wte`, and `Conv1D` weights stored `[in, out]` while the
//! layers hold `[out, in]`. The decoder around the blocks is
//! [`Decoder`](crate::nn::Decoder): token plus learned position
//! embeddings, then the blocks, `ln_f` and the tied head.
//!
//! `c_attn` is column-parallel `[3·H·D, hidden]` with rows `[q; k; v]`
//! (heads contiguous inside), sharded with stride 3 in whole heads, so rank
//! r holds whole heads (the first `H mod P` ranks one more; a rank may hold
//! none) and runs attention on them with no communication; `c_proj` is
//! row-parallel the same way. Per step: forward `2·layers + 4`
//! all-reduces (embedding, two per block, three in the loss), backward
//! `2·layers + 1`. Dropout (off unless the config asks, and only in
//! training mode) keys its masks on the logical tensors and the global head
//! index, so P never changes the numbers.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::device::Mesh;
use crate::element::DType;
use crate::error::{Error, Result};
use crate::kernels::{Activation, PhiloxKey};
use crate::nn::hf_config as hf;
use crate::nn::hf_config::ConfigFile;
use crate::nn::{
    Block, BlockBuild, Branch, ColumnParallelConfig, ColumnParallelLinear, DecoderConfig,
    DecoderSpec, Dropout, DropoutConfig, FinalNorm, Init, InitRng, LayerNorm, MlpConfig, Names,
    NormConfig, ParallelMlp, Params, RowParallelConfig, RowParallelLinear, Step, Stored, Stream,
};
use crate::tensor::{AttentionDropout, DTensor, RowProduct};

/// What a GPT-2 `config.json` says about the model, under its names.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Gpt2Config {
    /// Vocabulary size (rows of `wte`).
    pub vocab_size: usize,
    /// Longest sequence (rows of `wpe`); older files call it `n_ctx`.
    pub n_positions: usize,
    /// Model width.
    pub n_embd: usize,
    /// Number of blocks.
    pub n_layer: usize,
    /// Attention heads (need not divide by the world size).
    pub n_head: usize,
    /// Feed-forward width; `None` means 4 · `n_embd`.
    #[serde(default)]
    pub n_inner: Option<usize>,
    /// LayerNorm epsilon.
    #[serde(default = "default_eps")]
    pub layer_norm_epsilon: f64,
    /// Hugging Face's activation name (`gelu_new` for GPT-2).
    #[serde(default = "default_activation")]
    pub activation_function: String,
    /// Residual dropout in training mode.
    #[serde(default = "default_pdrop")]
    pub resid_pdrop: f32,
    /// Embedding dropout in training mode.
    #[serde(default = "default_pdrop")]
    pub embd_pdrop: f32,
    /// Attention-probability dropout in training mode.
    #[serde(default = "default_pdrop")]
    pub attn_pdrop: f32,
    /// Beginning-of-text token id.
    #[serde(default)]
    pub bos_token_id: Option<u32>,
    /// End-of-text token id: generation stops there.
    #[serde(default)]
    pub eos_token_id: Option<u32>,
}

fn default_eps() -> f64 {
    1e-5
}

fn default_activation() -> String {
    "gelu_new".into()
}

fn default_pdrop() -> f32 {
    0.1
}

/// Weight names Hugging Face stores as `Conv1D`, `[in, out]`.
const CONV1D: [&str; 4] = [
    ".attn.c_attn.weight",
    ".attn.c_proj.weight",
    ".mlp.c_fc.weight",
    ".mlp.c_proj.weight",
];

impl Gpt2Config {
    /// GPT-2's shape with these sizes: feed-forward 4·`n_embd`, the tanh
    /// GELU, ε 1e-5, and no dropout (a file's config gives transformers'
    /// 0.1). Sizes are checked when a model is built.
    pub fn new(
        vocab: usize,
        n_positions: usize,
        n_embd: usize,
        n_head: usize,
        n_layer: usize,
    ) -> Self {
        Gpt2Config {
            vocab_size: vocab,
            n_positions,
            n_embd,
            n_layer,
            n_head,
            n_inner: None,
            layer_norm_epsilon: 1e-5,
            activation_function: default_activation(),
            resid_pdrop: 0.0,
            embd_pdrop: 0.0,
            attn_pdrop: 0.0,
            bos_token_id: None,
            eos_token_id: None,
        }
    }

    /// The feed-forward width.
    pub fn ffn(&self) -> usize {
        self.n_inner.unwrap_or(self.n_embd.saturating_mul(4))
    }

    /// Our activation for Hugging Face's name: the tanh GELU (`gelu_new`,
    /// `gelu_pytorch_tanh`, `gelu_fast`), `relu`, `silu` / `swish`. The erf
    /// GELU (`"gelu"`) and others are errors.
    pub fn activation(&self) -> Result<Activation> {
        Ok(match self.activation_function.as_str() {
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Activation::Gelu,
            "relu" => Activation::Relu,
            "silu" | "swish" => Activation::Silu,
            "gelu" => {
                return Err(Error::invalid(
                    "Gpt2Config",
                    "activation_function \"gelu\" is the exact (erf) GELU; GPT-2 here uses the \
                     tanh approximation (\"gelu_new\"), so this model would compute different \
                     numbers",
                ));
            }
            other => {
                return Err(Error::invalid(
                    "Gpt2Config",
                    format!(
                        "activation_function {other:?} is not supported; use gelu_new, relu or \
                         silu"
                    ),
                ));
            }
        })
    }

    /// Every size and setting, errors naming `file`.
    fn check_in(&self, file: &str) -> Result<()> {
        hf::check_sizes(
            file,
            &[
                ("vocab_size", self.vocab_size),
                ("n_positions", self.n_positions),
                ("n_embd", self.n_embd),
                ("n_layer", self.n_layer),
                ("n_head", self.n_head),
                ("n_inner", self.ffn()),
            ],
        )?;
        if !self.n_embd.is_multiple_of(self.n_head) {
            return Err(hf::bad(
                file,
                format!(
                    "n_embd {} is not a multiple of n_head {}",
                    self.n_embd, self.n_head
                ),
            ));
        }
        hf::check_eps(file, "layer_norm_epsilon", self.layer_norm_epsilon)?;
        for (key, p) in [
            ("resid_pdrop", self.resid_pdrop),
            ("embd_pdrop", self.embd_pdrop),
            ("attn_pdrop", self.attn_pdrop),
        ] {
            if !(0.0..1.0).contains(&p) {
                return Err(hf::bad(file, format!("{key} {p} must lie in [0, 1)")));
            }
        }
        self.activation()
            .map_err(|e| hf::bad(file, e.to_string()))
            .map(|_| ())
    }

    /// Per block: (parameters split over ranks, held whole on every rank).
    fn block_split(&self) -> (u128, u128) {
        let [h, f] = [self.n_embd, self.ffn()].map(|x| x as u128);
        let mul = |a: u128, b: u128| a.saturating_mul(b);
        // q, k, v with biases, the attention projection, the MLP's two
        // products and its first bias are split; norms and the row layers'
        // biases are whole.
        let split = mul(4, mul(h, h))
            .saturating_add(mul(3, h))
            .saturating_add(mul(2, mul(h, f)))
            .saturating_add(f);
        (split, mul(6, h))
    }
}

impl ConfigFile for Gpt2Config {
    /// Parse the text of a `config.json`; `file` names it in errors.
    /// Options this crate does not implement (`add_cross_attention`,
    /// `scale_attn_weights: false`, `scale_attn_by_inverse_layer_idx`, an
    /// erf GELU) are errors naming them.
    fn from_json(text: &str, file: &str) -> Result<Self> {
        let mut obj = hf::object(text, file)?;
        hf::model_type(&obj, file, &["gpt2"])?;
        hf::refuse_unsupported(&obj, file)?;
        for (key, want) in [
            ("add_cross_attention", false),
            ("scale_attn_weights", true),
            ("scale_attn_by_inverse_layer_idx", false),
        ] {
            if obj
                .get(key)
                .and_then(Value::as_bool)
                .is_some_and(|v| v != want)
            {
                return Err(hf::bad(
                    file,
                    format!(
                        "{key}: {} is not supported; GPT-2 here computes {want}",
                        !want
                    ),
                ));
            }
        }
        // `n_ctx` is the older name of `n_positions`.
        if !obj.contains_key("n_positions") {
            match obj.remove("n_ctx") {
                Some(v) => {
                    obj.insert("n_positions".into(), v);
                }
                None => return Err(hf::bad(file, "n_positions (or n_ctx) is missing")),
            }
        }
        let c: Gpt2Config = hf::parse(strip_nulls(obj), file)?;
        c.check_in(file)?;
        Ok(c)
    }
}

/// `obj` without its `null` values (transformers writes `n_inner: null`).
fn strip_nulls(mut obj: Map<String, Value>) -> Map<String, Value> {
    obj.retain(|_, v| !v.is_null());
    obj
}

/// Settings of a [`Gpt2Attention`].
#[derive(Clone, Copy, Debug)]
pub struct Gpt2AttentionConfig {
    /// Model width (`hidden = heads × head_dim` is not required).
    pub hidden: usize,
    /// Attention heads (need not divide by the world size).
    pub heads: usize,
    /// Width of each head.
    pub head_dim: usize,
    /// Whether `c_attn` and `c_proj` have biases.
    pub bias: bool,
    /// Initialiser of `c_attn`'s weight (biases start at zero).
    pub init: Init,
    /// Initialiser of `c_proj`'s weight (GPT-2 scales it by 1/√(2·layers)).
    pub proj_init: Init,
    /// Sequence parallelism: the input and output are `Shard(0)` (tokens).
    pub sequence_parallel: bool,
    /// Dropout on the attention probabilities in training mode; 0 is off.
    pub dropout: f32,
    /// Seed of its masks.
    pub dropout_seed: u64,
    /// Its layer id (distinct from every other dropout of the model).
    pub dropout_layer: u32,
}

impl Gpt2AttentionConfig {
    /// `heads` heads of `hidden / heads` each, biases on, N(0, 0.02²)
    /// weights, no sequence parallelism, no dropout.
    pub fn new(hidden: usize, heads: usize) -> Self {
        Gpt2AttentionConfig {
            hidden,
            heads,
            head_dim: hidden.checked_div(heads).unwrap_or(0),
            bias: true,
            init: Init::default(),
            proj_init: Init::default(),
            sequence_parallel: false,
            dropout: 0.0,
            dropout_seed: 0,
            dropout_layer: 0,
        }
    }
}

/// Causal self-attention with whole heads on each rank (module doc).
#[derive(Clone, Debug, Params)]
pub struct Gpt2Attention {
    /// Fused `[q; k; v]` projection, column-parallel by heads.
    pub c_attn: ColumnParallelLinear,
    /// Output projection, row-parallel by heads.
    pub c_proj: RowParallelLinear,
    #[params(skip)]
    config: Gpt2AttentionConfig,
    #[params(skip)]
    mode: (bool, u64),
}

impl Gpt2Attention {
    /// A layer initialised from `rng` (`c_attn` first, then `c_proj`), in
    /// training mode.
    pub fn new(mesh: &Mesh, config: Gpt2AttentionConfig, rng: &mut InitRng) -> Result<Self> {
        let (h, heads, d) = (config.hidden, config.heads, config.head_dim);
        if h == 0 || heads == 0 || d == 0 || !(0.0..1.0).contains(&config.dropout) {
            return Err(Error::invalid(
                "Gpt2Attention::new",
                format!(
                    "hidden {h}, heads {heads}, head_dim {d}: all at least 1, and dropout {} in \
                     [0, 1)",
                    config.dropout
                ),
            ));
        }
        let mut c_attn = ColumnParallelConfig::new(h, 3 * heads * d);
        (c_attn.bias, c_attn.init) = (config.bias, config.init);
        (c_attn.stride, c_attn.shard_unit) = (3, d);
        c_attn.sequence_parallel = config.sequence_parallel;
        let mut c_proj = RowParallelConfig::new(heads * d, h);
        (c_proj.bias, c_proj.init) = (config.bias, config.proj_init);
        c_proj.shard_unit = d;
        c_proj.sequence_parallel = config.sequence_parallel;
        Ok(Gpt2Attention {
            c_attn: ColumnParallelLinear::new(mesh, c_attn, rng)?,
            c_proj: RowParallelLinear::new(mesh, c_proj, rng)?,
            config,
            mode: (true, 0),
        })
    }

    /// The settings.
    pub fn config(&self) -> &Gpt2AttentionConfig {
        &self.config
    }

    /// Heads rank `r` of `p` holds.
    pub fn local_heads(&self, p: usize, r: usize) -> std::ops::Range<usize> {
        crate::shard::split_range(self.config.heads, p, r)
    }

    /// `x` `[tokens, hidden]` → the same shape and placement: `c_attn`,
    /// attention of each rank's heads (on the f32 widening of f16
    /// activations), `c_proj`; over whole sequences or, with
    /// [`Step::Cached`], the new tokens after the cached ones (one
    /// all-reduce, in `c_proj`).
    pub fn forward(&self, x: &DTensor, step: Step<'_>) -> Result<DTensor> {
        self.product(x, step)?.resolve()
    }

    /// [`Self::forward`] with `c_proj`'s product not yet summed over the
    /// ranks ([`RowProduct::finish`]).
    pub fn product(&self, x: &DTensor, step: Step<'_>) -> Result<RowProduct> {
        let (heads, d) = (self.config.heads, self.config.head_dim);
        let qkv = self.c_attn.forward(x)?.cast(DType::F32)?;
        let out = match step {
            Step::Sequences(seq) => qkv.causal_attention(seq, heads, d, self.probs_dropout())?,
            Step::Cached(cache) => {
                if self.config.sequence_parallel {
                    return Err(Error::invalid(
                        "Gpt2Attention::forward",
                        "decode a model built without sequence parallelism (decoding has one \
                         token per step)",
                    ));
                }
                let (out, grown) = qkv.attention_decode(cache.kv.as_ref(), heads, d)?;
                cache.len += x.shape()[0];
                cache.kv = Some(grown);
                out
            }
        };
        self.c_proj.product(&out.cast(x.dtype())?)
    }

    /// Training mode (probability dropout on, masks keyed on `step`) or
    /// evaluation mode (off).
    pub fn set_mode(&mut self, training: bool, step: u64) {
        self.mode = (training, step);
    }

    fn probs_dropout(&self) -> Option<AttentionDropout> {
        let c = &self.config;
        let (training, step) = self.mode;
        (training && c.dropout > 0.0).then_some(AttentionDropout {
            p: c.dropout,
            key: PhiloxKey {
                seed: c.dropout_seed,
                step,
                layer: c.dropout_layer,
            },
        })
    }
}

/// GPT-2's pre-LN block (module doc), with residual dropout.
#[derive(Clone, Debug, Params)]
pub struct Gpt2Block {
    /// Norm before attention.
    pub ln_1: LayerNorm,
    /// Self-attention, heads split over ranks.
    pub attn: Gpt2Attention,
    /// Norm before the MLP.
    pub ln_2: LayerNorm,
    /// Feed-forward pair.
    pub mlp: ParallelMlp,
    /// Dropout of the attention branch.
    pub drop_attn: Dropout,
    /// Dropout of the MLP branch.
    pub drop_mlp: Dropout,
}

impl Block for Gpt2Block {
    fn forward(&self, s: &mut Stream, step: Step<'_>) -> Result<()> {
        s.branch(Some(&self.ln_1), |n| {
            Branch::dropout(self.attn.product(n, step)?, &self.drop_attn)
        })?;
        s.branch(Some(&self.ln_2), |n| {
            Branch::dropout(self.mlp.product(n)?, &self.drop_mlp)
        })
    }

    fn set_mode(&mut self, training: bool, step: u64) {
        self.drop_attn.set_mode(training, step);
        self.drop_mlp.set_mode(training, step);
        self.attn.set_mode(training, step);
    }
}

impl DecoderConfig for Gpt2Config {
    fn model_type(&self) -> &str {
        "gpt2"
    }

    fn spec(&self) -> DecoderSpec {
        DecoderSpec {
            vocab: self.vocab_size,
            hidden: self.n_embd,
            layers: self.n_layer,
            context: self.n_positions,
            tied: true,
            positions: true,
            embed_scale: None,
            embed_dropout: self.embd_pdrop,
            padding_idx: None,
            norm: FinalNorm::Layer(self.layer_norm_epsilon as f32),
            logit_softcap: None,
            names: Names {
                embed: "wte",
                positions: "wpe",
                layers: "h",
                norm: "ln_f",
                head: "lm_head",
            },
        }
    }

    fn check(&self) -> Result<()> {
        hf::in_code("Gpt2Config", |f| self.check_in(f))
    }

    /// `c_attn`, `attn.c_proj`, `c_fc`, `mlp.c_proj`.
    fn block_keys(&self) -> u64 {
        4
    }

    fn block(
        &self,
        mesh: &Mesh,
        i: usize,
        b: &BlockBuild,
        rng: &mut InitRng,
    ) -> Result<Box<dyn Block>> {
        let (h, sp) = (self.n_embd, b.sequence_parallel);
        // GPT-2 scales the residual projections by 1/√(2·layers).
        let std = 0.02 / (2.0 * self.n_layer as f32).sqrt();
        let proj = b.pick(Init::Normal { mean: 0.0, std });
        let mut norm = NormConfig::new(h);
        norm.eps = self.layer_norm_epsilon as f32;
        // Dropout layer 0 is the embeddings'; block i uses 3i + 1 (attention
        // branch), 3i + 2 (MLP branch), 3i + 3 (probabilities).
        let layer = 3 * i as u32 + 1;
        let drop = |p: f32, layer: u32| {
            Dropout::new(DropoutConfig {
                p,
                seed: b.seed,
                layer,
            })
        };
        let mut a = Gpt2AttentionConfig::new(h, self.n_head);
        (a.init, a.proj_init, a.sequence_parallel) = (b.init, proj, sp);
        (a.dropout, a.dropout_seed, a.dropout_layer) = (self.attn_pdrop, b.seed, layer + 2);
        let attn = Gpt2Attention::new(mesh, a, rng)?;
        let mut mlp = MlpConfig::new(h, self.ffn());
        (mlp.init, mlp.proj_init, mlp.sequence_parallel) = (b.init, proj, sp);
        mlp.activation = self.activation()?;
        Ok(Box::new(Gpt2Block {
            ln_1: LayerNorm::new(mesh, norm)?,
            attn,
            ln_2: LayerNorm::new(mesh, norm)?,
            mlp: ParallelMlp::new(mesh, mlp, rng)?,
            drop_attn: drop(self.resid_pdrop, layer)?,
            drop_mlp: drop(self.resid_pdrop, layer + 1)?,
        }))
    }

    fn block_parameters(&self, _layer: usize) -> u128 {
        let (split, whole) = self.block_split();
        split.saturating_add(whole)
    }

    fn block_bytes(&self, mesh: &Mesh, _layer: usize) -> u128 {
        let (split, whole) = self.block_split();
        mesh.held_bytes(split, whole, 4)
    }

    fn describe(&self) -> String {
        format!(
            "gpt2: {} layers · hidden {} · {} heads · MLP {} ({}) · ε {} · vocab {} · context {}",
            self.n_layer,
            self.n_embd,
            self.n_head,
            self.ffn(),
            self.activation_function,
            self.layer_norm_epsilon,
            self.vocab_size,
            self.n_positions
        )
    }

    /// GPT-2's head is always `wte`.
    fn set_tied(&mut self, _tied: bool) {}

    /// `model_type: "gpt2"`, `architectures: ["GPT2LMHeadModel"]` and every
    /// field, so transformers builds the same model.
    fn to_json(&self, eos: &[i32]) -> Result<String> {
        let v = json!({
            "architectures": ["GPT2LMHeadModel"],
            "model_type": "gpt2",
            "vocab_size": self.vocab_size,
            "n_positions": self.n_positions,
            "n_ctx": self.n_positions,
            "n_embd": self.n_embd,
            "n_layer": self.n_layer,
            "n_head": self.n_head,
            "n_inner": self.n_inner,
            "activation_function": self.activation_function,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "resid_pdrop": hf::shortest(self.resid_pdrop),
            "embd_pdrop": hf::shortest(self.embd_pdrop),
            "attn_pdrop": hf::shortest(self.attn_pdrop),
            "initializer_range": 0.02,
            "scale_attn_weights": true,
            "use_cache": true,
            "tie_word_embeddings": true,
        });
        let Value::Object(mut obj) = v else {
            return Err(Error::invalid(
                "Gpt2Config::to_json",
                "internal: not an object",
            ));
        };
        if let Some(id) = self.bos_token_id {
            obj.insert("bos_token_id".into(), id.into());
        }
        // The config's own eos id where generation names none.
        let own: Vec<i32> = self.eos_token_id.map(|i| i as i32).into_iter().collect();
        let eos = if eos.is_empty() { &own[..] } else { eos };
        Ok(hf::finish_json(obj, eos, None))
    }

    /// The `transformer.` prefix stripped (`GPT2LMHeadModel`'s files have
    /// it, `GPT2Model`'s not); the causal-mask buffers skipped.
    fn sanitize(&self, name: &str) -> Option<String> {
        let name = name.strip_prefix("transformer.").unwrap_or(name);
        let mask = name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
        (!mask).then(|| name.to_string())
    }

    /// `Conv1D` weights are stored transposed, `[in, out]`.
    /// `GPT2LMHeadModel` holds the blocks under `transformer.`.
    fn module_name(&self, name: &str) -> String {
        if name.starts_with("lm_head") {
            name.to_string()
        } else {
            format!("transformer.{name}")
        }
    }

    fn stored(&self, name: &str, shape: &[usize]) -> Stored {
        match shape {
            [out, inp] if CONV1D.iter().any(|s| name.ends_with(s)) => Stored {
                key: name.to_string(),
                shape: vec![*inp, *out],
                rows: 0..*inp,
                transposed: true,
                order: None,
            },
            _ => Stored::same(name, shape),
        }
    }
}
