//! Phi-3, Phi-3.5 and Phi-4-mini (`phi3`): [`Phi3Config`] and [`Phi3Block`],
//! a Llama-shaped block (RMSNorm → grouped-query attention → residual →
//! RMSNorm → SwiGLU → residual, residual dropout in training) whose
//! checkpoints fuse `qkv_proj` (`[q; k; v]` rows) and `gate_up_proj`
//! (`[gate; up]`). [`DecoderConfig::stored`] names the rows each of this
//! crate's column-parallel projections takes, so loading splits them and
//! `save_pretrained` joins them again. RoPE may be `longrope` (short and
//! long per-dimension factors, switching past
//! `original_max_position_embeddings`) and partial
//! (`partial_rotary_factor`): the rotated and passed dimensions of each
//! query and key head are interleaved on loading (the same permutation of
//! q's and k's rows leaves every score as it was), so the rotary kernels'
//! `rotate_half` pairs are transformers' and the pairs past the rotated
//! width are left as they are.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::device::Mesh;
use crate::error::{Error, Result};
use crate::nn::hf_config as hf;
use crate::nn::hf_config::ConfigFile;
use crate::nn::{
    Block, BlockBuild, Branch, DecoderConfig, DecoderSpec, Dropout, DropoutConfig, FinalNorm,
    GatedMlp, GatedMlpConfig, GqaAttention, GqaBlockSizes, GqaConfig, InitRng, NormConfig, Params,
    RMSNorm, RopeConfig, Step, Stored, Stream,
};

/// The Phi-3 model a `config.json` describes.
#[derive(Clone, Debug, PartialEq)]
pub struct Phi3Config {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// Feed-forward width.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads.
    pub num_key_value_heads: usize,
    /// Head width (`hidden_size / num_attention_heads`).
    pub head_dim: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f32,
    /// Longest context.
    pub max_position_embeddings: usize,
    /// The context it was pretrained with (`longrope` switches past it).
    pub original_max_position_embeddings: usize,
    /// RoPE base, scaling and rotated width.
    pub rope: RopeConfig,
    /// Sliding window of every layer; 0: none.
    pub sliding_window: usize,
    /// The head is the embedding (Phi-4-mini).
    pub tie_word_embeddings: bool,
    /// Residual dropout in training mode.
    pub resid_pdrop: f32,
    /// Embedding dropout in training mode.
    pub embd_pdrop: f32,
    /// The padding token (its embedding row gets no gradient from lookups).
    pub pad_token_id: Option<usize>,
}

#[derive(Clone, Debug, Deserialize)]
struct Raw {
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    hidden_act: Option<String>,
    max_position_embeddings: Option<usize>,
    original_max_position_embeddings: Option<usize>,
    rms_norm_eps: Option<f64>,
    sliding_window: Option<usize>,
    tie_word_embeddings: Option<bool>,
    resid_pdrop: Option<f32>,
    embd_pdrop: Option<f32>,
    attention_bias: Option<bool>,
    pad_token_id: Option<usize>,
}

impl Phi3Config {
    /// A Phi-3 of these sizes: heads of `hidden / heads`, RMSNorm ε 1e-5,
    /// RoPE base 10000 over a context of 4096 rotating whole heads, no
    /// window, an untied head, no dropout.
    pub fn new(
        vocab: usize,
        hidden: usize,
        intermediate: usize,
        layers: usize,
        (heads, kv_heads): (usize, usize),
    ) -> Self {
        let d = hidden.checked_div(heads).unwrap_or(0);
        Phi3Config {
            vocab_size: vocab,
            hidden_size: hidden,
            intermediate_size: intermediate,
            num_hidden_layers: layers,
            num_attention_heads: heads,
            num_key_value_heads: kv_heads,
            head_dim: d,
            rms_norm_eps: 1e-5,
            max_position_embeddings: 4096,
            original_max_position_embeddings: 4096,
            rope: RopeConfig::new(10000.0, d, 4096),
            sliding_window: 0,
            tie_word_embeddings: false,
            resid_pdrop: 0.0,
            embd_pdrop: 0.0,
            pad_token_id: None,
        }
    }

