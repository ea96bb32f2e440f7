//! [`vocab_top_k`]: the best entries of one row of vocab-sharded logits,
//! found on each rank's shard on the device; only k pairs per rank reach the
//! host. Generation's greedy, top-k and top-p choice ([`vocab_candidates`],
//! with the repetition penalty and the softmax normaliser on the device).

use super::dtensor::DTensor;
use super::placement::Placement;
use crate::device::{LocalTensor, block_on, download_many_async};
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
    Ok(candidates("vocab_top_k", logits, row, k, None, None)
        .await?
        .top)
}

/// What generation's sampler needs of one row of vocab-sharded logits
/// ([`vocab_candidates`]): the best candidates and, when asked, the softmax
/// normaliser of the whole row.
#[derive(Clone, Debug, PartialEq)]
pub struct VocabCandidates {
    /// The `k` best (value, global id), best first as in [`vocab_top_k`],
    /// values after the repetition penalty (not divided by the temperature).
    pub top: Vec<(f32, usize)>,
    /// `(m, Σ_v exp((v − m) / T))` over the whole (penalised) row at the
    /// temperature asked for, `m` the row's max; `None` if not asked.
    pub normaliser: Option<(f32, f64)>,
}

/// A repetition penalty to apply before the candidates are found: every id
/// of `seen` (the sequence so far, duplicates allowed) gets `v / penalty`
/// where `v ≥ 0`, else `v · penalty` (transformers'
/// `RepetitionPenaltyLogitsProcessor`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowPenalty<'a> {
    /// Token ids already in the sequence (the prompt included).
    pub seen: &'a [i32],
    /// The penalty (> 0; 1 changes nothing).
    pub penalty: f32,
}

/// [`vocab_top_k`] after an optional repetition penalty, with the softmax
/// normaliser at `temperature` when asked: each rank penalises its shard of
/// row `row` at the seen ids it holds ([`kernels::penalized_row`]), finds
/// its `k` best ([`kernels::top_k`]) and, for a temperature, reduces its
/// `(max, Σ exp((v − max)/T))` ([`kernels::row_exp_sum`]); only those cross
/// to the host (one wait per device), where the ranks' pairs are combined.
pub fn vocab_candidates(
    logits: &DTensor,
    row: usize,
    k: usize,
    penalty: Option<RowPenalty<'_>>,
    temperature: Option<f32>,
) -> Result<VocabCandidates> {
    block_on(
        "vocab_candidates",
        vocab_candidates_async(logits, row, k, penalty, temperature),
    )
}

/// [`vocab_candidates`] as a future: only the final read waits.
pub async fn vocab_candidates_async(
    logits: &DTensor,
    row: usize,
    k: usize,
    penalty: Option<RowPenalty<'_>>,
    temperature: Option<f32>,
) -> Result<VocabCandidates> {
    candidates("vocab_candidates", logits, row, k, penalty, temperature).await
}

/// Row `row` of vocab-sharded logits (`[rows, vocab]`, `Shard(1)`) with the
/// repetition penalty applied on the device ([`kernels::penalized_row`]), as
/// a `[1, vocab]` f32 `Shard(1)` tensor: what [`vocab_candidates`] chooses
/// from.
pub fn vocab_penalized_row(
    logits: &DTensor,
    row: usize,
    penalty: RowPenalty<'_>,
) -> Result<DTensor> {
    const OP: &str = "vocab_penalized_row";
    check_logits(OP, logits)?;
    let shards = penalized_shards(logits, row, Some(penalty))?;
    DTensor::from_shards_in_units(
        logits.mesh(),
        shards,
        &[1, logits.shape()[1]],
        Placement::Shard(1),
        logits.shard_unit(),
    )
}

fn check_logits(op: &'static str, logits: &DTensor) -> Result<()> {
    if logits.shape().len() != 2 || logits.placement() != Placement::Shard(1) {
        return Err(Error::invalid(
            op,
            format!(
                "logits must be [rows, vocab] split over ranks (Shard(1)), got {:?} {:?}",
                logits.shape(),
                logits.placement()
            ),
        ));
    }
    Ok(())
}

