//! Loading a Hugging Face directory into a [`Decoder`] of any family,
//! written once: the weight files opened (every header parsed) and their
//! names sanitized by the family, the head tied where the files hold none,
//! the model built with zeros, then every parameter matched to its tensor
//! (name, dtype, shape, the rows of a fused tensor, a transpose) and every
//! tensor to a parameter before any value is written; only then each
//! tensor is read, widened to f32 and sharded, one at a time from the
//! memory map. A bad directory is an [`Error::Checkpoint`] naming the file
//! and tensor, and the mesh stays usable.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use super::CONFIG_FILE;
use super::files::{Found, WeightFiles, bad};
use super::gguf::GgufName;
use super::json::read_json_file;
use crate::device::Mesh;
use crate::element::DType;
use crate::error::{Error, Result};
use crate::nn::decoder::{Decoder, DecoderConfig, LoadOptions, Stored};
use crate::nn::generation_config::{GenerationConfig, eos_ids};
use crate::nn::gguf::GgufFile;
use crate::nn::params::Params;
use crate::quant::{QuantType, quantize_rows};

/// A parameter's tensor and where in it the parameter lies.
struct Planned {
    found: Found,
    stored: Stored,
}

impl Decoder {
    /// Load the weights of the Hugging Face directory `dir` into a model of
    /// `config` (parsed from `dir/config.json` by the family, or built in
    /// code for a family of your own) on `mesh`, at any world size. The
    /// head is tied when the config ties it or the files hold no head. The
    /// model starts in evaluation mode, with the directory's generation
    /// defaults.
    pub fn from_pretrained_as(
        mesh: &Mesh,
        config: Box<dyn DecoderConfig>,
        dir: impl AsRef<Path>,
        opts: LoadOptions,
    ) -> Result<Decoder> {
        let dir = dir.as_ref();
        if !dir.is_dir() {
            return Err(bad(
                dir,
                "no such directory; pass a Hugging Face model directory (config.json + \
                 model.safetensors)",
            ));
        }
        let json = read_json_file(&dir.join(CONFIG_FILE))?;
        let generation = GenerationConfig::read(dir, &eos_ids(json.get("eos_token_id")))?;
        let weights = WeightFiles::open(dir)?.sanitize(|n| config.sanitize(n))?;
        Decoder::from_weights(mesh, config, &weights, generation, opts, false)
    }

    /// Load the tensors of GGUF `file` (opened from `path`) into a model
    /// of `config` on `mesh`, each under the Hugging Face name `name`
    /// gives it (a family's mapping of llama.cpp's names; a tensor it
    /// gives none is skipped). Quantized tensors stay quantized on the
    /// device: each 2-D weight keeps the file's blocks, split over the
    /// ranks in whole blocks. With `opts.weight_dtype` f32, BF16 weight
    /// matrices stay bf16 (F16 ones widen to f32); another weight dtype
    /// converts (or quantizes) them. Other tensors are widened to f32. The
    /// head is tied when the file holds none.
    pub fn from_gguf_as(
        mesh: &Mesh,
        config: Box<dyn DecoderConfig>,
        path: &Path,
        file: GgufFile,
        name: impl Fn(&str) -> Option<GgufName>,
        generation: GenerationConfig,
        opts: LoadOptions,
    ) -> Result<Decoder> {
        // Then the family's own renaming, as for its safetensors names.
        let weights = WeightFiles::from_gguf(path, file, |n| {
            let g = name(n)?;
            let key = config.sanitize(&g.key)?;
            Some(GgufName { key, ..g })
        })?;
        Decoder::from_weights(mesh, config, &weights, generation, opts, true)
    }

    /// A model of `config` built on `mesh` with `weights` loaded; with
    /// `file_floats`, bf16 weight matrices stay so (when the weight dtype
    /// is f32).
    fn from_weights(
        mesh: &Mesh,
        mut config: Box<dyn DecoderConfig>,
        weights: &WeightFiles,
        generation: GenerationConfig,
        opts: LoadOptions,
        file_floats: bool,
    ) -> Result<Decoder> {
        let head = format!("{}.weight", config.spec().names.head);
        if weights.get(&head).is_none() {
            config.set_tied(true);
        }
        let mut model = Decoder::build(mesh, config, None, opts, None)?;
        let plan = plan(weights, &model)?;
        let keep = Keep {
            quantize: opts.weight_dtype.quant(),
            file_floats: file_floats && opts.weight_dtype == DType::F32,
        };
        load(weights, &plan, &mut model, keep)?;
        model.keep_weights(opts.weight_dtype)?;
        model.set_mode(false, 0);
        model.generation = generation;
        Ok(model)
    }