    fn check_in(&self, file: &str) -> Result<()> {
        self.sizes().check(file)?;
        let layers = self.num_hidden_layers;
        hf::check_context(file, self.vocab_size, layers, self.max_position_embeddings)?;
        hf::check_rope(file, &self.rope, self.head_dim, true)?;
        for (key, p) in [
            ("resid_pdrop", self.resid_pdrop),
            ("embd_pdrop", self.embd_pdrop),
        ] {
            if !(0.0..1.0).contains(&p) {
                return Err(hf::bad(file, format!("{key} {p} must lie in [0, 1)")));
            }
        }
        Ok(())
    }

    /// The shapes the skeleton's memory check counts.
    fn sizes(&self) -> GqaBlockSizes {
        GqaBlockSizes {
            hidden: self.hidden_size,
            intermediate: self.intermediate_size,
            heads: self.num_attention_heads,
            kv_heads: self.num_key_value_heads,
            head_dim: self.head_dim,
            qkv_bias: false,
            o_bias: false,
            mlp_bias: false,
            qk_norm: false,
            norms: 2,
        }
    }

    /// Row `j` of a query or key head in this crate's layout is row
    /// `perm[j]` of transformers': the rotated half-pairs first, then the
    /// passed dimensions, in each half (module doc).
    fn head_order(&self) -> Vec<usize> {
        let (d, r) = (self.head_dim, self.rope.rotary_dim);
        let (r2, p2, d2) = (r / 2, (d - r) / 2, d / 2);
        (0..d)
            .map(|j| match j {
                j if j < r2 => j,
                j if j < d2 => r + (j - r2),
                j if j < d2 + r2 => r2 + (j - d2),
                j => r + p2 + (j - d2 - r2),
            })
            .collect()
    }
}

impl ConfigFile for Phi3Config {
    /// Parse the text of a `config.json`; `file` names it in errors.
    fn from_json(text: &str, file: &str) -> Result<Self> {
        let mut obj = hf::object(text, file)?;
        hf::model_type(&obj, file, &["phi3"])?;
        hf::refuse_unsupported(&obj, file)?;
        // Phi-3 reads its older rope kinds as longrope, as transformers does.
        for key in ["rope_scaling", "rope_parameters"] {
            if let Some(Value::Object(r)) = obj.get_mut(key) {
                for kind in ["type", "rope_type"] {
                    if r.get(kind)
                        .and_then(Value::as_str)
                        .is_some_and(|t| t == "su" || t == "yarn")
                    {
                        r.insert(kind.into(), "longrope".into());
                    }
                }
            }
        }
        let raw: Raw = hf::parse(obj.clone(), file)?;
        let act = raw.hidden_act.as_deref().unwrap_or("silu");
        if act != "silu" {
            return Err(hf::bad(
                file,
                format!("hidden_act {act:?} is not supported; Phi-3 uses \"silu\""),
            ));
        }
        if raw.attention_bias == Some(true) {
            return Err(hf::bad(
                file,
                "attention_bias: Phi-3 has no attention biases",
            ));
        }
        let heads = raw.num_attention_heads;
        let d = raw.head_dim.unwrap_or(raw.hidden_size / heads.max(1));
        let max_pos = raw.max_position_embeddings.unwrap_or(4096);
        let eps = raw.rms_norm_eps.unwrap_or(1e-5);
        hf::check_eps(file, "rms_norm_eps", eps)?;
        let c = Phi3Config {
            rope: RopeConfig::from_hf(&obj, d, max_pos, true, file)?,
            vocab_size: raw.vocab_size,
            hidden_size: raw.hidden_size,
            intermediate_size: raw.intermediate_size,
            num_hidden_layers: raw.num_hidden_layers,
            num_attention_heads: heads,
            num_key_value_heads: raw.num_key_value_heads.unwrap_or(heads),
            head_dim: d,
            rms_norm_eps: eps as f32,
            max_position_embeddings: max_pos,
            original_max_position_embeddings: raw
                .original_max_position_embeddings
                .unwrap_or(max_pos),
            sliding_window: raw.sliding_window.unwrap_or(0),
            tie_word_embeddings: raw.tie_word_embeddings.unwrap_or(false),
            resid_pdrop: raw.resid_pdrop.unwrap_or(0.0),
            embd_pdrop: raw.embd_pdrop.unwrap_or(0.0),
            pad_token_id: raw.pad_token_id,
        };
        c.check_in(file)?;
        Ok(c)
    }
}

