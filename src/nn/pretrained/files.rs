//! The weight files of a Hugging Face directory, memory-mapped: one
//! `model.safetensors` or the shards a `model.safetensors.index.json` names.
//! Opening parses every header (a truncated or corrupt file fails here) and
//! indexes tensors by the names the files give them; a family whose files
//! name tensors otherwise than its parameters re-keys them
//! ([`WeightFiles::rename`], [`WeightFiles::without`]). Data is read one
//! tensor (or block) at a time and widened to f32, or as its raw rows of
//! quantized blocks. A GGUF file is opened into the same index
//! (`gguf.rs`), its tensors carrying how they differ from the Hugging Face
//! tensor they stand for (rows permuted, a constant added, transposed).

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};

use std::sync::Arc;

use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};
use serde_json::Value;

use super::json::read_json_file;
use super::{INDEX_FILE, MODEL_FILE};
use crate::element::DType;
use crate::error::{Error, Result};
use crate::nn::gguf::GgufFile;
use crate::quant::dequantize_rows;

/// `message` about `path` as a checkpoint error.
pub(crate) fn bad(path: &Path, message: impl std::fmt::Display) -> Error {
    Error::Checkpoint(format!("{}: {message}", path.display()))
}

/// The error for tensor `name` of `path` found again: `other`, in `at`.
fn twice(path: &Path, name: &str, other: &Found, at: &Path) -> Error {
    bad(
        path,
        format!(
            "tensor {name:?} appears twice (also as {:?} in {})",
            other.name,
            at.display()
        ),
    )
}

/// Where a weight file's bytes are.
pub(crate) enum Backing {
    /// A memory-mapped safetensors file.
    Map(Mmap),
    /// A parsed GGUF file (itself mapped).
    Gguf(GgufFile),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Map(map) => map,
            Backing::Gguf(file) => file.data(),
        }
    }
}

/// One weight file.
pub(crate) struct WeightFile {
    pub(crate) path: PathBuf,
    pub(crate) map: Backing,
}

/// Where a tensor lives: file, its name there, dtype, shape, byte range,
/// and how the stored rows differ from the tensor the key names.
#[derive(Clone, Debug)]
pub(crate) struct Found {
    pub(crate) file: usize,
    /// The name in the file (with any prefix).
    pub(crate) name: String,
    /// Its element type; `None` for one that does not load ([`Found::type_name`]).
    pub(crate) dtype: Option<DType>,
    /// The file's name of its type, for messages.
    pub(crate) type_name: String,
    /// The shape of the tensor the key names (the Hugging Face one).
    pub(crate) shape: Vec<usize>,
    pub(crate) bytes: (usize, usize),
    /// Row `r` of the named tensor is the file's row `perm[r]` (GGUF's
    /// Llama q and k, whose rows llama.cpp's converter interleaves).
    pub(crate) perm: Option<Arc<Vec<usize>>>,
    /// Added to every value read (GGUF's Gemma norms hold `1 + w`).
    pub(crate) add: f32,
    /// The file holds the transpose of the named tensor (GGUF's GPT-2
    /// weights are `[out, in]`, Hugging Face's `Conv1D` ones `[in, out]`).
    pub(crate) transposed: bool,
}

impl Found {
    /// Elements in one of the file's rows: its innermost dimension.
    fn file_cols(&self) -> usize {
        let cols = if self.transposed {
            self.shape.first()
        } else {
            self.shape.last()
        };
        cols.copied().unwrap_or(1).max(1)
    }

    /// Bytes of one of the file's rows.
    fn row_bytes(&self) -> usize {
        let rows = self.shape.iter().product::<usize>() / self.file_cols();
        (self.bytes.1 - self.bytes.0) / rows.max(1)
    }
}

/// Every weight file of a directory and the tensors they hold.
pub(crate) struct WeightFiles {
    files: Vec<WeightFile>,
    /// By key: the name in the file until [`WeightFiles::rename`]d.
    tensors: HashMap<String, Found>,
}

