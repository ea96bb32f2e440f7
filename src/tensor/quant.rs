//! Quantized [`DTensor`]s: a `[rows, K]` weight kept in ggml blocks
//! (`DType::Quant`), each row `ceil(K / block)` blocks. Rows are
//! independent, so a weight splits along its rows in any units
//! (`Shard(0)`: column-parallel layers, vocabulary-parallel tables);
//! along K only in whole blocks (`Shard(1)`: row-parallel layers, the unit
//! a multiple of the block). docs/MATH.md §19 gives the rule.

use super::aliased::made_once;
use super::dtensor::DTensor;
use super::placement::Placement;
use crate::device::{Mesh, Rank, block_on};
use crate::element::ReduceOp;
use crate::error::{Error, Result};
use crate::quant::QuantType;
use crate::shard::split_range_in_units;

impl DTensor {
    /// A quantized `[rows, K]` weight from its blocks in GGUF order
    /// (`q.bytes_for(rows, K)` bytes), placed `Replicate`, `Shard(0)` (rows
    /// split in units of `unit`) or `Shard(1)` (K split in units of `unit`,
    /// a multiple of `q.block_len()`: whole blocks; K a multiple of
    /// `unit` where there is more than one rank). Each rank uploads only
    /// its part; ranks sharing a device share one buffer of a replicated
    /// weight.
    pub fn from_quant_blocks(
        mesh: &Mesh,
        shape: &[usize],
        q: QuantType,
        blocks: &[u8],
        placement: Placement,
        unit: usize,
    ) -> Result<DTensor> {
        const OP: &str = "DTensor::from_quant_blocks";
        let (rows, k) = q.check_weight(OP, shape, blocks)?;
        let row_bytes = q.bytes_for(1, k);
        let bl = q.block_len();
        let p = mesh.size();
        match placement {
            Placement::Shard(1) if p > 1 && (!unit.is_multiple_of(bl) || unit == 0) => {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "a {q} weight's K splits in whole blocks: the unit {unit} must be a \
                         multiple of {bl}"
                    ),
                ));
            }
            Placement::Shard(d) if d > 1 => {
                return Err(Error::invalid(OP, "a 2-D weight shards along dim 0 or 1"));
            }
            Placement::Partial(ReduceOp::Sum) => {
                return Err(Error::invalid(
                    OP,
                    "a quantized weight is Replicate, Shard(0) or Shard(1), not a partial sum",
                ));
            }
            _ => {}
        }
        // Checked as any shards are: K a whole number of units (rows too).
        let unit_checked = match placement {
            Placement::Shard(1) if p == 1 => 1,
            _ => unit,
        };
        Self::check_units(OP, shape, placement, unit_checked)?;
        let whole = |r: &Rank| r.upload_quant(shape, q, blocks);
        let shards = match placement {
            Placement::Replicate | Placement::Partial(_) => match made_once(mesh, whole)? {
                Some(shards) => shards,
                None => mesh.ranks().iter().map(whole).collect::<Result<_>>()?,
            },
            Placement::Shard(0) => (mesh.ranks().iter())
                .map(|r| {
                    let range = split_range_in_units(rows, p, r.index(), unit);
                    let part = &blocks[range.start * row_bytes..range.end * row_bytes];
                    r.upload_quant(&[range.len(), k], q, part)
                })
                .collect::<Result<_>>()?,
            Placement::Shard(_) => (mesh.ranks().iter())
                .map(|r| {
                    let range = split_range_in_units(k, p, r.index(), unit_checked);
                    let (b0, b1) = (range.start / bl, q.blocks_per_row(range.end));
                    let bb = q.block_bytes();
                    let part: Vec<u8> = (0..rows)
                        .flat_map(|i| &blocks[i * row_bytes + b0 * bb..i * row_bytes + b1 * bb])
                        .copied()
                        .collect();
                    r.upload_quant(&[rows, range.len()], q, &part)
                })
                .collect::<Result<_>>()?,
        };
        Ok(DTensor::new(
            mesh,
            shards,
            shape.to_vec(),
            placement,
            unit_checked,
        ))
    }

    /// The quantized format of a quantized tensor.
    pub fn quant_type(&self) -> Option<QuantType> {
        self.dtype().quant()
    }

    /// A quantized `[rows, K]` weight's blocks in GGUF order, assembled
    /// from its shards on the host: the bytes
    /// [`DTensor::from_quant_blocks`] took, unchanged (no dequantizing). In
    /// a multi-process mesh every process gets them all.
    pub fn to_quant_blocks(&self) -> Result<Vec<u8>> {
        block_on("DTensor::to_quant_blocks", self.to_quant_blocks_async())
    }

    /// [`DTensor::to_quant_blocks`] as a future.
    pub async fn to_quant_blocks_async(&self) -> Result<Vec<u8>> {
        const OP: &str = "DTensor::to_quant_blocks";
        let Some(q) = self.quant_type() else {
            return Err(Error::invalid(
                OP,
                format!("a {} tensor has no quantized blocks", self.dtype()),
            ));
        };
        let &[rows, k] = self.shape() else {
            return Err(Error::shape(OP, "a 2-D weight [rows, K]", self.shape()));
        };
        let (placement, unit, p) = (self.placement(), self.shard_unit(), self.mesh().size());
        let refs: Vec<&crate::device::LocalTensor> = match placement {
            Placement::Replicate => vec![&self.shards()[0]],
            Placement::Shard(0 | 1) => self.shards().iter().collect(),
            other => {
                return Err(Error::invalid(
                    OP,
                    format!("a quantized weight placed {other:?} has no blocks of its own"),
                ));
            }
        };
        let mut parts = Vec::with_capacity(refs.len());
        for t in refs {
            parts.push(t.to_quant_blocks_async().await?);
        }
        // The bytes rank `r` holds.
        let held = |r: usize| match placement {
            Placement::Shard(0) => q.bytes_for(split_range_in_units(rows, p, r, unit).len(), k),
            Placement::Shard(_) => rows * q.bytes_for(1, split_range_in_units(k, p, r, unit).len()),
            _ => q.bytes_for(rows, k),
        };
        if self.mesh().is_multi_process() && placement != Placement::Replicate {
            // Each process holds its own shard: every process gets them all,
            // as words (the last one padded).
            let mine = parts.pop().unwrap_or_default();
            let words: Vec<u32> = mine
                .chunks(4)
                .map(|c| {
                    let mut w = [0u8; 4];
                    w[..c.len()].copy_from_slice(c);
                    u32::from_le_bytes(w)
                })
                .collect();
            let all = crate::comm::gather_words(self.mesh(), words)?;
            parts = (all.into_iter().enumerate())
                .map(|(r, w)| {
                    let mut b: Vec<u8> = w.iter().flat_map(|w| w.to_le_bytes()).collect();
                    b.truncate(held(r));
                    b
                })
                .collect();
        }
        if let Some(r) = (0..parts.len()).find(|&r| parts[r].len() != held(r)) {
            return Err(Error::invalid(
                OP,
                format!(
                    "internal: rank {r} holds {} bytes of blocks, its shard takes {}",
                    parts[r].len(),
                    held(r)
                ),
            ));
        }
        Ok(match placement {
            Placement::Shard(1) => {
                // Each row is every rank's blocks of it, in rank order.
                let widths: Vec<usize> = (0..parts.len()).map(|r| held(r) / rows.max(1)).collect();
                let mut out = Vec::with_capacity(q.bytes_for(rows, k));
                for i in 0..rows {
                    for (part, &w) in parts.iter().zip(&widths) {
                        out.extend_from_slice(&part[i * w..(i + 1) * w]);
                    }
                }
                out
            }
            _ => parts.concat(),
        })
    }
}

/// The unit a row-parallel weight of format `q` splits its K in: the
/// layer's own (`unit`, e.g. a head's width) where that is whole blocks,
/// else one block (the first ranks take one more, a rank may get none).
pub(crate) fn k_unit(q: QuantType, unit: usize) -> usize {
    if unit.is_multiple_of(q.block_len()) && unit > 0 {
        unit
    } else {
        q.block_len()
    }
}
