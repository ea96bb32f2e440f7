//! Hugging Face directories of the Llama family: [`Llama::from_pretrained`]
//! reads `config.json`, `generation_config.json` (generation defaults) and
//! `model.safetensors` or a sharded index (F32, F16, BF16, widened to f32
//! masters, one tensor at a time from a memory map). Every tensor is matched
//! to a parameter by its Hugging Face name and checked (dtype, shape)
//! before any is loaded; the family's name rules live in [`sanitize`].

use std::collections::HashMap;
use std::path::Path;

use safetensors::Dtype;
use serde_json::Value;

use super::{Llama, LlamaConfig};
use crate::device::{Mesh, block_on};
use crate::error::{Error, Result};
use crate::models::LoadOptions;
use crate::models::load_options::keep_weights;
use crate::nn::pretrained::files::{Found, WeightFiles, bad};
use crate::nn::{Params, SampleOptions, Sampling};

/// Generation defaults of a directory's `generation_config.json`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GenerationConfig {
    /// Token ids that end generation (`eos_token_id`, one or a list).
    pub eos_token_ids: Vec<i32>,
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// Top-k candidates.
    pub top_k: Option<usize>,
    /// Nucleus probability mass (top-p).
    pub top_p: Option<f32>,
    /// Repetition penalty on the ids already in the sequence.
    pub repetition_penalty: Option<f32>,
    /// Whether the model samples by default (`do_sample`).
    pub do_sample: bool,
}

/// `eos_token_id` as one id or a list.
fn ids(v: Option<&Value>) -> Vec<i32> {
    match v {
        Some(Value::Number(n)) => n.as_i64().map(|i| vec![i as i32]).unwrap_or_default(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_i64)
            .map(|i| i as i32)
            .collect(),
        _ => vec![],
    }
}

impl GenerationConfig {
    /// Parse `generation_config.json` (missing: defaults; `config`'s
    /// `eos_token_id` is used when this file has none).
    pub fn read(dir: &Path, config_json: &Value) -> Result<Self> {
        let path = dir.join("generation_config.json");
        let mut out = GenerationConfig {
            eos_token_ids: ids(config_json.get("eos_token_id")),
            ..Default::default()
        };
        let Ok(text) = std::fs::read_to_string(&path) else {
            return Ok(out);
        };
        let v: Value =
            serde_json::from_str(&text).map_err(|e| bad(&path, format!("not valid JSON ({e})")))?;
        let eos = ids(v.get("eos_token_id"));
        if !eos.is_empty() {
            out.eos_token_ids = eos;
        }
        let f = |k: &str| v.get(k).and_then(Value::as_f64).map(|x| x as f32);
        out.temperature = f("temperature");
        out.top_p = f("top_p");
        out.repetition_penalty = f("repetition_penalty");
        out.top_k = v.get("top_k").and_then(Value::as_u64).map(|k| k as usize);
        out.do_sample = v.get("do_sample").and_then(Value::as_bool).unwrap_or(false);
        Ok(out)
    }

    /// The [`Sampling`] these defaults ask for, with transformers'
    /// defaults for what is missing: greedy unless `do_sample` (with the
    /// repetition penalty where it is not 1), else
    /// [`Sampling::Sample`] with the temperature (1), `top_k` (50; 0: no
    /// limit), `top_p` (1: no limit) and `repetition_penalty` (1). Values
    /// transformers rejects (a temperature or penalty ≤ 0, `top_p` outside
    /// (0, 1]) make generation return an error.
    pub fn sampling(&self, seed: u64) -> Sampling {
        let repetition_penalty = self.repetition_penalty.unwrap_or(1.0);
        if !self.do_sample {
            return if repetition_penalty == 1.0 {
                Sampling::Greedy
            } else {
                Sampling::GreedyWithPenalty { repetition_penalty }
            };
        }
        Sampling::Sample(SampleOptions {
            temperature: self.temperature.unwrap_or(1.0),
            top_k: match self.top_k {
                None => Some(50),
                Some(0) => None,
                k => k,
            },
            top_p: self.top_p,
            repetition_penalty,
            seed,
        })
    }
}