/// One Phi-3 layer.
#[derive(Clone, Debug, Params)]
pub struct Phi3Block {
    /// Norm before attention.
    pub input_layernorm: RMSNorm,
    /// Grouped-query attention (stored fused as `qkv_proj`).
    pub self_attn: GqaAttention,
    /// Norm before the MLP.
    pub post_attention_layernorm: RMSNorm,
    /// SwiGLU (stored fused as `gate_up_proj`).
    pub mlp: GatedMlp,
    /// Residual dropout of the attention branch.
    pub resid_attn_dropout: Dropout,
    /// Residual dropout of the MLP branch.
    pub resid_mlp_dropout: Dropout,
}

impl Block for Phi3Block {
    fn forward(&self, s: &mut Stream, step: Step<'_>) -> Result<()> {
        s.branch(Some(&self.input_layernorm), |n| {
            Branch::dropout(self.self_attn.product(n, step)?, &self.resid_attn_dropout)
        })?;
        s.branch(Some(&self.post_attention_layernorm), |n| {
            Branch::dropout(self.mlp.product(n)?, &self.resid_mlp_dropout)
        })
    }

    fn set_mode(&mut self, training: bool, step: u64) {
        self.resid_attn_dropout.set_mode(training, step);
        self.resid_mlp_dropout.set_mode(training, step);
    }
}

impl DecoderConfig for Phi3Config {
    fn model_type(&self) -> &str {
        "phi3"
    }

    fn spec(&self) -> DecoderSpec {
        let sizes = (
            self.vocab_size,
            self.hidden_size,
            self.num_hidden_layers,
            self.max_position_embeddings,
        );
        let norm = FinalNorm::Rms(self.rms_norm_eps);
        DecoderSpec {
            embed_dropout: self.embd_pdrop,
            padding_idx: self.pad_token_id,
            ..DecoderSpec::hf(sizes, self.tie_word_embeddings, norm)
        }
    }

    fn check(&self) -> Result<()> {
        hf::in_code("Phi3Config", |f| self.check_in(f))
    }

    fn block(
        &self,
        mesh: &Mesh,
        i: usize,
        b: &BlockBuild,
        rng: &mut InitRng,
    ) -> Result<Box<dyn Block>> {
        let c = self;
        let h = c.hidden_size;
        let mut a = GqaConfig::new(h, c.num_attention_heads, c.num_key_value_heads);
        (a.head_dim, a.window, a.rope) = (c.head_dim, c.sliding_window, c.rope.clone());
        (a.init, a.proj_init, a.sequence_parallel) = (b.init, b.init, b.sequence_parallel);
        let mut m = GatedMlpConfig::new(h, c.intermediate_size);
        (m.init, m.proj_init, m.sequence_parallel) = (b.init, b.init, b.sequence_parallel);
        let norm = || {
            let mut n = NormConfig::rms(h);
            n.eps = c.rms_norm_eps;
            RMSNorm::new(mesh, n)
        };
        let drop = |layer: u32| {
            Dropout::new(DropoutConfig {
                p: c.resid_pdrop,
                seed: b.seed,
                layer,
            })
        };
        Ok(Box::new(Phi3Block {
            input_layernorm: norm()?,
            self_attn: GqaAttention::new(mesh, a, rng)?,
            post_attention_layernorm: norm()?,
            mlp: GatedMlp::new(mesh, m, rng)?,
            resid_attn_dropout: drop(2 * i as u32 + 1)?,
            resid_mlp_dropout: drop(2 * i as u32 + 2)?,
        }))
    }

