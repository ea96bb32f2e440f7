//! Reading a Hugging Face GPT-2 directory: open and memory-map every weight
//! file and parse its header ([`HfCheckpoint::open`]), match each expected
//! parameter to a tensor and check dtype and shape, the tied head and any
//! stray tensor ([`HfCheckpoint::plan`]), and only then convert one tensor at
//! a time (widen, transpose a `Conv1D`) and shard it through
//! [`Parameter::load_master`](crate::nn::Parameter::load_master)
//! ([`HfCheckpoint::load_into`]).

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};
use serde_json::Value;

use super::config::HfGpt2Config;
use super::{CONFIG_FILE, INDEX_FILE, MODEL_FILE, hf_shape, is_conv1d, transpose};
use crate::error::{Error, Result};
use crate::nn::gpt::{Gpt, GptConfig};
use crate::nn::parameter::Module;

/// `message` about `path` as a checkpoint error.
fn bad(path: &Path, message: impl std::fmt::Display) -> Error {
    Error::Checkpoint(format!("{}: {message}", path.display()))
}

/// One memory-mapped weight file.
struct WeightFile {
    path: PathBuf,
    map: Mmap,
}

/// Where a tensor lives: file, its name there, dtype, shape, byte range.
#[derive(Clone, Debug)]
pub(super) struct Found {
    file: usize,
    name: String,
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: (usize, usize),
}

/// An opened checkpoint directory whose headers all parsed.
pub(super) struct HfCheckpoint {
    config: HfGpt2Config,
    config_path: PathBuf,
    files: Vec<WeightFile>,
    /// By name without the `transformer.` prefix.
    tensors: HashMap<String, Found>,
}

/// Our parameter names and shapes for a GPT-2 of `c` (the order of
/// [`Gpt`]'s `named_parameters`).
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

/// The names and shapes of `gpt`'s parameters.
pub(super) fn model_params(gpt: &Gpt) -> Vec<(String, Vec<usize>)> {
    gpt.named_parameters()
        .into_iter()
        .map(|(n, p)| (n, p.shape().to_vec()))
        .collect()
}

/// Memory-map `path` and parse its safetensors header.
fn open_weights(path: &Path) -> Result<(WeightFile, Vec<(String, Found)>)> {
    let file = File::open(path).map_err(|e| bad(path, format!("cannot open it ({e})")))?;
    // SAFETY: the map is only read, and every range read is checked against
    // the header below. Another process truncating the file while it is
    // mapped could fault the read; safetensors' own loaders accept the same.
    let map = unsafe { Mmap::map(&file) }.map_err(|e| bad(path, format!("cannot map it ({e})")))?;
    let (n, meta) = SafeTensors::read_metadata(&map).map_err(|e| {
        bad(
            path,
            format!("not a valid safetensors file ({e}); it may be truncated or corrupt, download or save it again"),
        )
    })?;
    let start = 8 + n;
    let tensors = meta
        .tensors()
        .into_iter()
        .map(|(name, info)| {
            let (b, e) = info.data_offsets;
            let found = Found {
                file: 0,
                name: name.clone(),
                dtype: info.dtype,
                shape: info.shape.clone(),
                bytes: (start + b, start + e),
            };
            (name, found)
        })
        .collect();
    let path = path.to_path_buf();
    Ok((WeightFile { path, map }, tensors))
}