/// Each shard's first global id, from its global rank.
fn offsets(logits: &DTensor) -> Vec<usize> {
    let (vocab, p, unit) = (logits.shape()[1], logits.mesh().size(), logits.shard_unit());
    logits
        .shards()
        .iter()
        .map(|s| split_range_in_units(vocab, p, s.rank_index(), unit).start)
        .collect()
}

/// Each rank's row `row`, penalised, as `[1, cols]` f32.
fn penalized_shards(
    logits: &DTensor,
    row: usize,
    penalty: Option<RowPenalty<'_>>,
) -> Result<Vec<LocalTensor>> {
    let (seen, factor) = match penalty {
        Some(p) => {
            let mut ids = p.seen.to_vec();
            ids.sort_unstable();
            ids.dedup();
            (ids, p.penalty)
        }
        None => (Vec::new(), 1.0),
    };
    let mut out = Vec::with_capacity(logits.shards().len());
    for (s, offset) in logits.shards().iter().zip(offsets(logits)) {
        let ids = s.rank().upload_i32(&[seen.len()], &seen)?;
        let x = kernels::cast(s, DType::F32)?;
        out.push(kernels::penalized_row(&x, row, &ids, factor, offset)?);
    }
    Ok(out)
}

async fn candidates(
    op: &'static str,
    logits: &DTensor,
    row: usize,
    k: usize,
    penalty: Option<RowPenalty<'_>>,
    temperature: Option<f32>,
) -> Result<VocabCandidates> {
    check_logits(op, logits)?;
    let ranks = logits.shards().len();
    // The row the candidates come from, per rank, and its row index there.
    let (rows, at): (Vec<LocalTensor>, usize) = if penalty.is_some() || temperature.is_some() {
        (penalized_shards(logits, row, penalty)?, 0)
    } else {
        let cast = logits.shards().iter().map(|s| kernels::cast(s, DType::F32));
        (cast.collect::<Result<_>>()?, row)
    };
    let mut reads = Vec::with_capacity(2 * ranks);
    for (x, offset) in rows.iter().zip(offsets(logits)) {
        reads.push(kernels::top_k(x, at, k, offset)?);
    }
    if let Some(t) = temperature {
        for x in &rows {
            reads.push(kernels::row_exp_sum(x, t)?);
        }
    }
    // One wait per device for every rank's candidates and sums.
    let raw = download_many_async(&reads.iter().collect::<Vec<_>>()).await?;
    let words = |b: &[u8]| -> Vec<u32> {
        b.chunks_exact(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect()
    };
    let mut sums: Vec<u32> = raw[ranks..].iter().flat_map(|b| words(b)).collect();
    let mut pairs: Vec<u32> = raw[..ranks].iter().flat_map(|b| words(b)).collect();
    if logits.mesh().is_multi_process() {
        // Every process merges every rank's candidates and sums (the sort
        // below fixes the order), so all choose the same ids.
        let mut mine = vec![sums.len() as u32];
        mine.extend(&sums);
        mine.extend(&pairs);
        let all = crate::comm::gather_words(logits.mesh(), mine)?;
        (sums, pairs) = (Vec::new(), Vec::new());
        for w in all {
            let n = w.first().copied().unwrap_or(0) as usize;
            sums.extend(&w[1..1 + n]);
            pairs.extend(&w[1 + n..]);
        }
    }
    let mut top: Vec<(f32, usize)> = pairs
        .chunks_exact(2)
        .filter(|c| (c[1] as i32) >= 0)
        .map(|c| (f32::from_bits(c[0]), c[1] as usize))
        .collect();
    top.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    top.truncate(k);
    let normaliser = temperature.map(|t| {
        let ms: Vec<(f32, f32)> = sums
            .chunks_exact(2)
            .map(|c| (f32::from_bits(c[0]), f32::from_bits(c[1])))
            .collect();
        let m = ms.iter().map(|p| p.0).fold(f32::NEG_INFINITY, f32::max);
        let s = ms
            .iter()
            .map(|&(mr, sr)| sr as f64 * ((mr as f64 - m as f64) / t as f64).exp())
            .sum();
        (m, s)
    });
    Ok(VocabCandidates { top, normaliser })
}
