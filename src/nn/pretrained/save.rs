//! Writing a Hugging Face directory ([`Decoder::save_pretrained`]):
//! `model.safetensors` streamed — the header built from the shapes alone,
//! then each parameter gathered, laid out as the family stores it
//! ([`DecoderConfig::stored`](crate::nn::DecoderConfig::stored): GPT-2's
//! transposed `Conv1D` weights, Phi-3's fused projections joined again),
//! written and dropped, so the host holds one parameter at a time — and the
//! JSON files. Each file appears under its name only once complete
//! (written beside it, then renamed).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use super::load::{reorder, transpose};
use super::{CONFIG_FILE, MODEL_FILE};
use crate::error::{Error, Result};
use crate::nn::checkpoint::writes_files;
use crate::nn::decoder::Decoder;
use crate::nn::params::Params;

/// `path` with `.partial` appended: where a file is written before renaming.
fn partial(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".partial");
    PathBuf::from(s)
}

/// Write `bytes` to `path` through a temporary file and a rename.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = partial(path);
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// The safetensors header for F32 tensors `(name, shape)` stored back to back
/// in this order, padded with spaces to 8 bytes as the format's writer does.
fn header(tensors: &[(String, Vec<usize>)]) -> Vec<u8> {
    let mut map = Map::new();
    map.insert("__metadata__".into(), json!({ "format": "pt" }));
    let mut offset = 0usize;
    for (name, shape) in tensors {
        let bytes = 4 * shape.iter().product::<usize>();
        let info =
            json!({ "dtype": "F32", "shape": shape, "data_offsets": [offset, offset + bytes] });
        map.insert(name.clone(), info);
        offset += bytes;
    }
    let mut text = Value::Object(map).to_string().into_bytes();
    text.resize(text.len().next_multiple_of(8), b' ');
    text
}

/// One tensor of the file: its name, shape, and the parameters (index in
/// `named_parameters`) whose master values fill its rows, in order, each
/// transposed or not.
pub(crate) struct FileTensor {
    pub(crate) name: String,
    pub(crate) shape: Vec<usize>,
    pub(crate) parts: Vec<(usize, bool, Option<Vec<usize>>)>,
}

/// Write `tensors` of `model` to `path` as F32 safetensors, streamed one
/// parameter at a time. In a multi-process mesh only process 0 writes; the
/// others take part in the same gathers, in the same order.
pub(crate) fn write_tensors(model: &dyn Params, path: &Path, tensors: &[FileTensor]) -> Result<()> {
    let params = model.named_parameters();
    if !writes_files(model) {
        for (_, p) in &params {
            p.master()?;
        }
        return Ok(());
    }
    let layout: Vec<(String, Vec<usize>)> = tensors
        .iter()
        .map(|t| (t.name.clone(), t.shape.clone()))
        .collect();
    let head = header(&layout);
    let tmp = partial(path);
    let write = || -> Result<()> {
        let mut out = BufWriter::new(File::create(&tmp)?);
        out.write_all(&(head.len() as u64).to_le_bytes())?;
        out.write_all(&head)?;
        for t in tensors {
            for (i, transposed, order) in &t.parts {
                let p = params[*i].1;
                let data = p.master()?;
                let cols: usize = p.shape().iter().skip(1).product();
                let data = match (transposed, p.shape(), order) {
                    (true, [rows, cols], _) => transpose(&data, *rows, *cols),
                    (false, _, Some(order)) => reorder(&data, order, cols, true),
                    _ => data,
                };
                for v in &data {
                    out.write_all(&v.to_le_bytes())?;
                }
            }
        }
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        Ok(())
    };
    match write() {
        Ok(()) => Ok(std::fs::rename(&tmp, path)?),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

impl Decoder {
    /// Write this model as a Hugging Face directory: `config.json` (the
    /// family's, as transformers reads it), `generation_config.json` (its
    /// eos ids) and `model.safetensors` (F32, the checkpoint's names and
    /// layout: fused tensors joined again, `Conv1D` weights transposed, no
    /// head when tied), which
    /// `transformers.AutoModelForCausalLM.from_pretrained(dir)` reads.
    /// Creates `dir` if needed; one parameter at a time is gathered to the
    /// host. In a multi-process mesh every process calls it and only
    /// process 0 writes. A whole model only.
    pub fn save_pretrained(&self, dir: impl AsRef<Path>) -> Result<()> {
        const OP: &str = "Decoder::save_pretrained";
        if self.stage.1 != 1 {
            return Err(Error::invalid(
                OP,
                "save a whole model (a pipeline's stages: Pipeline::save_stage)",
            ));
        }
        let tensors = self.file_tensors()?;
        let config = self.config.to_json(&self.generation.eos_token_ids)?;
        let dir = dir.as_ref();
        let writes = writes_files(self);
        if writes {
            std::fs::create_dir_all(dir)?;
        }
        write_tensors(self, &dir.join(MODEL_FILE), &tensors)?;
        if !writes {
            return Ok(());
        }
        write_atomic(&dir.join(CONFIG_FILE), config.as_bytes())?;
        let generation = self.generation.to_json();
        write_atomic(&dir.join("generation_config.json"), generation.as_bytes())
    }

    /// The checkpoint's tensors, each from the parameters the family
    /// stores in it (checked to fill it exactly).
    fn file_tensors(&self) -> Result<Vec<FileTensor>> {
        let mut tensors: Vec<FileTensor> = Vec::new();
        let mut filled: Vec<usize> = Vec::new();
        for (i, (name, p)) in self.named_parameters().iter().enumerate() {
            let s = self.config.stored(name, p.shape());
            let at = tensors.iter().position(|t| t.name == s.key);
            let t = match at {
                Some(t) => t,
                None => {
                    tensors.push(FileTensor {
                        name: s.key.clone(),
                        shape: s.shape.clone(),
                        parts: Vec::new(),
                    });
                    filled.push(0);
                    tensors.len() - 1
                }
            };
            if tensors[t].shape != s.shape || s.rows.start != filled[t] {
                return Err(Error::invalid(
                    "Decoder::save_pretrained",
                    format!(
                        "internal: {name} is stored as rows {:?} of {:?} {:?} after {} rows",
                        s.rows, s.key, s.shape, filled[t]
                    ),
                ));
            }
            filled[t] = s.rows.end;
            tensors[t].parts.push((i, s.transposed, s.order));
        }
        Ok(tensors)
    }
}
