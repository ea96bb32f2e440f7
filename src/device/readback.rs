//! Reading tensors back to the host, through the one staging path
//! ([`Exchange`]): [`download_many_async`] waits once per device for any
//! number of tensors; [`LocalTensor::to_vec_async`] reads one. The blocking
//! forms ([`download_many`], [`LocalTensor::to_vec`], …) are the same code
//! run to its end on native; in a browser they are
//! [`Error::WouldBlock`](crate::Error::WouldBlock).

use super::staging::Exchange;
use super::tensor::LocalTensor;
use super::wait::block_on;
use crate::element::DType;
use crate::error::Result;

/// Read several tensors (on any ranks and devices) back to the host with one
/// wait per device: copy each into a MAP_READ staging buffer, submit every
/// device, map all, then poll each device once (blocking form of
/// [`download_many_async`]).
/// A blocked tensor is read block by block and joined on the host.
pub fn download_many(tensors: &[&LocalTensor]) -> Result<Vec<Vec<u8>>> {
    block_on("download_many", download_many_async(tensors))
}

/// [`download_many`] as a future, resolved by the staging buffers' map
/// callbacks: what a browser page awaits.
pub async fn download_many_async(tensors: &[&LocalTensor]) -> Result<Vec<Vec<u8>>> {
    let mut x = Exchange::with_capacity(tensors.len(), 0);
    for t in tensors {
        for b in t.blocks() {
            x.read(b)?;
        }
    }
    let mapped = x.map_async().await?;
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
    /// Read back as f32 (waits for the device); f16 and bf16 tensors are widened,
    /// which is exact; a quantized one is dequantized on the host as ggml
    /// does.
    pub fn to_vec(&self) -> Result<Vec<f32>> {
        block_on("LocalTensor::to_vec", self.to_vec_async())
    }

    /// [`LocalTensor::to_vec`] as a future.
    pub async fn to_vec_async(&self) -> Result<Vec<f32>> {
        if let DType::Quant(q) = self.dtype() {
            let k = self.shape().last().copied().unwrap_or(0);
            let rows = self.len().checked_div(k).unwrap_or(0);
            let blocks = self.to_quant_blocks_async().await?;
            return crate::quant::dequantize_rows(q, &blocks, rows, k);
        }
        if self.dtype() == DType::F16 {
            let h = self.read_async("to_vec_f16", DType::F16).await?;
            let h: Vec<half::f16> = bytemuck::pod_collect_to_vec(&h);
            return Ok(h.iter().map(|h| h.to_f32()).collect());
        }
        if self.dtype() == DType::BF16 {
            let h = self.read_async("to_vec_bf16", DType::BF16).await?;
            let h: Vec<half::bf16> = bytemuck::pod_collect_to_vec(&h);
            return Ok(h.iter().map(|h| h.to_f32()).collect());
        }
        let raw = self.read_async("to_vec", DType::F32).await?;
        Ok(bytemuck::pod_collect_to_vec(&raw))
    }

    /// A quantized tensor's blocks in GGUF order, as uploaded
    /// ([`Rank::upload_quant`](super::Rank::upload_quant)); waits for the device.
    pub fn to_quant_blocks(&self) -> Result<Vec<u8>> {
        block_on("LocalTensor::to_quant_blocks", self.to_quant_blocks_async())
    }

    /// [`LocalTensor::to_quant_blocks`] as a future.
    pub async fn to_quant_blocks_async(&self) -> Result<Vec<u8>> {
        let Some(q) = self.dtype().quant() else {
            return Err(crate::error::Error::invalid(
                "LocalTensor::to_quant_blocks",
                format!("a {} tensor has no quantized blocks", self.dtype()),
            ));
        };
        let k = self.shape().last().copied().unwrap_or(0);
        let mut x = Exchange::with_capacity(self.blocks().len(), 0);
        for b in self.blocks() {
            x.read(b)?;
        }
        let mapped = x.map_async().await?;
        let mut out = Vec::new();
        for (i, b) in self.blocks().iter().enumerate() {
            let n = b.shape()[0] * q.blocks_per_row(k);
            out.extend(crate::quant::layout::from_device(q, mapped.input(i), n));
        }
        Ok(out)
    }

    /// Read back an f16 tensor (waits for the device).
    pub fn to_vec_f16(&self) -> Result<Vec<half::f16>> {
        block_on("LocalTensor::to_vec_f16", async {
            let raw = self.read_async("to_vec_f16", DType::F16).await?;
            Ok(bytemuck::pod_collect_to_vec(&raw))
        })
    }

    /// Read back as i32 (waits for the device).
    pub fn to_vec_i32(&self) -> Result<Vec<i32>> {
        block_on("LocalTensor::to_vec_i32", self.to_vec_i32_async())
    }

    /// [`LocalTensor::to_vec_i32`] as a future.
    pub async fn to_vec_i32_async(&self) -> Result<Vec<i32>> {
        let raw = self.read_async("to_vec_i32", DType::I32).await?;
        Ok(bytemuck::pod_collect_to_vec(&raw))
    }

    async fn read_async(&self, op: &'static str, dtype: DType) -> Result<Vec<u8>> {
        self.expect_dtype(op, dtype)?;
        Ok(download_many_async(&[self]).await?.remove(0))
    }
}
