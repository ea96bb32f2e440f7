//! Reading a Hugging Face GPT-2 directory: parse `config.json` and every
//! weight file's header ([`HfCheckpoint::open`]), match each expected
//! parameter to a tensor and check dtype and shape, the tied head and any
//! stray tensor ([`HfCheckpoint::plan`]), and only then convert one tensor at
//! a time (widen, and [`sanitize`](super::sanitize)'s `Conv1D` transpose) and shard it through
//! [`Parameter::load_master`](crate::nn::Parameter::load_master)
//! ([`HfCheckpoint::load_into`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use safetensors::Dtype;

use super::hf_config::HfGpt2Config;
use super::sanitize::{from_hf_values, hf_shape, sanitize};
use super::{Gpt, GptConfig};
use crate::error::{Error, Result};
use crate::nn::Params;
use crate::nn::pretrained::CONFIG_FILE;
use crate::nn::pretrained::files::{Found, WeightFiles, bad};

/// An opened checkpoint directory whose headers all parsed.
pub(super) struct HfCheckpoint {
    config: HfGpt2Config,
    config_path: PathBuf,
    weights: WeightFiles,
}

/// Our parameter names and shapes for a GPT-2 of `c` (the order of
/// [`Gpt`]'s `named_parameters`), known before any device memory is used:
/// [`Gpt::from_pretrained`] checks the files against it before building the
/// model, and `load_into` then matches the built model's own names against
/// the plan, so a table that drifted from the model is an error, not a
/// wrong load.
pub(super) fn expected_params(c: &GptConfig) -> Vec<(String, Vec<usize>)> {
    let h = c.hidden;
    let mut v = vec![
        ("wte.weight".to_string(), vec![c.vocab, h]),
        ("wpe.weight".to_string(), vec![c.n_ctx, h]),
    ];
    for i in 0..c.layers {
        let block = [
            ("ln_1.weight", vec![h]),
            ("ln_1.bias", vec![h]),
            ("attn.c_attn.weight", vec![3 * h, h]),
            ("attn.c_attn.bias", vec![3 * h]),
            ("attn.c_proj.weight", vec![h, h]),
            ("attn.c_proj.bias", vec![h]),
            ("ln_2.weight", vec![h]),
            ("ln_2.bias", vec![h]),
            ("mlp.c_fc.weight", vec![c.ffn, h]),
            ("mlp.c_fc.bias", vec![c.ffn]),
            ("mlp.c_proj.weight", vec![h, c.ffn]),
            ("mlp.c_proj.bias", vec![h]),
        ];
        v.extend(block.into_iter().map(|(n, s)| (format!("h.{i}.{n}"), s)));
    }
    v.push(("ln_f.weight".into(), vec![h]));
    v.push(("ln_f.bias".into(), vec![h]));
    v
}

/// `hf` must describe a model of `c`'s sizes, heads, activation and epsilon
/// (`what` names `hf` in the error).
pub(super) fn check_same_model(hf: &HfGpt2Config, c: &GptConfig, what: &str) -> Result<()> {
    let want = hf.to_gpt_config()?;
    let key = |c: &GptConfig| {
        (
            c.vocab,
            c.n_ctx,
            c.hidden,
            c.heads,
            c.layers,
            c.ffn,
            c.activation,
            c.eps,
        )
    };
    if key(c) != key(&want) {
        return Err(Error::Checkpoint(format!(
            "{what} describes (vocab, n_ctx, hidden, heads, layers, ffn, activation, eps) = {:?}, but the model has {:?}; build the model with Gpt::from_pretrained, or save it with its own config",
            key(&want),
            key(c)
        )));
    }
    Ok(())
}

/// The names and shapes of `gpt`'s parameters.
pub(super) fn model_params(gpt: &Gpt) -> Vec<(String, Vec<usize>)> {
    gpt.named_parameters()
        .into_iter()
        .map(|(n, p)| (n, p.shape().to_vec()))
        .collect()
}

impl HfCheckpoint {
    /// Read `config.json`, map every weight file and parse its header.
    pub(super) fn open(dir: &Path) -> Result<Self> {
        if !dir.is_dir() {
            return Err(bad(
                dir,
                "no such directory; pass a Hugging Face model directory (config.json + model.safetensors)",
            ));
        }
        let config_path = dir.join(CONFIG_FILE);
        let config = HfGpt2Config::read(&config_path)?;
        let weights = sanitize(WeightFiles::open(dir)?)?;
        Ok(HfCheckpoint {
            config,
            config_path,
            weights,
        })
    }

    /// The model `config.json` describes; errors name its path.
    pub(super) fn gpt_config(&self) -> Result<GptConfig> {
        self.config.to_gpt_config().map_err(|e| match e {
            Error::Checkpoint(m) => {
                let m = m.strip_prefix("config.json: ").unwrap_or(&m);
                bad(&self.config_path, m)
            }
            e => e,
        })
    }

