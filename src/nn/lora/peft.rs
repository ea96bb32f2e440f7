//! PEFT's adapter files: [`Decoder::save_adapter`] writes
//! `adapter_config.json` and `adapter_model.safetensors` under PEFT's names
//! (`base_model.model.` + the model's own, F32), which
//! `peft.PeftModel.from_pretrained` loads; [`Decoder::load_adapter`] reads
//! PEFT's.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{Value, json};

use super::config::LoraConfig;
use crate::error::{Error, Result};
use crate::nn::Params;
use crate::nn::checkpoint::writes_files;
use crate::nn::decoder::Decoder;
use crate::nn::pretrained::files::{WeightFiles, open_weights};
use crate::nn::pretrained::json::read_json_file;
use crate::nn::pretrained::save::{FileTensor, write_atomic, write_tensors};

/// PEFT's prefix of a causal LM's tensor names.
const PREFIX: &str = "base_model.model.";
const CONFIG: &str = "adapter_config.json";
const WEIGHTS: &str = "adapter_model.safetensors";

fn bad(path: &Path, message: impl std::fmt::Display) -> Error {
    Error::Checkpoint(format!("{}: {message}", path.display()))
}

/// The [`LoraConfig`] of an `adapter_config.json`, refusing what this
/// crate does not implement (DoRA, per-layer ranks, extra trained modules).
fn read_config(path: &Path) -> Result<LoraConfig> {
    let v = read_json_file(path)?;
    let obj = v
        .as_object()
        .ok_or_else(|| bad(path, "is not a JSON object"))?;
    let get = |k: &str| obj.get(k).filter(|v| !v.is_null());
    match get("peft_type").and_then(Value::as_str) {
        Some("LORA") => {}
        other => {
            return Err(bad(
                path,
                format!("peft_type is {other:?}; only LORA adapters are read"),
            ));
        }
    }
    let number = |k: &str| -> Result<f64> {
        get(k)
            .and_then(Value::as_f64)
            .ok_or_else(|| bad(path, format!("{k} is missing or not a number")))
    };
    let r = number("r")?;
    if r < 1.0 || r.fract() != 0.0 || r > 65536.0 {
        return Err(bad(
            path,
            format!("r = {r} is not a rank between 1 and 65536"),
        ));
    }
    let alpha = number("lora_alpha")?;
    let dropout = get("lora_dropout").and_then(Value::as_f64).unwrap_or(0.0);
    let targets = match get("target_modules") {
        Some(Value::Array(list)) => list
            .iter()
            .map(|t| {
                t.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| bad(path, "target_modules holds a non-string"))
            })
            .collect::<Result<Vec<_>>>()?,
        Some(Value::String(s)) if s.chars().all(|c| c.is_alphanumeric() || c == '_') => {
            vec![s.clone()]
        }
        Some(Value::String(s)) => {
            return Err(bad(
                path,
                format!(
                    "target_modules is the regular expression {s:?}; list the module names \
                     instead"
                ),
            ));
        }
        _ => return Err(bad(path, "target_modules is missing")),
    };
    for (key, default) in [
        ("use_dora", json!(false)),
        ("bias", json!("none")),
        ("lora_bias", json!(false)),
    ] {
        if let Some(v) = get(key)
            && *v != default
        {
            return Err(bad(
                path,
                format!("{key} = {v} is not supported (only {default})"),
            ));
        }
    }
    for key in ["rank_pattern", "alpha_pattern"] {
        if get(key)
            .and_then(Value::as_object)
            .is_some_and(|m| !m.is_empty())
        {
            return Err(bad(
                path,
                format!("{key} (per-layer ranks) is not supported"),
            ));
        }
    }
    for key in [
        "modules_to_save",
        "layers_to_transform",
        "exclude_modules",
        "layer_replication",
        "target_parameters",
        "trainable_token_indices",
    ] {
        if get(key).is_some() {
            return Err(bad(path, format!("{key} is not supported")));
        }
    }
    Ok(LoraConfig {
        r: r as usize,
        alpha: alpha as f32,
        dropout: dropout as f32,
        target_modules: targets,
        use_rslora: get("use_rslora").and_then(Value::as_bool).unwrap_or(false),
        seed: 0,
    })
}

impl Decoder {
    /// PEFT's name (without `base_model.model.`) of adapter parameter
    /// `name` (`….lora_A.weight`): its layer's module name in
    /// transformers' model (GPT-2's `h.0…` is `transformer.h.0…`).
    fn peft_name(&self, name: &str) -> String {
        for suffix in [".lora_A.weight", ".lora_B.weight"] {
            if let Some(layer) = name.strip_suffix(suffix) {
                return format!("{}{suffix}", self.config.module_name(layer));
            }
        }
        name.to_string()
    }

