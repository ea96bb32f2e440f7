//! Checkpoints: the *master* (full, serial) parameters as safetensors, named
//! like a Hugging Face model (`"fc1.weight"`). Saving gathers each parameter to
//! the host (on every process of a multi-process mesh; process 0 writes);
//! loading checks every name, dtype and shape first and only then
//! shards the values onto the model's mesh, so a checkpoint saved on P ranks
//! loads on any other P, and a bad file leaves the model unchanged.
//!
//! Files may hold F32, F16 or BF16 (half the size, for sharing or
//! inference): [`to_safetensors_bytes_as`] rounds the masters on the host,
//! and loading widens F16 and BF16 tensors exactly into the masters.

use std::collections::HashMap;
use std::path::Path;

use safetensors::{Dtype, SafeTensors, tensor::TensorView};

use super::{Parameter, Params};
use crate::element::DType;
use crate::error::{Error, Result};

/// Serialise the master parameters of `model` to safetensors bytes (F32).
pub fn to_safetensors_bytes(model: &dyn Params) -> Result<Vec<u8>> {
    to_safetensors_bytes_as(model, DType::F32)
}

/// Serialise the master parameters of `model` as `dtype` tensors: F32, or
/// F16 or BF16 (each value rounded to nearest even on the host; needs no
/// f16 adapter).
pub fn to_safetensors_bytes_as(model: &dyn Params, dtype: DType) -> Result<Vec<u8>> {
    let file_dtype = match dtype {
        DType::F32 => Dtype::F32,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::I32 | DType::Quant(_) => {
            return Err(Error::Checkpoint(
                "safetensors parameters are saved as F32, F16 or BF16 (quantized weights: \
                 save_gguf)"
                    .into(),
            ));
        }
    };
    serialize(model.named_parameters(), dtype, file_dtype)
}

