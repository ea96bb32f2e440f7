//! [`vocab_top_k`]: the best entries of one row of vocab-sharded logits,
//! found on each rank's shard on the device; only k pairs per rank reach the
//! host. Generation's greedy and top-k choice.

use super::dtensor::{DTensor, Placement};
use crate::device::{block_on, download_many_async};
use crate::element::DType;
use crate::error::{Error, Result};
use crate::kernels;
use crate::shard::split_range_in_units;

/// The `k` largest entries of row `row` of vocab-sharded logits (`[rows,
/// vocab]`, `Shard(1)`, f32 or f16) as (value, global id), best first in
/// `f32::total_cmp` order, ties by the lower id; fewer where the vocab is
/// smaller. Each rank finds its shard's best `k` on the device
/// ([`kernels::top_k`]); the `k` pairs per rank are read back together (one
/// wait per device) and merged, so the vocab never crosses to the host. In
/// a multi-process mesh the candidates are exchanged, and every process
/// gets the same answer.
pub fn vocab_top_k(logits: &DTensor, row: usize, k: usize) -> Result<Vec<(f32, usize)>> {
    block_on("vocab_top_k", vocab_top_k_async(logits, row, k))
}

/// [`vocab_top_k`] as a future: only the final read of the candidates waits.
pub async fn vocab_top_k_async(
    logits: &DTensor,
    row: usize,
    k: usize,
) -> Result<Vec<(f32, usize)>> {
    const OP: &str = "vocab_top_k";
    if logits.shape().len() != 2 || logits.placement() != Placement::Shard(1) {
        return Err(Error::invalid(
            OP,
            format!(
                "logits must be [rows, vocab] split over ranks (Shard(1)), got {:?} {:?}",
                logits.shape(),
                logits.placement()
            ),
        ));
    }
    let (vocab, p, unit) = (logits.shape()[1], logits.mesh().size(), logits.shard_unit());
    let mut shards = Vec::with_capacity(logits.shards().len());
    for s in logits.shards() {
        // The shard's first global id, from its global rank.
        let offset = split_range_in_units(vocab, p, s.rank_index(), unit).start;
        shards.push(kernels::top_k(
            &kernels::cast(s, DType::F32)?,
            row,
            k,
            offset,
        )?);
    }
    // One wait per device for every rank's candidates.
    let raw = download_many_async(&shards.iter().collect::<Vec<_>>()).await?;
    let mut pairs: Vec<i32> = raw
        .iter()
        .flat_map(|b| b.chunks_exact(4))
        .map(|w| i32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect();
    if logits.mesh().is_multi_process() {
        // Every process merges every rank's candidates (the sort below fixes
        // the order), so all choose the same ids.
        let mine = pairs.iter().map(|&v| v as u32).collect();
        let all = crate::comm::gather_words(logits.mesh(), mine)?;
        pairs = all.into_iter().flatten().map(|w| w as i32).collect();
    }
    let mut top: Vec<(f32, usize)> = pairs
        .chunks_exact(2)
        .filter(|c| c[1] >= 0)
        .map(|c| (f32::from_bits(c[0] as u32), c[1] as usize))
        .collect();
    top.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    top.truncate(k);
    Ok(top)
}