/// Memory-map `path` and parse its safetensors header.
pub(crate) fn open_weights(path: &Path) -> Result<(WeightFile, Vec<(String, Found)>)> {
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
            let dtype = match info.dtype {
                Dtype::F32 => Some(DType::F32),
                Dtype::F16 => Some(DType::F16),
                Dtype::BF16 => Some(DType::BF16),
                _ => None,
            };
            let found = Found {
                file: 0,
                name: name.clone(),
                dtype,
                type_name: format!("{:?}", info.dtype),
                shape: info.shape.clone(),
                bytes: (start + b, start + e),
                perm: None,
                add: 0.0,
                transposed: false,
            };
            (name, found)
        })
        .collect();
    let path = path.to_path_buf();
    let map = Backing::Map(map);
    Ok((WeightFile { path, map }, tensors))
}

/// The shard files an index names, in order, and its tensor → file map.
fn read_index(path: &Path) -> Result<(Vec<String>, BTreeMap<String, String>)> {
    let value = read_json_file(path)?;
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

impl WeightFiles {
    /// Map `dir`'s `model.safetensors`, or every shard its
    /// `model.safetensors.index.json` names, and parse each header.
    pub(crate) fn open(dir: &Path) -> Result<Self> {
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
                if let Some(other) = tensors.get(&name) {
                    let at = files
                        .get(other.file)
                        .map_or(&file.path, |w: &WeightFile| &w.path);
                    return Err(twice(&file.path, &name, other, at));
                }
                tensors.insert(name, f);
            }
            files.push(file);
        }
        if let Some(map) = weight_map {
            for (name, file) in map {
                let in_file = tensors.get(&name).map(|f| &files[f.file].path);
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
        Ok(WeightFiles { files, tensors })
    }

    /// Weight files from their parts (another format's reader).
    pub(crate) fn from_parts(files: Vec<WeightFile>, tensors: HashMap<String, Found>) -> Self {
        WeightFiles { files, tensors }
    }

    /// Every tensor under the key `key(name in the file)`: a family's names
    /// for its parameters. Two tensors given one key are an error naming both.
    pub(crate) fn rename(self, key: impl Fn(&str) -> String) -> Result<Self> {
        let mut tensors: HashMap<String, Found> = HashMap::new();
        // In file order, so the error names the later file as opening does.
        let mut found: Vec<Found> = self.tensors.into_values().collect();
        found.sort_by(|a, b| (a.file, &a.name).cmp(&(b.file, &b.name)));
        for f in found {
            let k = key(&f.name);
            if let Some(other) = tensors.get(&k) {
                let path = &self.files[f.file].path;
                return Err(twice(path, &f.name, other, &self.files[other.file].path));
            }
            tensors.insert(k, f);
        }
        Ok(WeightFiles {
            files: self.files,
            tensors,
        })
    }

    /// Every tensor under the key `key(name in the file)`, and without those
    /// it gives none (buffers a family's files carry that are no
    /// parameters): a family's `sanitize`.
    pub(crate) fn sanitize(self, key: impl Fn(&str) -> Option<String>) -> Result<Self> {
        const SKIP: &str = "\0skip";
        let renamed = self.rename(|name| key(name).unwrap_or_else(|| format!("{SKIP}{name}")))?;
        Ok(renamed.without(|k| k.starts_with(SKIP)))
    }

    /// These files without the tensors whose key `skip` picks (buffers a
    /// family's files carry that are not parameters).
    pub(crate) fn without(mut self, skip: impl Fn(&str) -> bool) -> Self {
        self.tensors.retain(|key, _| !skip(key));
        self
    }

    /// The tensor under key `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&Found> {
        self.tensors.get(name)
    }

    /// Every tensor, by key.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&String, &Found)> {
        self.tensors.iter()
    }

    /// The files, for messages.
    pub(crate) fn paths(&self) -> String {
        let paths: Vec<String> = self
            .files
            .iter()
            .map(|f| f.path.display().to_string())
            .collect();
        paths.join(", ")
    }

    /// Where a tensor is, for messages: `dir/model.safetensors: tensor "x"`.
    pub(crate) fn at(&self, f: &Found) -> String {
        format!("{}: tensor {:?}", self.files[f.file].path.display(), f.name)
    }

    /// Elements `range` of tensor `f` (the named tensor's, row-major;
    /// for a transposed one, the file's order), widened to f32: rows
    /// permuted, dequantized and offset as `f` says.
    pub(crate) fn values(&self, f: &Found, range: Range<usize>) -> Result<Vec<f32>> {
        let cols = f.file_cols();
        let quant = f.dtype.and_then(DType::quant);
        if f.perm.is_none() && quant.is_none() {
            let size = f.dtype.map_or(4, DType::size_bytes);
            let bytes = self.raw(f, range.start * size..range.end * size);
            let mut values = widen(f.dtype, bytes);
            offset(&mut values, f.add);
            return Ok(values);
        }
        // Whole rows, one at a time through the permutation.
        let rows = range.start / cols..range.end.div_ceil(cols);
        let mut out = Vec::with_capacity(rows.len() * cols);
        for r in rows.clone() {
            let bytes = self.rows(f, r..r + 1);
            match quant {
                Some(q) => out.extend(dequantize_rows(q, bytes, 1, cols)?),
                None => out.extend(widen(f.dtype, bytes)),
            }
        }
        let skip = range.start - rows.start * cols;
        out.drain(..skip);
        out.truncate(range.len());
        offset(&mut out, f.add);
        Ok(out)
    }

    /// The stored bytes of rows `rows` of `f` (the named tensor's rows,
    /// through any permutation): for a quantized tensor, its blocks.
    pub(crate) fn rows(&self, f: &Found, rows: Range<usize>) -> &[u8] {
        let rb = f.row_bytes();
        match &f.perm {
            Some(perm) if rows.len() == 1 => {
                let r = perm[rows.start];
                self.raw(f, r * rb..(r + 1) * rb)
            }
            _ => self.raw(f, rows.start * rb..rows.end * rb),
        }
    }

    /// The stored bytes of rows `rows` of `f`, through any permutation, as
    /// one owned buffer.
    pub(crate) fn rows_owned(&self, f: &Found, rows: Range<usize>) -> Vec<u8> {
        if f.perm.is_none() {
            return self.rows(f, rows).to_vec();
        }
        rows.flat_map(|r| self.rows(f, r..r + 1).iter().copied())
            .collect()
    }

    /// Bytes `range` of `f`'s data.
    fn raw(&self, f: &Found, range: Range<usize>) -> &[u8] {
        let (start, end) = (f.bytes.0 + range.start, f.bytes.0 + range.end);
        &self.files[f.file].map.bytes()[start..end]
    }

    /// Give the file's pages of `f` back now rather than when the map is
    /// dropped, so loading adds one tensor, not the whole file, to the
    /// resident set (on a CPU adapter the model itself lives in host
    /// memory too).
    pub(crate) fn release(&self, f: &Found) {
        #[cfg(target_os = "linux")]
        if let Backing::Map(map) = &self.files[f.file].map {
            let (start, end) = f.bytes;
            // SAFETY: the map is a read-only shared file mapping, and no
            // slice of it outlives the read that made it: dropped pages
            // are read again from the file on the next access.
            unsafe {
                let _ = map.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    start,
                    end - start,
                );
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = f;
    }
}

/// Little-endian `bytes` of `dtype` (f32 where unknown) widened to f32.
fn widen(dtype: Option<DType>, bytes: &[u8]) -> Vec<f32> {
    match dtype {
        Some(DType::F16) => bytes
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        Some(DType::BF16) => bytes
            .chunks_exact(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        _ => bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
    }
}

/// `add` added to every value.
fn offset(values: &mut [f32], add: f32) {
    if add != 0.0 {
        values.iter_mut().for_each(|v| *v += add);
    }
}