/// `params`' masters as `dtype` tensors (`file_dtype` in the file).
pub(super) fn serialize(
    params: Vec<(String, &Parameter)>,
    dtype: DType,
    file_dtype: Dtype,
) -> Result<Vec<u8>> {
    let mut owned: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, p) in params {
        let data = p.master()?;
        let bytes = match dtype {
            DType::F16 => {
                let h: Vec<half::f16> = data.iter().map(|&v| half::f16::from_f32(v)).collect();
                bytemuck::cast_slice(&h).to_vec()
            }
            DType::BF16 => {
                let h: Vec<half::bf16> = data.iter().map(|&v| half::bf16::from_f32(v)).collect();
                bytemuck::cast_slice(&h).to_vec()
            }
            _ => bytemuck::cast_slice(&data).to_vec(),
        };
        owned.push((name, p.shape().to_vec(), bytes));
    }
    let views = owned
        .iter()
        .map(|(n, s, d)| {
            TensorView::new(file_dtype, s.clone(), d)
                .map(|v| (n.clone(), v))
                .map_err(|e| Error::Checkpoint(format!("tensor {n}: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    safetensors::serialize(views, None).map_err(|e| Error::Checkpoint(e.to_string()))
}

/// Save the master parameters of `model` to a `.safetensors` file (F32;
/// [`to_safetensors_bytes_as`] writes F16). In a multi-process mesh every
/// process must call it (each parameter is gathered from all of them) and
/// only the process of world rank 0 writes the file.
pub fn save_safetensors(model: &dyn Params, path: impl AsRef<Path>) -> Result<()> {
    let bytes = to_safetensors_bytes(model)?;
    if writes_files(model) {
        std::fs::write(path, bytes)?;
    }
    Ok(())
}

/// Whether this process writes `model`'s checkpoint files: the one holding
/// rank 0 of the whole mesh (every process builds the same bytes; one writes
/// them). A replica on a sub-mesh ([`Mesh::axis`](crate::device::Mesh::axis))
/// of a multi-process mesh is written by world rank 0 only, so data-parallel
/// replicas never write one file twice.
pub(crate) fn writes_files(model: &dyn Params) -> bool {
    model.named_parameters().first().is_none_or(|(_, p)| {
        // The root's own rank, not the sub-mesh's: a 1-rank tp group of an
        // MPI mesh is not multi-process, but its process is not alone.
        let root = p.value.mesh().root();
        !root.is_multi_process() || root.ranks().first().map(|r| r.index()) == Some(0)
    })
}

/// Load master parameters from safetensors bytes into `model` (any world size).
/// Every parameter must be present with dtype F32 or F16 (widened exactly)
/// and the model's shape;
/// tensors in the file that the model lacks are an error too (`strict`).
pub fn from_safetensors_bytes(model: &mut dyn Params, bytes: &[u8]) -> Result<()> {
    let st = SafeTensors::deserialize(bytes)
        .map_err(|e| Error::Checkpoint(format!("not a safetensors file: {e}")))?;
    let mut values: HashMap<String, Vec<f32>> = HashMap::new();
    let params = model.named_parameters();
    for (name, p) in &params {
        values.insert(name.clone(), tensor_values(&st, name, p.shape())?);
    }
    let known: Vec<&str> = params.iter().map(|(n, _)| n.as_str()).collect();
    if let Some(extra) = st.names().into_iter().find(|n| !known.contains(n)) {
        return Err(Error::Checkpoint(format!(
            "tensor {extra:?} in the file matches no parameter of the model (expected {known:?})"
        )));
    }
    drop(params);
    for (name, p) in model.named_parameters_mut() {
        p.load_master(&values[&name])?;
    }
    Ok(())
}

/// Load a `.safetensors` file into `model`; see [`from_safetensors_bytes`].
/// In a multi-process mesh every process reads the file and uploads its
/// own slices.
pub fn load_safetensors(model: &mut dyn Params, path: impl AsRef<Path>) -> Result<()> {
    let bytes = std::fs::read(path)?;
    from_safetensors_bytes(model, &bytes)
}

/// Tensor `name` of `st` widened to f32, checked to be F32, F16 or BF16 of
/// `shape`.
pub(super) fn tensor_values(st: &SafeTensors, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
    let view = st.tensor(name).map_err(|_| {
        Error::Checkpoint(format!(
            "tensor {name:?} is missing; the file holds {:?}",
            st.names()
        ))
    })?;
    if !matches!(view.dtype(), Dtype::F32 | Dtype::F16 | Dtype::BF16) {
        return Err(Error::Checkpoint(format!(
            "tensor {name:?} is {:?}, expected F32, F16 or BF16; convert it before loading",
            view.dtype()
        )));
    }
    if view.shape() != shape {
        return Err(Error::Checkpoint(format!(
            "tensor {name:?} has shape {:?}, the model expects {shape:?}",
            view.shape(),
        )));
    }
    Ok(match view.dtype() {
        Dtype::F16 => {
            let h: Vec<half::f16> = bytemuck::pod_collect_to_vec(view.data());
            h.iter().map(|v| v.to_f32()).collect()
        }
        Dtype::BF16 => {
            let h: Vec<half::bf16> = bytemuck::pod_collect_to_vec(view.data());
            h.iter().map(|v| v.to_f32()).collect()
        }
        _ => bytemuck::pod_collect_to_vec(view.data()),
    })
}

/// Load `model` from every `.safetensors` file in directory `dir` (a
/// pipeline's stage files, [`Pipeline::save_stage`](crate::nn::Pipeline::save_stage),
/// or one whole-model file): each parameter from the first file, in name
/// order, that holds it. Tensors the model lacks are left alone (other
/// stages' layers). Everything is checked before any parameter changes.
pub fn load_safetensors_dir(model: &mut dyn Params, dir: impl AsRef<Path>) -> Result<()> {
    let dir = dir.as_ref();
    let mut files: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    files.sort();
    let bytes = files
        .iter()
        .map(std::fs::read)
        .collect::<std::io::Result<Vec<_>>>()?;
    let tables = bytes
        .iter()
        .zip(&files)
        .map(|(b, f)| {
            SafeTensors::deserialize(b).map_err(|e| {
                Error::Checkpoint(format!("{} is not a safetensors file: {e}", f.display()))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let mut values: HashMap<String, Vec<f32>> = HashMap::new();
    for (name, p) in model.named_parameters() {
        let st = tables
            .iter()
            .find(|t| t.tensor(&name).is_ok())
            .ok_or_else(|| {
                Error::Checkpoint(format!(
                    "no .safetensors file in {} holds tensor {name:?} ({} files)",
                    dir.display(),
                    files.len()
                ))
            })?;
        values.insert(name.clone(), tensor_values(st, &name, p.shape())?);
    }
    for (name, p) in model.named_parameters_mut() {
        p.load_master(&values[&name])?;
    }
    Ok(())
}