/// A checkpoint tensor name as this crate names the parameter, or `None`
/// for buffers transformers saved that are not parameters (old checkpoints'
/// `rotary_emb.inv_freq`).
fn sanitize(name: &str) -> Option<&str> {
    (!name.ends_with("rotary_emb.inv_freq")).then_some(name)
}

impl Llama {
    /// Load a Hugging Face directory of the Llama family (`llama`,
    /// `mistral`, `qwen2`, `qwen3`) onto `mesh`, at any world size. The
    /// head is tied when `tie_word_embeddings` is true or the files hold no
    /// `lm_head.weight`. A bad directory is an [`Error::Checkpoint`] naming
    /// the file and tensor, before any parameter is written; the mesh stays
    /// usable.
    pub fn from_pretrained(mesh: &Mesh, dir: impl AsRef<Path>) -> Result<Llama> {
        Self::from_pretrained_with(mesh, dir, LoadOptions::default())
    }

    /// [`Llama::from_pretrained`] with [`LoadOptions`]: the dtype the
    /// weight matrices are kept in (bf16 or f16 for generation: half the
    /// memory and the bytes a token reads) and sequence parallelism (for
    /// training).
    pub fn from_pretrained_with(
        mesh: &Mesh,
        dir: impl AsRef<Path>,
        opts: LoadOptions,
    ) -> Result<Llama> {
        let dir = dir.as_ref();
        if !dir.is_dir() {
            return Err(bad(
                dir,
                "no such directory; pass a Hugging Face model directory (config.json + model.safetensors)",
            ));
        }
        let mut config = LlamaConfig::read(dir.join("config.json"))?;
        let text = std::fs::read_to_string(dir.join("config.json"))?;
        let json: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let generation = GenerationConfig::read(dir, &json)?;
        let weights = WeightFiles::open(dir)?;
        if weights.get("lm_head.weight").is_none() {
            config.tie_word_embeddings = true;
        }
        let mut model = Llama::build(mesh, config, None, opts.sequence_parallel)?;
        let plan = plan(&weights, &model)?;
        for (name, p) in model.named_parameters_mut() {
            let f = &plan[&name];
            let n = f.shape.iter().product();
            p.load_master(&weights.values(f, 0..n))?;
        }
        keep_weights(&mut model, mesh, opts.weight_dtype)?;
        model.generation = generation;
        Ok(model)
    }

    /// Generation defaults read from the directory (`eos_token_id`, ...).
    pub fn generation_config(&self) -> &GenerationConfig {
        &self.generation
    }

    /// The generation defaults, to change (e.g. the eos ids a model built
    /// from a config stops at; `save_pretrained` writes them).
    pub fn generation_config_mut(&mut self) -> &mut GenerationConfig {
        &mut self.generation
    }

    /// Continue `prompt` by up to `max_new` tokens with a key/value cache,
    /// stopping after any of the generation config's eos ids; returns the
    /// new tokens (as [`Gpt::generate`](crate::models::Gpt::generate)).
    pub fn generate(&self, prompt: &[i32], max_new: usize, sampling: Sampling) -> Result<Vec<i32>> {
        self.generate_with(prompt, max_new, sampling, |_| Ok(()))
    }

    /// [`Llama::generate`] calling `on_token` with each token as it is chosen.
    pub fn generate_with(
        &self,
        prompt: &[i32],
        max_new: usize,
        sampling: Sampling,
        on_token: impl FnMut(i32) -> Result<()>,
    ) -> Result<Vec<i32>> {
        let stop = self.generation.eos_token_ids.clone();
        block_on(
            "Llama::generate",
            crate::nn::generate(self, prompt, max_new, sampling, &stop, on_token),
        )
    }

    /// [`Llama::generate`] recomputing the whole sequence per token (the
    /// reference the cached path equals).
    pub fn generate_uncached(
        &self,
        prompt: &[i32],
        max_new: usize,
        sampling: Sampling,
    ) -> Result<Vec<i32>> {
        let stop = self.generation.eos_token_ids.clone();
        block_on(
            "Llama::generate_uncached",
            crate::nn::generate_uncached(self, prompt, max_new, sampling, &stop),
        )
    }
}