    /// Write the adapters as PEFT does: `dir/adapter_config.json` and
    /// `dir/adapter_model.safetensors` (F32, `base_model.model.` + the
    /// names [`Params`] lists; GPT-2's `fan_in_fan_out`), which
    /// `peft.PeftModel.from_pretrained(base, dir)` loads. A whole model
    /// with unmerged adapters; in a multi-process mesh every process calls
    /// it and process 0 writes.
    pub fn save_adapter(&self, dir: impl AsRef<Path>) -> Result<()> {
        const OP: &str = "Decoder::save_adapter";
        let Some(config) = &self.lora else {
            return Err(Error::invalid(
                OP,
                "the model has no adapters (add_lora or load_adapter)",
            ));
        };
        if self.stage.1 != 1 {
            return Err(Error::invalid(OP, "save the adapters of a whole model"));
        }
        let params = self.named_parameters();
        let mut tensors = Vec::new();
        let mut fan_in_fan_out = false;
        for (i, (name, p)) in params.iter().enumerate() {
            if name.ends_with(".lora_A.weight") || name.ends_with(".lora_B.weight") {
                tensors.push(FileTensor {
                    name: format!("{PREFIX}{}", self.peft_name(name)),
                    shape: p.shape().to_vec(),
                    parts: vec![(i, false, None)],
                });
                if let Some(base) = name.strip_suffix(".lora_A.weight") {
                    let w = format!("{base}.weight");
                    if let Some((_, wp)) = params.iter().find(|(n, _)| *n == w) {
                        fan_in_fan_out |= self.config.stored(&w, wp.shape()).transposed;
                    }
                }
            }
        }
        let body = json!({
            "peft_type": "LORA",
            "task_type": "CAUSAL_LM",
            "r": config.r,
            "lora_alpha": config.alpha,
            "lora_dropout": config.dropout,
            "target_modules": config.target_modules,
            "use_rslora": config.use_rslora,
            "fan_in_fan_out": fan_in_fan_out,
            "bias": "none",
            "inference_mode": true,
            "init_lora_weights": true,
            "base_model_name_or_path": null,
            "modules_to_save": null,
            "use_dora": false,
        });
        let dir = dir.as_ref();
        let writes = writes_files(self);
        if writes {
            std::fs::create_dir_all(dir)?;
        }
        write_tensors(self, &dir.join(WEIGHTS), &tensors)?;
        if writes {
            let text = serde_json::to_string_pretty(&body)
                .map_err(|e| Error::invalid(OP, e.to_string()))?;
            write_atomic(&dir.join(CONFIG), text.as_bytes())?;
        }
        Ok(())
    }

    /// Read a PEFT LoRA adapter directory (`adapter_config.json`,
    /// `adapter_model.safetensors`; F32, F16 or BF16) into this model:
    /// adapters are added as its config says ([`Decoder::add_lora`],
    /// freezing the base) and take the file's values. Every name and shape
    /// is checked before any value is written; an adapter made for another
    /// base is an error naming the tensor, and the model is left without
    /// adapters, as it was.
    pub fn load_adapter(&mut self, dir: impl AsRef<Path>) -> Result<()> {
        const OP: &str = "Decoder::load_adapter";
        let dir = dir.as_ref();
        if !dir.is_dir() {
            return Err(bad(dir, "no such directory; pass a PEFT adapter directory"));
        }
        let config = read_config(&dir.join(CONFIG))?;
        let path = dir.join(WEIGHTS);
        if !path.is_file() {
            return Err(bad(
                &path,
                "is missing (a PyTorch adapter_model.bin must be converted: save it with \
                 safe_serialization=True)",
            ));
        }
        let (file, found) = open_weights(&path)?;
        let found: HashMap<String, _> = found
            .into_iter()
            .map(|(n, f)| {
                (
                    n.strip_prefix(PREFIX)
                        .unwrap_or(&n)
                        .replace(".default.", "."),
                    f,
                )
            })
            .collect();
        let files = WeightFiles::from_parts(vec![file], found);
        if self.lora.is_some() {
            return Err(Error::invalid(
                OP,
                "the model has adapters already: remove_lora() first",
            ));
        }
        self.add_lora(&config)?;
        let result = (|| -> Result<()> {
            let mut wanted = Vec::new();
            let params = self.named_parameters();
            let mut keys = HashMap::new();
            for (name, p) in &params {
                if !(name.ends_with(".lora_A.weight") || name.ends_with(".lora_B.weight")) {
                    continue;
                }
                let name = self.peft_name(name);
                let f = files.get(&name).ok_or_else(|| {
                    bad(
                        &path,
                        format!(
                            "has no tensor {PREFIX}{name}: the adapter was made for another model"
                        ),
                    )
                })?;
                if f.shape != p.shape()
                    || f.dtype.is_none()
                    || f.dtype.is_some_and(|d| d.quant().is_some())
                {
                    return Err(bad(
                        &path,
                        format!(
                            "tensor {PREFIX}{name} is {} {:?}, the model's is F32-readable {:?}: the \
                             adapter was made for another model",
                            f.type_name,
                            f.shape,
                            p.shape()
                        ),
                    ));
                }
                keys.insert(name.clone(), name.clone());
                wanted.push(name);
            }
            let keys: Vec<Option<String>> = params
                .iter()
                .map(|(n, _)| {
                    let k = self.peft_name(n);
                    keys.contains_key(&k).then_some(k)
                })
                .collect();
            let ours = wanted.len();
            let theirs = files.iter().count();
            if ours != theirs {
                let extra: Vec<&String> = files
                    .iter()
                    .map(|(n, _)| n)
                    .filter(|n| !wanted.contains(n))
                    .take(3)
                    .collect();
                return Err(bad(
                    &path,
                    format!(
                        "holds tensors the model has no place for, e.g. {extra:?}: the adapter was made for another model"
                    ),
                ));
            }
            for ((_, p), key) in self.named_parameters_mut().into_iter().zip(&keys) {
                if let Some(f) = key.as_ref().and_then(|k| files.get(k)) {
                    let n: usize = f.shape.iter().product();
                    p.load_master(&files.values(f, 0..n)?)?;
                }
            }
            Ok(())
        })();
        if let Err(e) = result {
            self.remove_lora();
            return Err(e);
        }
        Ok(())
    }
}