    /// A model built from `c` must agree with `config.json` on everything the
    /// weights do not show (heads, activation, epsilon) as well as the sizes.
    pub(super) fn check_config(&self, c: &GptConfig) -> Result<()> {
        self.gpt_config()?;
        check_same_model(&self.config, c, &self.config_path.display().to_string())
    }

    /// Match every parameter `(our name, our shape)` to a tensor, checking
    /// dtype and Hugging Face shape; check the head is tied and that nothing
    /// else is in the files. Reads no tensor data except `lm_head.weight`.
    pub(super) fn plan(&self, expected: &[(String, Vec<usize>)]) -> Result<HashMap<String, Found>> {
        let c = &self.config;
        let sizes = format!(
            "{} (vocab_size {}, n_positions {}, n_embd {}, n_layer {}, n_inner {})",
            self.config_path.display(),
            c.vocab_size,
            c.n_positions,
            c.n_embd,
            c.n_layer,
            c.n_inner.map_or("null".into(), |n| n.to_string())
        );
        let mut plan = HashMap::new();
        for (name, shape) in expected {
            let f = self.weights.get(name).ok_or_else(|| {
                Error::Checkpoint(format!(
                    "{}: tensor {name:?} is missing, and {sizes} needs it",
                    self.weights.paths()
                ))
            })?;
            if !matches!(f.dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16) {
                return Err(Error::Checkpoint(format!(
                    "{} is {:?}; only F32, F16 and BF16 load",
                    self.weights.at(f),
                    f.dtype
                )));
            }
            let want = hf_shape(name, shape);
            if f.shape != want {
                return Err(Error::Checkpoint(format!(
                    "{} has shape {:?}, but {sizes} needs {want:?}",
                    self.weights.at(f),
                    f.shape
                )));
            }
            plan.insert(name.clone(), f.clone());
        }
        for (key, f) in self.weights.iter() {
            if plan.contains_key(key) {
                continue;
            }
            if key == "lm_head.weight" {
                self.check_tied(f, plan.get("wte.weight"))?;
                continue;
            }
            return Err(Error::Checkpoint(format!(
                "{} matches no parameter of a GPT-2 of {sizes}",
                self.weights.at(f)
            )));
        }
        Ok(plan)
    }

    /// `lm_head.weight` must equal `wte.weight`: [`Gpt`]'s head is tied.
    fn check_tied(&self, head: &Found, wte: Option<&Found>) -> Result<()> {
        let Some(wte) = wte else {
            return Err(Error::Checkpoint(format!(
                "{}: there is no wte.weight to tie it to",
                self.weights.at(head)
            )));
        };
        if head.dtype != wte.dtype {
            return Err(Error::Checkpoint(format!(
                "{} is {:?}, but wte.weight is {:?}; Gpt ties its head to wte, so they must be the same tensor",
                self.weights.at(head),
                head.dtype,
                wte.dtype
            )));
        }
        if head.shape != wte.shape {
            return Err(Error::Checkpoint(format!(
                "{} has shape {:?}, but wte.weight is {:?}; Gpt ties its head to wte",
                self.weights.at(head),
                head.shape,
                wte.shape
            )));
        }
        const BLOCK: usize = 1 << 16;
        let n: usize = wte.shape.iter().product();
        let cols = wte.shape.last().copied().unwrap_or(1).max(1);
        for start in (0..n).step_by(BLOCK) {
            let end = (start + BLOCK).min(n);
            let (a, b) = (
                self.weights.values(head, start..end),
                self.weights.values(wte, start..end),
            );
            if let Some(k) = (0..a.len()).find(|&k| a[k].to_bits() != b[k].to_bits()) {
                let i = start + k;
                return Err(Error::Checkpoint(format!(
                    "{} differs from wte.weight at [{}, {}] ({} vs {}): this is an untied head, and Gpt ties its head to wte",
                    self.weights.at(head),
                    i / cols,
                    i % cols,
                    a[k],
                    b[k]
                )));
            }
        }
        Ok(())
    }

    /// Convert and shard each planned tensor into `gpt`, one at a time.
    pub(super) fn load_into(&self, gpt: &mut Gpt, plan: &HashMap<String, Found>) -> Result<()> {
        for (name, p) in gpt.named_parameters_mut() {
            let f = plan.get(&name).ok_or_else(|| {
                Error::Checkpoint(format!(
                    "parameter {name:?} of the model has no tensor in the plan"
                ))
            })?;
            if f.shape != hf_shape(&name, p.shape()) {
                return Err(Error::Checkpoint(format!(
                    "{} has shape {:?}, the model's {name} is {:?}",
                    self.weights.at(f),
                    f.shape,
                    p.shape()
                )));
            }
            let n = f.shape.iter().product();
            let data = from_hf_values(&name, self.weights.values(f, 0..n), &f.shape);
            p.load_master(&data)?;
        }
        Ok(())
    }
}
