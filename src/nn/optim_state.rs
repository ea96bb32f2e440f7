//! [`AdamW`]'s state in a file, to resume training: each parameter's step
//! count and moments `m`, `v` as masters (the serial layout, so a run
//! resumes at another world size), in safetensors under the parameter's
//! name (`{name}.exp_avg`, `{name}.exp_avg_sq`, PyTorch's words) with the
//! step counts in the metadata.

use std::collections::HashMap;
use std::path::Path;

use safetensors::tensor::{Dtype, TensorView};

use super::checkpoint::writes_files;
use super::optim::AdamW;
use super::params::Params;
use crate::error::{Error, Result};

const OP: &str = "AdamW::load_state";

impl AdamW {
    /// Write the state of `model`'s parameters (those stepped so far) to
    /// `path`. In a multi-process mesh every process calls it and process 0
    /// writes.
    pub fn save_state(&self, model: &dyn Params, path: impl AsRef<Path>) -> Result<()> {
        let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
        let mut meta = HashMap::new();
        for (name, p) in model.named_parameters() {
            let Some((step, m, v)) = self.state.get(&p.id()) else {
                continue;
            };
            for (what, t) in [("exp_avg", m), ("exp_avg_sq", v)] {
                let master = p.master_of(t)?;
                tensors.push((
                    format!("{name}.{what}"),
                    p.shape().to_vec(),
                    bytemuck::cast_slice(&master).to_vec(),
                ));
            }
            meta.insert(format!("step.{name}"), step.to_string());
        }
        if !writes_files(model) {
            return Ok(());
        }
        let views = tensors
            .iter()
            .map(|(n, s, b)| {
                Ok((
                    n.clone(),
                    TensorView::new(Dtype::F32, s.clone(), b)
                        .map_err(|e| Error::invalid("AdamW::save_state", e.to_string()))?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let bytes = safetensors::serialize(views, Some(meta))
            .map_err(|e| Error::invalid("AdamW::save_state", e.to_string()))?;
        let path = path.as_ref();
        let tmp = path.with_extension("partial");
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, path)?;
        Ok(())
    }

    /// Read the state [`AdamW::save_state`] wrote for `model`'s parameters
    /// (at any world size). Every name, shape and step is checked before
    /// any state changes; a parameter the file has no state for starts
    /// fresh.
    pub fn load_state(&mut self, model: &dyn Params, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let bad = |m: String| Error::Checkpoint(format!("{}: {m}", path.display()));
        let bytes = std::fs::read(path).map_err(|e| bad(format!("cannot read it ({e})")))?;
        let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes)
            .map_err(|e| bad(format!("not a safetensors file ({e})")))?;
        let st = safetensors::SafeTensors::deserialize(&bytes)
            .map_err(|e| bad(format!("not a safetensors file ({e})")))?;
        let steps = meta.metadata().clone().unwrap_or_default();
        let mut fresh = HashMap::new();
        for (name, p) in model.named_parameters() {
            let Some(step) = steps.get(&format!("step.{name}")) else {
                continue;
            };
            let step: u32 = step
                .parse()
                .map_err(|_| bad(format!("step of {name:?} is not a count")))?;
            let mut moments = Vec::new();
            for what in ["exp_avg", "exp_avg_sq"] {
                let key = format!("{name}.{what}");
                let t = st
                    .tensor(&key)
                    .map_err(|_| bad(format!("has no {key:?}")))?;
                if t.dtype() != Dtype::F32 || t.shape() != p.shape() {
                    return Err(bad(format!(
                        "{key:?} is {:?} {:?}, the parameter {:?}: state of another model",
                        t.dtype(),
                        t.shape(),
                        p.shape()
                    )));
                }
                let master: Vec<f32> = bytemuck::pod_collect_to_vec(t.data());
                moments.push(p.laid_out(&master)?);
            }
            let v = moments.pop().expect("two moments");
            let m = moments.pop().expect("two moments");
            fresh.insert(p.id(), (step, m, v));
        }
        if fresh.is_empty() && !steps.is_empty() {
            return Err(Error::invalid(
                OP,
                format!("{}: no state for this model's parameters", path.display()),
            ));
        }
        self.state.extend(fresh);
        Ok(())
    }
}
