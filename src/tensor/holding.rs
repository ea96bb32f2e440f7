//! [`Holding`]: rows of a logical tensor that several ranks hold copies of,
//! as grouped-query attention's key/value heads are held by every rank whose
//! query heads read them (docs/MATH.md §GQA), and
//! [`DTensor::share_replicas`], the tape operation that keeps such copies
//! bit-identical by summing their gradients over their holders.
//!
//! Stored form: every rank holds `per` consecutive rows starting at its own
//! `starts[r]`, so a held tensor is an *expanded* tensor of `P·per` rows,
//! `Shard(0)` in units of `per` (rank r's block is expanded rows
//! `r·per..(r+1)·per`). A row held by several ranks appears once per holder.

use super::autograd::record;
use super::dtensor::DTensor;
use super::placement::Placement;
use crate::element::ReduceOp;
use crate::error::{Error, Result};
use crate::kernels;
use crate::shard::split_range;

/// Which rows of a logical tensor each rank holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holding {
    /// Rows of the logical tensor.
    pub total: usize,
    /// Rows every rank holds (consecutive).
    pub per: usize,
    /// The first logical row of each rank's block, by global rank.
    pub starts: Vec<usize>,
}

impl Holding {
    /// The key/value heads that `heads` query heads split over `p` ranks
    /// (the first `heads mod p` ranks take one more; a rank may hold none)
    /// read from `kv_heads` key/value heads, in heads: every rank holds the
    /// same number `M`, the most any rank's query heads read, starting at
    /// its first query head's key/value head (or earlier, so its block ends
    /// inside the `kv_heads`). At P = 1 that is every head once.
    pub fn kv_heads(heads: usize, kv_heads: usize, p: usize) -> Result<Holding> {
        if heads == 0 || kv_heads == 0 || p == 0 || !heads.is_multiple_of(kv_heads) {
            return Err(Error::invalid(
                "Holding::kv_heads",
                format!(
                    "heads {heads}, kv_heads {kv_heads}, ranks {p}: all at least 1, and kv_heads \
                     dividing heads"
                ),
            ));
        }
        let group = heads / kv_heads;
        let needed: Vec<(usize, usize)> = (0..p)
            .map(|r| {
                let q = split_range(heads, p, r);
                match q.is_empty() {
                    true => (q.start / group, 0),
                    false => (q.start / group, (q.end - 1) / group + 1 - q.start / group),
                }
            })
            .collect();
        let per = needed.iter().map(|n| n.1).max().unwrap_or(1).max(1);
        let starts = needed
            .iter()
            .map(|&(first, _)| first.min(kv_heads - per))
            .collect();
        Ok(Holding {
            total: kv_heads,
            per,
            starts,
        })
    }

    /// The same holding with every row made `rows` rows (heads → the rows
    /// of a `[heads·head_dim, in]` weight).
    pub fn scaled(&self, rows: usize) -> Holding {
        Holding {
            total: self.total * rows,
            per: self.per * rows,
            starts: self.starts.iter().map(|s| s * rows).collect(),
        }
    }

    /// Ranks.
    pub fn ranks(&self) -> usize {
        self.starts.len()
    }

    /// Rows of the expanded tensor (`P·per`).
    pub fn expanded(&self) -> usize {
        self.ranks() * self.per
    }

    /// For each expanded row, the logical row it holds.
    pub fn logical_rows(&self) -> Vec<usize> {
        self.starts.iter().flat_map(|&s| s..s + self.per).collect()
    }

    /// For each logical row, the expanded row of its first holder (every row
    /// is held: the blocks cover `0..total`).
    pub fn first_holders(&self) -> Vec<usize> {
        let mut first = vec![usize::MAX; self.total];
        for (i, row) in self.logical_rows().into_iter().enumerate().rev() {
            first[row] = i;
        }
        first
    }

    /// Whether every logical row has a holder and every block lies inside.
    pub(crate) fn covers(&self) -> bool {
        let inside = self.starts.iter().all(|&s| s + self.per <= self.total);
        inside && self.first_holders().iter().all(|&i| i != usize::MAX)
    }
}

impl DTensor {
    /// `self` (an expanded tensor of `holding`: `[P·per, …]`, `Shard(0)` in
    /// units of `per`), unchanged, recorded so that backward sums the
    /// gradient of every logical row over the ranks that hold it and gives
    /// each holder that sum: one all-reduce of the logical `[total, …]`
    /// tensor, each rank contributing its block and zeros elsewhere. Copies
    /// updated from such gradients stay bit-identical. One rank: no-op.
    pub fn share_replicas(&self, holding: &Holding) -> Result<DTensor> {
        const OP: &str = "DTensor::share_replicas";
        let p = self.mesh().size();
        let rows = self.shape().first().copied().unwrap_or(0);
        let placed = self.placement() == Placement::Shard(0) && self.shard_unit() == holding.per;
        if holding.ranks() != p || rows != holding.expanded() || !holding.covers() || !placed {
            return Err(Error::invalid(
                OP,
                format!(
                    "expected [{} rows, ..] Shard(0) in units of {} over {} ranks (a held \
                     tensor), got {:?} {:?} in units of {} over {p}",
                    holding.expanded(),
                    holding.per,
                    holding.ranks(),
                    self.shape(),
                    self.placement(),
                    self.shard_unit()
                ),
            ));
        }
        if p == 1 {
            return Ok(self.clone());
        }
        let holding = holding.clone();
        record(OP, &[self], || {
            let y = self.detach();
            let unit = self.shard_unit();
            Ok((y, move |dy: &DTensor| {
                let dy = dy.move_to(Placement::Shard(0), unit)?;
                let mut logical = dy.shape().to_vec();
                logical[0] = holding.total;
                let widened = dy
                    .shards()
                    .iter()
                    .map(|s| {
                        let start = holding.starts[s.rank_index()];
                        let after = holding.total - start - holding.per;
                        let zeros = |n: usize| {
                            let mut shape = s.shape().to_vec();
                            shape[0] = n;
                            s.rank().zeros(&shape, s.dtype())
                        };
                        let (a, b) = (zeros(start)?, zeros(after)?);
                        let parts: Vec<_> = [&a, s, &b]
                            .into_iter()
                            .filter(|t| t.shape()[0] > 0)
                            .collect();
                        kernels::concat(&parts, 0)
                    })
                    .collect::<Result<Vec<_>>>()?;
                let sum = Placement::Partial(ReduceOp::Sum);
                let total = dy
                    .with_shards(widened, logical, sum)
                    .move_to(Placement::Replicate, 1)?;
                let back = total
                    .shards()
                    .iter()
                    .map(|s| {
                        let start = holding.starts[s.rank_index()];
                        kernels::narrow(s, 0, start, holding.per)
                    })
                    .collect::<Result<Vec<_>>>()?;
                let shape = dy.shape().to_vec();
                Ok(vec![Some(dy.with_shards_in_units(
                    back,
                    shape,
                    Placement::Shard(0),
                    unit,
                ))])
            }))
        })
    }
}