    /// Load the weights of the Hugging Face directory `dir` into this
    /// model, whose config `file_config` (the directory's, as its family
    /// reads it) must describe: the model keeps its own settings (sequence
    /// parallelism, dropout, dtypes). Every check runs before any
    /// parameter changes.
    pub fn load_pretrained_as(
        &mut self,
        file_config: &dyn DecoderConfig,
        dir: impl AsRef<Path>,
    ) -> Result<()> {
        let dir = dir.as_ref();
        let path = dir.join(CONFIG_FILE);
        if file_config.describe() != self.config.describe()
            || file_config.spec().vocab != self.spec.vocab
        {
            return Err(bad(
                &path,
                format!(
                    "describes {}, but this model is {}; build the model with \
                     from_pretrained to take the directory's own config",
                    file_config.describe(),
                    self.config.describe()
                ),
            ));
        }
        let weights = WeightFiles::open(dir)?.sanitize(|n| self.config.sanitize(n))?;
        let plan = plan(&weights, self)?;
        let keep = Keep {
            quantize: None,
            file_floats: false,
        };
        load(&weights, &plan, self, keep)
    }
}

/// Match every parameter of `model` to its tensor (dtype, shape), and check
/// that nothing else is in the files (an unused head must equal the tied
/// embedding).
fn plan(weights: &WeightFiles, model: &Decoder) -> Result<HashMap<String, Planned>> {
    let mut plan = HashMap::new();
    let mut used = HashSet::new();
    let names = model.spec.names;
    for (name, p) in model.named_parameters() {
        let stored = model.config.stored(&name, p.shape());
        let found = weights.get(&stored.key).ok_or_else(|| {
            Error::Checkpoint(format!(
                "{}: tensor {:?} is missing, and the config.json's model needs it (for {name})",
                weights.paths(),
                stored.key
            ))
        })?;
        let Some(dtype) = found.dtype else {
            return Err(Error::Checkpoint(format!(
                "{} is {}; only F32, F16, BF16 and llama.cpp's quantized types load",
                weights.at(found),
                found.type_name
            )));
        };
        let whole = stored.rows == (0..stored.shape.first().copied().unwrap_or(1));
        if found.transposed && (!whole || stored.order.is_some()) {
            return Err(Error::Checkpoint(format!(
                "{}: a transposed tensor loads only whole, in order, and {name} is part of it",
                weights.at(found)
            )));
        }
        if dtype.quant().is_some() && stored.transposed != found.transposed {
            return Err(Error::Checkpoint(format!(
                "{} is {dtype}, and {name} would be its transpose; quantized blocks are not \
                 transposed: convert the tensor to F32 or F16",
                weights.at(found)
            )));
        }
        if found.shape != stored.shape {
            return Err(Error::Checkpoint(format!(
                "{} has shape {:?}, but the config.json's model needs {:?}",
                weights.at(found),
                found.shape,
                stored.shape
            )));
        }
        used.insert(stored.key.clone());
        let found = found.clone();
        plan.insert(name, Planned { found, stored });
    }
    let head = format!("{}.weight", names.head);
    let embed = format!("{}.weight", names.embed);
    for (key, f) in weights.iter() {
        if used.contains(key) {
            continue;
        }
        if *key == head && model.head.is_none() {
            check_tied(weights, f, plan.get(&embed).map(|p| &p.found), &embed)?;
            continue;
        }
        return Err(Error::Checkpoint(format!(
            "{} matches no parameter of the model config.json describes",
            weights.at(f)
        )));
    }
    Ok(plan)
}

/// What [`load`] keeps weight matrices in.
#[derive(Clone, Copy)]
struct Keep {
    /// Quantize f32 ones on the host, so that no f32 copy of a weight to be
    /// quantized reaches the device.
    quantize: Option<QuantType>,
    /// Keep those stored as bf16 so.
    file_floats: bool,
}

/// Read, convert and shard each planned tensor into `model`, one at a
/// time: a quantized 2-D tensor as its blocks, the rest widened to f32,
/// then kept as `keep` says.
fn load(
    weights: &WeightFiles,
    plan: &HashMap<String, Planned>,
    model: &mut Decoder,
    keep: Keep,
) -> Result<()> {
    for (name, p) in model.named_parameters_mut() {
        let Planned { found, stored } = plan.get(&name).ok_or_else(|| {
            Error::Checkpoint(format!(
                "internal: parameter {name:?} has no planned tensor"
            ))
        })?;
        let matrix = p.shape().len() == 2;
        if let Some(q) = found.dtype.and_then(DType::quant).filter(|_| matrix) {
            let blocks = stored_rows(weights, found, stored);
            p.load_quant_master(q, &blocks)
                .map_err(|e| Error::Checkpoint(format!("{}: {e}", weights.at(found))))?;
            weights.release(found);
            continue;
        }
        let values = parameter_values(weights, found, stored)?;
        weights.release(found);
        match (keep.quantize, p.shape()) {
            (Some(q), &[rows, k]) => match q.for_row(k) {
                Some(q) => p.load_quant_master(q, &quantize_rows(q, &values, rows, k)?)?,
                None => p.load_master(&values)?,
            },
            _ => p.load_master(&values)?,
        }
        // BF16 is read as stored by every product and lookup; F16 tables
        // are not looked up, so F16 widens to f32.
        if keep.file_floats && matrix && found.dtype == Some(DType::BF16) {
            p.store_as(DType::BF16)?;
        }
    }
    Ok(())
}

