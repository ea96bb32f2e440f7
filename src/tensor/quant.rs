//! Quantized [`DTensor`]s: a `[rows, K]` weight kept in ggml blocks
//! (`DType::Quant`), each row `ceil(K / block)` blocks. Rows are
//! independent, so a weight splits along its rows in any units
//! (`Shard(0)`: column-parallel layers, vocabulary-parallel tables);
//! along K only in whole blocks (`Shard(1)`: row-parallel layers, the unit
//! a multiple of the block). docs/MATH.md §19 gives the rule.

use super::aliased::made_once;
use super::dtensor::DTensor;
use super::placement::Placement;
use crate::device::{Mesh, Rank};
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