/// The shard files an index names, in order, and its tensor → file map.
fn read_index(path: &Path) -> Result<(Vec<String>, BTreeMap<String, String>)> {
    let text =
        std::fs::read_to_string(path).map_err(|e| bad(path, format!("cannot read it ({e})")))?;
    let value: Value =
        serde_json::from_str(&text).map_err(|e| bad(path, format!("not valid JSON ({e})")))?;
    let map = value
        .get("weight_map")
        .and_then(Value::as_object)
        .ok_or_else(|| bad(path, "has no weight_map object"))?;
    let mut weight_map = BTreeMap::new();
    for (name, file) in map {
        let file = file
            .as_str()
            .filter(|f| !f.contains('/') && !f.contains('\\') && !f.starts_with('.'))
            .ok_or_else(|| {
                bad(
                    path,
                    format!("weight_map[{name:?}] = {file} is not a file name in this directory"),
                )
            })?;
        weight_map.insert(name.clone(), file.to_string());
    }
    let mut files: Vec<String> = weight_map.values().cloned().collect();
    files.sort();
    files.dedup();
    Ok((files, weight_map))
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
        let (single, index) = (dir.join(MODEL_FILE), dir.join(INDEX_FILE));
        let (names, weight_map) = if single.is_file() {
            (vec![MODEL_FILE.to_string()], None)
        } else if index.is_file() {
            let (files, map) = read_index(&index)?;
            (files, Some(map))
        } else {
            return Err(bad(
                dir,
                format!(
                    "neither {MODEL_FILE} nor {INDEX_FILE} is there; download the weights (huggingface-cli download <model> config.json {MODEL_FILE})"
                ),
            ));
        };
        let mut files = Vec::new();
        let mut tensors: HashMap<String, Found> = HashMap::new();
        for (i, name) in names.iter().enumerate() {
            let (file, found) = open_weights(&dir.join(name))?;
            for (name, mut f) in found {
                f.file = i;
                let key = name
                    .strip_prefix("transformer.")
                    .unwrap_or(&name)
                    .to_string();
                if let Some(other) = tensors.get(&key) {
                    return Err(bad(
                        &file.path,
                        format!(
                            "tensor {name:?} appears twice (also as {:?} in {})",
                            other.name,
                            files
                                .get(other.file)
                                .map_or(file.path.display(), |w: &WeightFile| w.path.display())
                        ),
                    ));
                }
                tensors.insert(key, f);
            }
            files.push(file);
        }
        if let Some(map) = weight_map {
            for (name, file) in map {
                let key = name.strip_prefix("transformer.").unwrap_or(&name);
                let in_file = tensors.get(key).map(|f| &files[f.file].path);
                if in_file != Some(&dir.join(&file)) {
                    return Err(bad(
                        &dir.join(INDEX_FILE),
                        format!(
                            "says tensor {name:?} is in {file}, but that file does not hold it"
                        ),
                    ));
                }
            }
        }
        Ok(HfCheckpoint {
            config,
            config_path,
            files,
            tensors,
        })
    }

    /// The parsed `config.json`.
    pub(super) fn config(&self) -> &HfGpt2Config {
        &self.config
    }

    /// Where a tensor is, for messages: `dir/model.safetensors: tensor "x"`.
    fn at(&self, f: &Found) -> String {
        format!("{}: tensor {:?}", self.files[f.file].path.display(), f.name)
    }

    /// A model built from `c` must agree with `config.json` on everything the
    /// weights do not show (heads, activation, epsilon) as well as the sizes.
    pub(super) fn check_config(&self, c: &GptConfig) -> Result<()> {
        let want = self.config.to_gpt_config()?;
        let ours = (
            c.vocab,
            c.n_ctx,
            c.hidden,
            c.heads,
            c.layers,
            c.ffn,
            c.activation,
            c.eps,
        );
        let theirs = (
            want.vocab,
            want.n_ctx,
            want.hidden,
            want.heads,
            want.layers,
            want.ffn,
            want.activation,
            want.eps,
        );
        if ours != theirs {
            return Err(bad(
                &self.config_path,
                format!(
                    "describes (vocab, n_ctx, hidden, heads, layers, ffn, activation, eps) = {theirs:?}, but the model has {ours:?}; build it with Gpt::from_pretrained"
                ),
            ));
        }
        Ok(())
    }

    /// Match every parameter `(our name, our shape)` to a tensor, checking
    /// dtype and Hugging Face shape; check the head is tied and that nothing
    /// else is in the files. Reads no tensor data except `lm_head.weight`.
    pub(super) fn plan(&self, expected: &[(String, Vec<usize>)]) -> Result<HashMap<String, Found>> {
        let c = &self.config;
        let sizes = format!(
            "config.json: vocab_size {}, n_positions {}, n_embd {}, n_layer {}, n_inner {}",
            c.vocab_size,
            c.n_positions,
            c.n_embd,
            c.n_layer,
            c.n_inner.map_or("null".into(), |n| n.to_string())
        );
        let mut plan = HashMap::new();
        for (name, shape) in expected {
            let f = self.tensors.get(name).ok_or_else(|| {
                let files: Vec<String> = self
                    .files
                    .iter()
                    .map(|f| f.path.display().to_string())
                    .collect();
                Error::Checkpoint(format!(
                    "{}: tensor {name:?} is missing ({sizes})",
                    files.join(", ")
                ))
            })?;
            if !matches!(f.dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16) {
                return Err(Error::Checkpoint(format!(
                    "{} is {:?}; only F32, F16 and BF16 load",
                    self.at(f),
                    f.dtype
                )));
            }
            let want = hf_shape(name, shape);
            if f.shape != want {
                return Err(Error::Checkpoint(format!(
                    "{} has shape {:?}, but {sizes} needs {want:?}",
                    self.at(f),
                    f.shape
                )));
            }
            plan.insert(name.clone(), f.clone());
        }
        for (key, f) in &self.tensors {
            if plan.contains_key(key)
                || key.ends_with(".attn.bias")
                || key.ends_with(".attn.masked_bias")
            {
                continue;
            }
            if key == "lm_head.weight" {
                self.check_tied(f, plan.get("wte.weight"))?;
                continue;
            }
            return Err(Error::Checkpoint(format!(
                "{} matches no parameter of a GPT-2 of {sizes}",
                self.at(f)
            )));
        }
        Ok(plan)
    }

    /// `lm_head.weight` must equal `wte.weight`: [`Gpt`]'s head is tied.
    fn check_tied(&self, head: &Found, wte: Option<&Found>) -> Result<()> {
        let Some(wte) = wte else {
            return Err(Error::Checkpoint(format!(
                "{}: there is no wte.weight to tie it to",
                self.at(head)
            )));
        };
        if head.dtype != wte.dtype {
            return Err(Error::Checkpoint(format!(
                "{} is {:?}, but wte.weight is {:?}; Gpt ties its head to wte, so they must be the same tensor",
                self.at(head),
                head.dtype,
                wte.dtype
            )));
        }
        if head.shape != wte.shape {
            return Err(Error::Checkpoint(format!(
                "{} has shape {:?}, but wte.weight is {:?}; Gpt ties its head to wte",
                self.at(head),
                head.shape,
                wte.shape
            )));
        }
        const BLOCK: usize = 1 << 16;
        let n: usize = wte.shape.iter().product();
        let cols = wte.shape.last().copied().unwrap_or(1).max(1);
        for start in (0..n).step_by(BLOCK) {
            let end = (start + BLOCK).min(n);
            let (a, b) = (self.values(head, start..end), self.values(wte, start..end));
            if let Some(k) = (0..a.len()).find(|&k| a[k].to_bits() != b[k].to_bits()) {
                let i = start + k;
                return Err(Error::Checkpoint(format!(
                    "{} differs from wte.weight at [{}, {}] ({} vs {}): this is an untied head, and Gpt ties its head to wte",
                    self.at(head),
                    i / cols,
                    i % cols,
                    a[k],
                    b[k]
                )));
            }
        }
        Ok(())
    }

    /// Elements `range` of tensor `f`, widened to f32.
    fn values(&self, f: &Found, range: std::ops::Range<usize>) -> Vec<f32> {
        let size = f.dtype.bitsize() / 8;
        let bytes =
            &self.files[f.file].map[f.bytes.0..f.bytes.1][range.start * size..range.end * size];
        match f.dtype {
            Dtype::F16 => bytes
                .chunks_exact(2)
                .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            Dtype::BF16 => bytes
                .chunks_exact(2)
                .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            _ => bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
        }
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
                    self.at(f),
                    f.shape,
                    p.shape()
                )));
            }
            let n = f.shape.iter().product();
            let mut data = self.values(f, 0..n);
            if is_conv1d(&name) {
                // HF [in, out] → our [out, in].
                data = transpose(&data, f.shape[0], f.shape[1]);
            }
            p.load_master(&data)?;
        }
        Ok(())
    }
}
