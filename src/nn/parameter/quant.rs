//! A [`Parameter`] kept in ggml blocks (`DType::Quant`): loaded from a
//! quantized master (a GGUF tensor) or quantized from its own value. Its
//! rows are moved whole, as the f32 master's would be (a fused weight's
//! strided split, a held tensor's copies); a row-parallel weight's K is
//! split in whole blocks ([`k_unit`]). Such a parameter is frozen: it
//! gets no gradient, and optimisers leave it alone.

use super::{Parameter, strided_order};
use crate::device::block_on;
use crate::error::{Error, Result};
use crate::quant::{QuantType, quantize_rows};
use crate::tensor::{DTensor, Placement, k_unit};

impl Parameter {
    /// Overwrite the value with the quantized master `blocks`: the logical
    /// `[rows, K]` weight in format `q`, GGUF's order (each row
    /// `q.blocks_per_row(K)` blocks). The shards are laid out as the f32
    /// master's would be; a row-parallel (`Shard(1)`) weight splits K in
    /// whole blocks. The gradient is dropped. On error nothing changes.
    pub fn load_quant_master(&mut self, q: QuantType, blocks: &[u8]) -> Result<()> {
        const OP: &str = "Parameter::load_quant_master";
        let (rows, k) = q.check_weight(OP, self.shape(), blocks)?;
        let row_bytes = q.bytes_for(1, k);
        let mesh = self.value.mesh().clone();
        let p = mesh.size();
        // The rows each rank's shard holds, in order (as `strided` and a
        // held tensor's expansion place the f32 master's).
        let by_rows = |order: &[usize]| -> Vec<u8> {
            order
                .iter()
                .flat_map(|&i| &blocks[i * row_bytes..(i + 1) * row_bytes])
                .copied()
                .collect()
        };
        let value = match (&self.held, self.value.placement()) {
            (Some(h), _) => {
                let order = h.holding.logical_rows();
                let shape = [order.len(), k];
                let unit = h.holding.per;
                DTensor::from_quant_blocks(
                    &mesh,
                    &shape,
                    q,
                    &by_rows(&order),
                    Placement::Shard(0),
                    unit,
                )?
            }
            (None, Placement::Shard(0)) => {
                let unit = self.stride * self.unit;
                let data = match self.stride {
                    1 => blocks.to_vec(),
                    s => by_rows(&strided_order(rows, s, self.unit, p)),
                };
                DTensor::from_quant_blocks(&mesh, &[rows, k], q, &data, Placement::Shard(0), unit)?
            }
            (None, Placement::Shard(1)) if self.stride == 1 => {
                let unit = k_unit(q, self.value.shard_unit());
                DTensor::from_quant_blocks(&mesh, &[rows, k], q, blocks, Placement::Shard(1), unit)?
            }
            (None, Placement::Replicate) => {
                DTensor::from_quant_blocks(&mesh, &[rows, k], q, blocks, Placement::Replicate, 1)?
            }
            (None, placement) => {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "a weight placed {placement:?} with stride {} does not take quantized \
                         blocks",
                        self.stride
                    ),
                ));
            }
        };
        self.value = self.track(value);
        self.slot.set(None);
        Ok(())
    }

    /// A quantized parameter's full value as its blocks: the logical
    /// `[rows, K]` weight in GGUF's order, gathered from the shards and
    /// put back in the master's row order — byte for byte what
    /// [`Parameter::load_quant_master`] took, or what quantizing made.
    /// `None` for a parameter not kept quantized (read
    /// [`Parameter::master`] then).
    pub fn master_quant(&self) -> Result<Option<(QuantType, Vec<u8>)>> {
        block_on("Parameter::master_quant", self.master_quant_async())
    }

    /// [`Parameter::master_quant`] as a future.
    pub async fn master_quant_async(&self) -> Result<Option<(QuantType, Vec<u8>)>> {
        let Some(q) = self.value.quant_type() else {
            return Ok(None);
        };
        let &[rows, k] = self.shape() else {
            return Err(Error::shape(
                "Parameter::master_quant",
                "a 2-D weight [rows, K]",
                self.shape(),
            ));
        };
        let row_bytes = q.bytes_for(1, k);
        let blocks = self.value.to_quant_blocks_async().await?;
        let row = |i: usize| &blocks[i * row_bytes..(i + 1) * row_bytes];
        let master: Vec<u8> = match (&self.held, self.value.placement()) {
            // Each logical row from its first holder.
            (Some(h), _) => (h.holding.first_holders().into_iter())
                .flat_map(row)
                .copied()
                .collect(),
            (None, Placement::Shard(0)) if self.stride != 1 => {
                // Row i of the rank-contiguous layout is the master's row order[i].
                let p = self.value.mesh().size();
                let mut out = vec![0u8; blocks.len()];
                for (i, &j) in strided_order(rows, self.stride, self.unit, p)
                    .iter()
                    .enumerate()
                {
                    out[j * row_bytes..(j + 1) * row_bytes].copy_from_slice(row(i));
                }
                out
            }
            _ => return Ok(Some((q, blocks))),
        };
        Ok(Some((q, master)))
    }

    /// Keep the value quantized to `q` (llama.cpp's reference quantizer,
    /// on the host, from the f32 master): what `store_as` does for a
    /// quantized dtype. A row of K not a multiple of the block takes
    /// llama.cpp's fallback ([`QuantType::for_row`]); where none fits the
    /// value stays as it is.
    pub(super) fn quantize(&mut self, q: QuantType) -> Result<()> {
        block_on("Parameter::store_as", self.quantize_async(q))
    }

    /// [`Parameter::quantize`] as a future: it reads the f32 master back,
    /// which a browser can only await.
    pub(super) async fn quantize_async(&mut self, q: QuantType) -> Result<()> {
        let &[rows, k] = self.shape() else {
            return Err(Error::shape(
                "Parameter::store_as",
                "a 2-D weight to quantize",
                self.shape(),
            ));
        };
        let Some(q) = q.for_row(k) else {
            return Ok(());
        };
        let master = self.master_async().await?;
        let blocks = quantize_rows(q, &master, rows, k)?;
        self.load_quant_master(q, &blocks)
    }
}
