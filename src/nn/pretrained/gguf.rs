//! A GGUF file opened as weight files: every tensor under the Hugging Face
//! name a family's mapping gives it ([`GgufName`]), with how llama.cpp's
//! converter changed it (q/k rows interleaved per head, `1 + w` norms,
//! `Conv1D` weights transposed) recorded for the reads to undo. The
//! loader then plans and loads it as it does safetensors.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use super::files::{Backing, Found, WeightFile, WeightFiles};
use crate::error::{Error, Result};
use crate::nn::gguf::GgufFile;

/// Where a GGUF tensor goes: the Hugging Face tensor it stands for and
/// what llama.cpp's converter did to it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GgufName {
    /// The Hugging Face name (`model.layers.0.self_attn.q_proj.weight`).
    pub key: String,
    /// Its rows were interleaved for llama.cpp's RoPE, per head of this
    /// many (Llama's q and k): `gguf[h·d + 2i + j] = hf[h·d + j·d/2 + i]`.
    pub permuted_heads: Option<usize>,
    /// Subtract from every value (Gemma's norms are stored `1 + w`).
    pub minus: f32,
    /// The file holds the transpose of the Hugging Face tensor (GPT-2's
    /// `Conv1D` weights).
    pub transposed: bool,
}

impl WeightFiles {
    /// The tensors of GGUF `file` (opened from `path`) under the names
    /// `name` gives them; a tensor it gives none is not loaded (one that
    /// the family computes from the metadata, as `rope_freqs`).
    pub(crate) fn from_gguf(
        path: &Path,
        file: GgufFile,
        name: impl Fn(&str) -> Option<GgufName>,
    ) -> Result<WeightFiles> {
        let mut tensors: HashMap<String, Found> = HashMap::new();
        for info in file.tensors() {
            let Some(to) = name(info.name()) else {
                continue;
            };
            let mut shape = info.shape().to_vec();
            if to.transposed {
                shape.reverse();
            }
            let perm = match to.permuted_heads {
                Some(heads) => Some(Arc::new(interleaved(path, info.name(), &shape, heads)?)),
                None => None,
            };
            let dtype = info.dtype();
            let found = Found {
                file: 0,
                name: info.name().to_string(),
                dtype: Some(dtype),
                type_name: dtype.to_string(),
                shape,
                bytes: (info.byte_range().start, info.byte_range().end),
                perm,
                add: -to.minus,
                transposed: to.transposed,
            };
            if let Some(other) = tensors.get(&to.key) {
                return Err(Error::Checkpoint(format!(
                    "{}: tensors {:?} and {:?} both map to {:?}",
                    path.display(),
                    other.name,
                    info.name(),
                    to.key
                )));
            }
            tensors.insert(to.key, found);
        }
        let files = vec![WeightFile {
            path: path.to_path_buf(),
            map: Backing::Gguf(file),
        }];
        Ok(WeightFiles::from_parts(files, tensors))
    }
}

/// The file row of each Hugging Face row of a tensor whose rows llama.cpp
/// interleaved per head of `heads`.
fn interleaved(path: &Path, name: &str, shape: &[usize], heads: usize) -> Result<Vec<usize>> {
    let rows = shape.first().copied().unwrap_or(0);
    if heads == 0 || rows % heads != 0 || !(rows / heads).is_multiple_of(2) {
        return Err(Error::Checkpoint(format!(
            "{}: tensor {name:?} has {rows} rows, not {heads} heads of an even width; \
             the file's head counts disagree with its tensors",
            path.display()
        )));
    }
    let d = rows / heads;
    let half = d / 2;
    Ok((0..rows)
        .map(|r| {
            let (h, k) = (r / d, r % d);
            let (j, i) = (k / half, k % half);
            h * d + 2 * i + j
        })
        .collect())
}
