//! [`GenerationConfig`]: a model's generation defaults, as a Hugging Face
//! directory's `generation_config.json` (or, for the eos ids, its
//! `config.json`) gives them, for every family.

use serde_json::Value;

use super::sampling::{SampleOptions, Sampling};

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
pub(crate) fn eos_ids(v: Option<&Value>) -> Vec<i32> {
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
    /// The defaults of a `generation_config.json`'s JSON (`file` names it in
    /// errors), with `config_eos` (the ids `config.json` names) where it
    /// names none.
    pub fn from_json(text: &str, file: &str, config_eos: &[i32]) -> crate::Result<Self> {
        let v: Value = serde_json::from_str(text)
            .map_err(|e| crate::Error::Checkpoint(format!("{file}: not valid JSON ({e})")))?;
        let mut out = GenerationConfig {
            eos_token_ids: eos_ids(v.get("eos_token_id")),
            ..Default::default()
        };
        if out.eos_token_ids.is_empty() {
            out.eos_token_ids = config_eos.to_vec();
        }
        let f = |k: &str| v.get(k).and_then(Value::as_f64).map(|x| x as f32);
        out.temperature = f("temperature");
        out.top_p = f("top_p");
        out.repetition_penalty = f("repetition_penalty");
        out.top_k = v.get("top_k").and_then(Value::as_u64).map(|k| k as usize);
        out.do_sample = v.get("do_sample").and_then(Value::as_bool).unwrap_or(false);
        Ok(out)
    }

    /// Read `dir/generation_config.json` (missing: defaults), with
    /// `config_eos` (`config.json`'s `eos_token_id`) where it names none.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn read(dir: &std::path::Path, config_eos: &[i32]) -> crate::Result<Self> {
        let path = dir.join("generation_config.json");
        if !path.exists() {
            return Ok(GenerationConfig {
                eos_token_ids: config_eos.to_vec(),
                ..Default::default()
            });
        }
        // Size-checked as config.json is: a few KB, never a whole file's worth.
        let text = crate::nn::hf_config::read_text(&path)?;
        Self::from_json(&text, &path.display().to_string(), config_eos)
    }

    /// The `generation_config.json` `save_pretrained` writes (its eos ids).
    pub fn to_json(&self) -> String {
        let mut generation = serde_json::json!({ "_from_model_config": true });
        if !self.eos_token_ids.is_empty() {
            generation["eos_token_id"] = self.eos_token_ids.clone().into();
        }
        serde_json::to_string_pretty(&generation).unwrap_or_default() + "\n"
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
