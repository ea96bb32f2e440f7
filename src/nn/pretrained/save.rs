//! Writing `model.safetensors`, streamed: the header is built from the
//! shapes alone, then each parameter is gathered, converted to the file's
//! layout by the family's rule (GPT-2 transposes its `Conv1D` weights),
//! written and dropped, so the host holds one parameter at a time. The file appears under its name only once
//! complete (written beside it, then renamed).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use crate::error::Result;
use crate::nn::Params;
use crate::nn::checkpoint::writes_files;

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

/// How a parameter is stored: its shape in the file, from its name and shape.
pub(crate) type FileShape<'a> = &'a dyn Fn(&str, &[usize]) -> Vec<usize>;
/// How a parameter's master values become the file's (a transpose, say).
pub(crate) type FileValues<'a> = &'a dyn Fn(&str, Vec<f32>, &[usize]) -> Result<Vec<f32>>;

/// Write every parameter of `model` to `path` as F32 safetensors, streamed
/// one parameter at a time, under the names `named_parameters` gives, shaped
/// and converted by `shape_of` and `values_of`. In a multi-process mesh
/// only process 0 writes; the others take part in the same gathers.
pub(crate) fn write_params(
    model: &dyn Params,
    path: &Path,
    shape_of: FileShape,
    values_of: FileValues,
) -> Result<()> {
    let params = model.named_parameters();
    if !writes_files(model) {
        for (_, p) in &params {
            p.master()?;
        }
        return Ok(());
    }
    let layout: Vec<(String, Vec<usize>)> = params
        .iter()
        .map(|(n, p)| (n.clone(), shape_of(n, p.shape())))
        .collect();
    let head = header(&layout);
    let tmp = partial(path);
    let write = || -> Result<()> {
        let mut out = BufWriter::new(File::create(&tmp)?);
        out.write_all(&(head.len() as u64).to_le_bytes())?;
        out.write_all(&head)?;
        for (name, p) in &params {
            let data = values_of(name, p.master()?, p.shape())?;
            for v in &data {
                out.write_all(&v.to_le_bytes())?;
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
