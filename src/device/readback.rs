//! Reading tensors back to the host, through the one staging path
//! ([`Exchange`]): [`download_many`] waits once per device for any number of
//! tensors; [`LocalTensor::to_vec`] reads one.

use super::staging::Exchange;
use super::tensor::LocalTensor;
use crate::element::DType;
use crate::error::Result;

/// Read several tensors (on any ranks and devices) back to the host with one
/// wait per device: copy each into a MAP_READ staging buffer, submit every
/// device, map all, then poll each device once.
/// A blocked tensor is read block by block and joined on the host.
pub fn download_many(tensors: &[&LocalTensor]) -> Result<Vec<Vec<u8>>> {
    let mut x = Exchange::with_capacity(tensors.len(), 0);
    for t in tensors {
        for b in t.blocks() {
            x.read(b)?;
        }
    }
    let mapped = x.map()?;
    let mut next = 0;
    Ok(tensors
        .iter()
        .map(|t| {
            let mut out = Vec::with_capacity(t.byte_len() as usize);
            for _ in t.blocks() {
                out.extend_from_slice(mapped.input(next));
                next += 1;
            }
            out
        })
        .collect())
}

impl LocalTensor {
    /// Read back as f32 (waits for the device); f16 tensors are widened,
    /// which is exact.
    pub fn to_vec(&self) -> Result<Vec<f32>> {
        if self.dtype() == DType::F16 {
            return Ok(self.to_vec_f16()?.iter().map(|h| h.to_f32()).collect());
        }
        self.expect_dtype("to_vec", DType::F32)?;
        Ok(bytemuck::pod_collect_to_vec(
            &download_many(&[self])?.remove(0),
        ))
    }

    /// Read back an f16 tensor (waits for the device).
    pub fn to_vec_f16(&self) -> Result<Vec<half::f16>> {
        self.expect_dtype("to_vec_f16", DType::F16)?;
        Ok(bytemuck::pod_collect_to_vec(
            &download_many(&[self])?.remove(0),
        ))
    }

    /// Read back as i32 (waits for the device).
    pub fn to_vec_i32(&self) -> Result<Vec<i32>> {
        self.expect_dtype("to_vec_i32", DType::I32)?;
        Ok(bytemuck::pod_collect_to_vec(
            &download_many(&[self])?.remove(0),
        ))
    }
}
