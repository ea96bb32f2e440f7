//! A [`Parameter`] kept in ggml blocks (`DType::Quant`): loaded from a
//! quantized master (a GGUF tensor) or quantized from its own value. Its
//! rows are moved whole, as the f32 master's would be (a fused weight's
//! strided split, a held tensor's copies); a row-parallel weight's K is
//! split in whole blocks ([`k_unit`]). Such a parameter is frozen: it
//! gets no gradient, and optimisers leave it alone.

use super::{Parameter, strided_order, tracked};
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
        self.value = tracked(value, &self.slot);
        self.slot.set(None);
        Ok(())
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