    fn block_parameters(&self, _layer: usize) -> u128 {
        self.sizes().parameters()
    }

    fn block_bytes(&self, mesh: &Mesh, _layer: usize) -> u128 {
        self.sizes().bytes(mesh)
    }

    fn describe(&self) -> String {
        let c = self;
        format!(
            "phi3: {} layers · hidden {} · {} query / {} key-value heads of {} (rotating {}) · \
             SwiGLU {} · vocab {} · context {}",
            c.num_hidden_layers,
            c.hidden_size,
            c.num_attention_heads,
            c.num_key_value_heads,
            c.head_dim,
            c.rope.rotary_dim,
            c.intermediate_size,
            c.vocab_size,
            c.max_position_embeddings
        )
    }

    fn set_tied(&mut self, tied: bool) {
        self.tie_word_embeddings = tied;
    }

    fn to_json(&self, eos: &[i32]) -> Result<String> {
        let window = match self.sliding_window {
            0 => Value::Null,
            w => w.into(),
        };
        let v = json!({
            "architectures": ["Phi3ForCausalLM"],
            "model_type": "phi3",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "hidden_act": "silu",
            "rms_norm_eps": hf::shortest(self.rms_norm_eps),
            "max_position_embeddings": self.max_position_embeddings,
            "original_max_position_embeddings": self.original_max_position_embeddings,
            "rope_theta": self.rope.theta,
            "partial_rotary_factor": self.rope.rotary_dim as f64 / self.head_dim as f64,
            "sliding_window": window,
            "tie_word_embeddings": self.tie_word_embeddings,
            "resid_pdrop": hf::shortest(self.resid_pdrop),
            "embd_pdrop": hf::shortest(self.embd_pdrop),
            "attention_dropout": 0.0,
            "dtype": "float32",
            "use_cache": true,
        });
        let Value::Object(mut obj) = v else {
            return Err(Error::invalid(
                "Phi3Config::to_json",
                "internal: not an object",
            ));
        };
        if let Some(scaling) = self.rope.scaling.to_hf() {
            obj.insert("rope_scaling".into(), scaling);
        }
        Ok(hf::finish_json(obj, eos, self.pad_token_id))
    }

    /// q, k and v are rows of `qkv_proj` (q's and k's heads permuted for a
    /// partial rotary), gate and up rows of `gate_up_proj`.
    fn stored(&self, name: &str, shape: &[usize]) -> Stored {
        let (d, f) = (self.head_dim, self.intermediate_size);
        let [q, kv] = [self.num_attention_heads, self.num_key_value_heads].map(|n| n * d);
        let h = self.hidden_size;
        let fused = |base: &str, part: &str, total: usize, rows: std::ops::Range<usize>| {
            let order =
                (part != "v_proj" && self.rope.rotary_dim != d && base == "qkv_proj").then(|| {
                    let head = self.head_order();
                    (0..rows.len()).map(|i| (i / d) * d + head[i % d]).collect()
                });
            let prefix = name.strip_suffix(&format!("{part}.weight")).unwrap_or(name);
            Stored {
                key: format!("{prefix}{base}.weight"),
                shape: vec![total, h],
                rows,
                transposed: false,
                order,
            }
        };
        let part = |s: &str| name.ends_with(&format!(".{s}.weight"));
        match () {
            _ if part("q_proj") => fused("qkv_proj", "q_proj", q + 2 * kv, 0..q),
            _ if part("k_proj") => fused("qkv_proj", "k_proj", q + 2 * kv, q..q + kv),
            _ if part("v_proj") => fused("qkv_proj", "v_proj", q + 2 * kv, q + kv..q + 2 * kv),
            _ if part("gate_proj") => fused("gate_up_proj", "gate_proj", 2 * f, 0..f),
            _ if part("up_proj") => fused("gate_up_proj", "up_proj", 2 * f, f..2 * f),
            _ => Stored::same(name, shape),
        }
    }
}