/// Match every parameter of `model` to a tensor (dtype, shape), and check
/// that nothing else is in the files (a tied head must equal the embedding).
fn plan(weights: &WeightFiles, model: &Llama) -> Result<HashMap<String, Found>> {
    let mut plan = HashMap::new();
    for (name, p) in model.named_parameters() {
        let f = weights.get(&name).ok_or_else(|| {
            Error::Checkpoint(format!(
                "{}: tensor {name:?} is missing, and the config.json's model needs it",
                weights.paths()
            ))
        })?;
        if !matches!(f.dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16) {
            return Err(Error::Checkpoint(format!(
                "{} is {:?}; only F32, F16 and BF16 load",
                weights.at(f),
                f.dtype
            )));
        }
        if f.shape != p.shape() {
            return Err(Error::Checkpoint(format!(
                "{} has shape {:?}, but the config.json's model needs {:?}",
                weights.at(f),
                f.shape,
                p.shape()
            )));
        }
        plan.insert(name, f.clone());
    }
    for (key, f) in weights.iter() {
        let Some(name) = sanitize(key) else { continue };
        if plan.contains_key(name) {
            continue;
        }
        if name == "lm_head.weight" && model.lm_head.is_none() {
            check_tied(weights, f, plan.get("model.embed_tokens.weight"))?;
            continue;
        }
        return Err(Error::Checkpoint(format!(
            "{} matches no parameter of the model config.json describes",
            weights.at(f)
        )));
    }
    Ok(plan)
}

/// A tied model's `lm_head.weight` must be the embedding, value for value.
fn check_tied(weights: &WeightFiles, head: &Found, embed: Option<&Found>) -> Result<()> {
    let Some(embed) = embed else {
        return Err(Error::Checkpoint(format!(
            "{}: no embedding to tie it to",
            weights.at(head)
        )));
    };
    let n: usize = embed.shape.iter().product();
    if head.shape != embed.shape {
        return Err(Error::Checkpoint(format!(
            "{} has shape {:?}, the embedding {:?}",
            weights.at(head),
            head.shape,
            embed.shape
        )));
    }
    const BLOCK: usize = 1 << 16;
    for start in (0..n).step_by(BLOCK) {
        let end = (start + BLOCK).min(n);
        let (a, b) = (
            weights.values(head, start..end),
            weights.values(embed, start..end),
        );
        if a.iter().zip(&b).any(|(x, y)| x.to_bits() != y.to_bits()) {
            return Err(Error::Checkpoint(format!(
                "{} differs from model.embed_tokens.weight although tie_word_embeddings is \
                 true; set it to false in config.json to load an untied head",
                weights.at(head)
            )));
        }
    }
    Ok(())
}

impl Llama {
    /// Write this model as a Hugging Face directory: `config.json`
    /// ([`LlamaConfig::to_json`]), `generation_config.json` (its eos ids) and
    /// `model.safetensors` (F32, Hugging Face names, no `lm_head.weight` when
    /// tied), which `transformers.AutoModelForCausalLM.from_pretrained(dir)`
    /// reads. Creates `dir` if needed; one parameter at a time is gathered to
    /// the host. In a multi-process mesh every process calls it and only
    /// process 0 writes.
    pub fn save_pretrained(&self, dir: impl AsRef<Path>) -> Result<()> {
        use crate::nn::pretrained::save::{write_atomic, write_params};
        let dir = dir.as_ref();
        let writes = crate::nn::checkpoint::writes_files(self);
        if writes {
            std::fs::create_dir_all(dir)?;
        }
        let same_shape = |_: &str, s: &[usize]| s.to_vec();
        let same_values = |_: &str, v: Vec<f32>, _: &[usize]| Ok(v);
        write_params(
            self,
            &dir.join("model.safetensors"),
            &same_shape,
            &same_values,
        )?;
        if !writes {
            return Ok(());
        }
        let eos = &self.generation.eos_token_ids;
        let mut config = self.config.clone();
        config.tie_word_embeddings = self.lm_head.is_none();
        write_atomic(&dir.join("config.json"), config.to_json(eos).as_bytes())?;
        let mut generation = serde_json::json!({ "_from_model_config": true });
        if !eos.is_empty() {
            generation["eos_token_id"] = eos.clone().into();
        }
        let text = serde_json::to_string_pretty(&generation).unwrap_or_default() + "\n";
        write_atomic(&dir.join("generation_config.json"), text.as_bytes())
    }
}