/// The f32 values of a planned parameter: its rows of the tensor, in the
/// parameter's order and layout.
fn parameter_values(weights: &WeightFiles, found: &Found, stored: &Stored) -> Result<Vec<f32>> {
    let cols: usize = stored.shape.iter().skip(1).product();
    let rows = stored.rows.clone();
    if found.transposed {
        // The file holds the parameter's layout when the family stores it
        // transposed (GPT-2's `Conv1D`), else the transpose of it.
        let values = weights.values(found, 0..rows.len() * cols)?;
        return Ok(match stored.transposed {
            true => values,
            false => transpose(&values, cols, rows.len()),
        });
    }
    let values = weights.values(found, rows.start * cols..rows.end * cols)?;
    Ok(match (stored.transposed, &stored.order) {
        (true, _) => transpose(&values, rows.len(), cols),
        (false, Some(order)) => reorder(&values, order, cols, false),
        (false, None) => values,
    })
}

/// The blocks of a planned quantized parameter: its rows of the tensor,
/// in the parameter's order (the plan refused a transpose).
fn stored_rows(weights: &WeightFiles, found: &Found, stored: &Stored) -> Vec<u8> {
    let rows = match found.transposed {
        true => 0..stored.shape.last().copied().unwrap_or(1),
        false => stored.rows.clone(),
    };
    match &stored.order {
        Some(order) => order
            .iter()
            .flat_map(|&i| weights.rows_owned(found, rows.start + i..rows.start + i + 1))
            .collect(),
        None => weights.rows_owned(found, rows),
    }
}

/// A tied model's head in the files must be the embedding, value for value.
fn check_tied(
    weights: &WeightFiles,
    head: &Found,
    embed: Option<&Found>,
    embed_name: &str,
) -> Result<()> {
    let Some(embed) = embed else {
        return Err(Error::Checkpoint(format!(
            "{}: no embedding to tie it to",
            weights.at(head)
        )));
    };
    if head.shape != embed.shape {
        return Err(Error::Checkpoint(format!(
            "{} has shape {:?}, the embedding {:?}",
            weights.at(head),
            head.shape,
            embed.shape
        )));
    }
    let n: usize = embed.shape.iter().product();
    let cols = embed.shape.last().copied().unwrap_or(1).max(1);
    const BLOCK: usize = 1 << 16;
    for start in (0..n).step_by(BLOCK) {
        let end = (start + BLOCK).min(n);
        let (a, b) = (
            weights.values(head, start..end)?,
            weights.values(embed, start..end)?,
        );
        if let Some(k) = (0..a.len()).find(|&k| a[k].to_bits() != b[k].to_bits()) {
            let i = start + k;
            return Err(Error::Checkpoint(format!(
                "{} differs from {embed_name} at [{}, {}] ({} vs {}) although the head is \
                 tied; set tie_word_embeddings to false in config.json to load an untied head",
                weights.at(head),
                i / cols,
                i % cols,
                a[k],
                b[k]
            )));
        }
    }
    Ok(())
}

/// Rows of `data` (`cols` wide) in `order`: row `i` is `data`'s row
/// `order[i]`, or (`inverse`) row `order[i]` is `data`'s row `i`.
pub(crate) fn reorder(data: &[f32], order: &[usize], cols: usize, inverse: bool) -> Vec<f32> {
    let mut out = vec![0.0; data.len()];
    for (i, &j) in order.iter().enumerate() {
        let (to, from) = if inverse { (j, i) } else { (i, j) };
        if let (Some(dst), Some(src)) = (
            out.get_mut(to * cols..(to + 1) * cols),
            data.get(from * cols..(from + 1) * cols),
        ) {
            dst.copy_from_slice(src);
        }
    }
    out
}

/// `[rows, cols]` row-major → `[cols, rows]` row-major.
pub(crate) fn transpose(data: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; data.len()];
    for (r, row) in data.chunks_exact(cols.max(1)).enumerate().take(rows) {
        for (c, &v) in row.iter().enumerate() {
            out[c * rows + r] = v;
        }
    }
    out
}
