//! What each rank says about its part of a collective before data moves:
//! the collective, dtype, op, dims and its tensor's shape. Every rank gets
//! every header, so all of them reach the same verdict on a bad call (ranks
//! that disagree, mismatched shapes or dtypes) and none is left waiting.

use std::sync::Arc;

use super::p2p::tag;
use super::peers::Peers;
use crate::element::{DType, ReduceOp};
use crate::error::{Error, Result};

const WORDS: usize = 16;
const MAX_DIMS: usize = WORDS - 7;

/// One rank's description of its call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Header {
    /// Which collective (its name's index in `NAMES`).
    pub(super) kind: u64,
    pub(super) dtype: u64,
    pub(super) op: u64,
    pub(super) dim: u64,
    pub(super) dim2: u64,
    pub(super) root: u64,
    pub(super) shape: Vec<usize>,
}

/// Collective names, by `Header::kind`.
pub(super) const NAMES: [&str; 7] = [
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "all_to_all",
    "ring_shift",
    "to_host",
];

pub(super) fn dtype_code(d: DType) -> u64 {
    match d {
        DType::F32 => 0,
        DType::I32 => 1,
        DType::F16 => 2,
        DType::BF16 => 3,
        DType::Quant(q) => 16 + u64::from(q.ggml_id()),
    }
}

pub(super) fn op_code(op: ReduceOp) -> u64 {
    match op {
        ReduceOp::Sum => 1,
        ReduceOp::Max => 2,
    }
}

impl Header {
    pub(super) fn new(kind: &str, dtype: DType, shape: &[usize]) -> Header {
        Header {
            kind: NAMES.iter().position(|n| *n == kind).unwrap_or(NAMES.len()) as u64,
            dtype: dtype_code(dtype),
            op: 0,
            dim: 0,
            dim2: 0,
            root: 0,
            shape: shape.to_vec(),
        }
    }

    fn encode(&self, op: &'static str) -> Result<Arc<[u32]>> {
        if self.shape.len() > MAX_DIMS {
            return Err(Error::invalid(
                op,
                format!(
                    "MPI collectives take tensors of up to {MAX_DIMS} dims, got {}",
                    self.shape.len()
                ),
            ));
        }
        let mut w = [0u64; WORDS];
        w[..7].copy_from_slice(&[
            self.kind,
            self.dtype,
            self.op,
            self.dim,
            self.dim2,
            self.root,
            self.shape.len() as u64,
        ]);
        for (d, &n) in self.shape.iter().enumerate() {
            w[7 + d] = n as u64;
        }
        Ok(bytemuck::cast_slice::<u64, u32>(&w).into())
    }

    fn decode(words: &[u32]) -> Header {
        let w: Vec<u64> = bytemuck::pod_collect_to_vec(words);
        let ndim = (w[6] as usize).min(MAX_DIMS);
        Header {
            kind: w[0],
            dtype: w[1],
            op: w[2],
            dim: w[3],
            dim2: w[4],
            root: w[5],
            shape: w[7..7 + ndim].iter().map(|&n| n as usize).collect(),
        }
    }

    fn call(&self) -> String {
        let name = NAMES
            .get(self.kind as usize)
            .copied()
            .unwrap_or("an unknown collective");
        format!(
            "{name} (op {}, dims {}/{}, root {})",
            self.op, self.dim, self.dim2, self.root
        )
    }

    /// Words (f32 or i32) this rank contributes.
    pub(super) fn words(&self) -> usize {
        self.shape.iter().product()
    }

    /// Bytes this rank contributes.
    pub(super) fn bytes(&self) -> u64 {
        self.words() as u64 * 4
    }
}

/// Exchange headers with `peers` (every other rank when `None`) and return
/// every rank's, in rank order (this rank's own at its index; others not
/// exchanged with are copies of it). Ranks that disagree on the call or the
/// dtype are an error on every rank.
pub(super) fn agree(
    peers: &Peers,
    op: &'static str,
    seq: u64,
    mine: &Header,
) -> Result<Vec<Header>> {
    let (me, p) = (peers.me, peers.p());
    let words = mine.encode(op)?;
    let mut t = peers.traffic(op)?;
    for r in (0..p).filter(|&r| r != me) {
        t.recv(peers.world(r), tag(seq, 0), WORDS * 2)?;
        t.send(peers.world(r), tag(seq, 0), Arc::clone(&words))?;
    }
    let mut got = t.wait()?.into_iter();
    let all: Vec<Header> = (0..p)
        .map(|r| {
            if r == me {
                mine.clone()
            } else {
                got.next()
                    .map_or_else(|| mine.clone(), |b| Header::decode(&b))
            }
        })
        .collect();
    for (r, h) in all.iter().enumerate() {
        let same = (h.kind, h.op, h.dim, h.dim2, h.root)
            == (all[0].kind, all[0].op, all[0].dim, all[0].dim2, all[0].root);
        if !same {
            return Err(Error::invalid(
                op,
                format!(
                    "the ranks disagree on the collective: rank 0 calls {}, rank {r} calls {}; every process must run the same collectives in the same order",
                    all[0].call(),
                    h.call()
                ),
            ));
        }
        if h.dtype != all[0].dtype {
            return Err(Error::invalid(
                op,
                format!(
                    "the ranks' tensors differ in dtype (rank 0: code {}, rank {r}: code {}); cast them alike first",
                    all[0].dtype, h.dtype
                ),
            ));
        }
    }
    Ok(all)
}

/// Every rank's shape equals rank 0's.
pub(super) fn same_shapes(op: &'static str, all: &[Header]) -> Result<()> {
    for h in &all[1..] {
        if h.shape != all[0].shape {
            return Err(Error::shape(op, &all[0].shape, &h.shape));
        }
    }
    Ok(())
}

/// Every rank's shape equals rank 0's in every dim but `dim`.
pub(super) fn same_except(op: &'static str, all: &[Header], dim: usize) -> Result<()> {
    let want = &all[0].shape;
    for h in &all[1..] {
        let ok = h.shape.len() == want.len()
            && h.shape
                .iter()
                .zip(want)
                .enumerate()
                .all(|(d, (a, b))| d == dim || a == b);
        if !ok {
            return Err(Error::ShapeMismatch {
                op,
                expected: format!("{want:?} (any size along dim {dim})"),
                got: format!("{:?}", h.shape),
            });
        }
    }
    Ok(())
}
