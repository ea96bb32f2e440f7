//! The collectives over MPI, on host-staged data: each process downloads its
//! shard, exchanges pieces with point-to-point messages, combines in rank
//! order exactly as the single-process host transport does (acc = x0;
//! acc = op(acc, x1); ...), and uploads. So every rank ends with the same
//! bytes, and the same bytes as a single-process mesh of the same size.
//!
//! Reductions are an all-to-all of slices (slice j of every rank goes to
//! rank j), a fixed-order reduction of each slice, then an all-gather of
//! the reduced slices: 2 (P − 1) / P of the tensor sent per rank, as a ring
//! all-reduce, with the order never left to MPI.

use std::sync::Arc;

use super::header::{Header, agree, op_code, same_except, same_shapes};
use super::p2p::tag;
use super::peers::Peers;
use crate::device::{LocalTensor, Mesh, download_many};
use crate::element::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::shard::{host_concat, host_narrow, outer_dim_inner, split_range, with_dim};

/// What a collective over MPI needs: its processes, this one's place
/// among them, their number and the collective's sequence number.
struct Call {
    peers: Peers,
    me: usize,
    p: usize,
    seq: u64,
}

impl Call {
    fn new(mesh: &Mesh, op: &'static str) -> Result<Call> {
        let (peers, seq) = Peers::of(mesh, op)?;
        Ok(Call {
            me: peers.me,
            p: peers.p(),
            peers,
            seq,
        })
    }

    /// [`Call::new`] for a collective over this process's one shard.
    fn over<'a>(
        mesh: &Mesh,
        op: &'static str,
        shards: &'a [LocalTensor],
    ) -> Result<(Call, &'a LocalTensor)> {
        let [x] = shards else {
            return Err(Error::invalid(
                op,
                "a multi-process mesh runs collectives over all its ranks: pass this process's one shard",
            ));
        };
        Ok((Call::new(mesh, op)?, x))
    }

    /// Every rank's header, checked to agree.
    fn agree(&self, op: &'static str, h: &Header) -> Result<Vec<Header>> {
        agree(&self.peers, op, self.seq, h)
    }

    /// One round of messages: from every other rank r receive `words_from(r)`
    /// words, to it send `to(r)`. Returns every rank's words in rank order,
    /// `mine` at this rank's place.
    fn round(
        &self,
        op: &'static str,
        phase: u32,
        words_from: impl Fn(usize) -> usize,
        to: impl Fn(usize) -> Arc<[u32]>,
        mine: Vec<u32>,
    ) -> Result<Vec<Vec<u32>>> {
        let mut t = self.peers.traffic(op)?;
        for r in (0..self.p).filter(|&r| r != self.me) {
            t.recv(self.peers.world(r), tag(self.seq, phase), words_from(r))?;
            t.send(self.peers.world(r), tag(self.seq, phase), to(r))?;
        }
        let mut got = t.wait()?.into_iter();
        let mut mine = Some(mine);
        Ok((0..self.p)
            .map(|r| match r == self.me {
                true => mine.take().unwrap_or_default(),
                false => got.next().unwrap_or_default(),
            })
            .collect())
    }
}

fn words_of(t: &LocalTensor) -> Result<Vec<u32>> {
    let raw = download_many(&[t])?;
    Ok(bytemuck::pod_collect_to_vec(&raw[0]))
}

fn upload(
    like: &LocalTensor,
    op: &'static str,
    shape: &[usize],
    words: &[u32],
) -> Result<LocalTensor> {
    like.rank()
        .upload_bytes(op, shape, like.dtype(), bytemuck::cast_slice(words))
}

/// Every rank's piece reduced in rank order (acc = x0; acc = op(acc, x1); ...).
fn reduce_in_order(pieces: &[Vec<u32>], dtype: DType, op: ReduceOp) -> Vec<u32> {
    let mut acc = pieces[0].clone();
    for x in &pieces[1..] {
        for (a, b) in acc.iter_mut().zip(x) {
            *a = op.combine_words(dtype, *a, *b);
        }
    }
    acc
}

/// The bytes every rank contributed.
fn total(all: &[Header]) -> u64 {
    all.iter().map(Header::bytes).sum()
}

/// All-reduce; returns the output and the bytes every rank contributed.
pub(crate) fn all_reduce(
    mesh: &Mesh,
    shards: &[LocalTensor],
    op: ReduceOp,
) -> Result<(Vec<LocalTensor>, u64)> {
    const OP: &str = "all_reduce";
    let (c, x) = Call::over(mesh, OP, shards)?;
    let mut h = Header::new(OP, x.dtype(), x.shape());
    h.op = op_code(op);
    let all = c.agree(OP, &h)?;
    same_shapes(OP, &all)?;
    let words = words_of(x)?;
    let slice = |j: usize| split_range(words.len(), c.p, j);
    let mine = words[slice(c.me)].to_vec();
    let pieces = c.round(
        OP,
        1,
        |_| slice(c.me).len(),
        |r| words[slice(r)].into(),
        mine,
    )?;
    let reduced = reduce_in_order(&pieces, x.dtype(), op);
    let shared: Arc<[u32]> = reduced.as_slice().into();
    let out = c.round(OP, 2, |r| slice(r).len(), |_| Arc::clone(&shared), reduced)?;
    Ok((vec![upload(x, OP, x.shape(), &out.concat())?], total(&all)))
}

/// All-gather along `dim` (sizes may differ along it, 0 included).
pub(crate) fn all_gather(
    mesh: &Mesh,
    shards: &[LocalTensor],
    dim: usize,
) -> Result<(Vec<LocalTensor>, u64)> {
    const OP: &str = "all_gather";
    let (c, x) = Call::over(mesh, OP, shards)?;
    let mut h = Header::new(OP, x.dtype(), x.shape());
    h.dim = dim as u64;
    let all = c.agree(OP, &h)?;
    same_except(OP, &all, dim)?;
    let words = words_of(x)?;
    let shared: Arc<[u32]> = words.as_slice().into();
    let parts = c.round(OP, 1, |r| all[r].words(), |_| Arc::clone(&shared), words)?;
    let joined: usize = all.iter().map(|h| h.shape[dim]).sum();
    let shape = with_dim(x.shape(), dim, joined);
    let (outer, _, inner) = outer_dim_inner(&shape, dim);
    let refs: Vec<(&[u32], usize)> = parts
        .iter()
        .zip(&all)
        .map(|(w, h)| (&w[..], h.shape[dim]))
        .collect();
    let out = host_concat(&refs, outer, inner);
    Ok((vec![upload(x, OP, &shape, &out)?], total(&all)))
}

/// Reduce full-shape shards; rank r keeps slice r along `dim`.
pub(crate) fn reduce_scatter(
    mesh: &Mesh,
    shards: &[LocalTensor],
    dim: usize,
    op: ReduceOp,
) -> Result<(Vec<LocalTensor>, u64)> {
    const OP: &str = "reduce_scatter";
    let (c, x) = Call::over(mesh, OP, shards)?;
    let mut h = Header::new(OP, x.dtype(), x.shape());
    (h.op, h.dim) = (op_code(op), dim as u64);
    let all = c.agree(OP, &h)?;
    same_shapes(OP, &all)?;
    let words = words_of(x)?;
    let shape = x.shape();
    let piece = |j: usize| host_narrow(&words, shape, dim, split_range(shape[dim], c.p, j));
    let mine_shape = with_dim(shape, dim, split_range(shape[dim], c.p, c.me).len());
    let mine_len = mine_shape.iter().product::<usize>();
    let pieces = c.round(OP, 1, |_| mine_len, |r| piece(r).into(), piece(c.me))?;
    let reduced = reduce_in_order(&pieces, x.dtype(), op);
    Ok((vec![upload(x, OP, &mine_shape, &reduced)?], total(&all)))
}

/// Every rank ends with rank `root`'s tensor (all pass same-shaped tensors;
/// only the root's bytes are read).
pub(crate) fn broadcast(
    mesh: &Mesh,
    shards: &[LocalTensor],
    root: usize,
) -> Result<(Vec<LocalTensor>, u64)> {
    const OP: &str = "broadcast";
    let (c, x) = Call::over(mesh, OP, shards)?;
    if root >= c.p {
        return Err(Error::OutOfRange {
            op: OP,
            what: "root",
            value: root as i64,
            bound: c.p,
        });
    }
    let mut h = Header::new(OP, x.dtype(), x.shape());
    h.root = root as u64;
    let all = c.agree(OP, &h)?;
    same_shapes(OP, &all)?;
    let sent = all[root].bytes();
    let mut t = c.peers.traffic(OP)?;
    if c.me == root {
        let words: Arc<[u32]> = words_of(x)?.into();
        for r in (0..c.p).filter(|&r| r != c.me) {
            t.send(c.peers.world(r), tag(c.seq, 1), Arc::clone(&words))?;
        }
        t.wait()?;
        return Ok((vec![x.clone()], sent));
    }
    t.recv(c.peers.world(root), tag(c.seq, 1), all[root].words())?;
    let out = t.wait()?.into_iter().next().unwrap_or_default();
    Ok((vec![upload(x, OP, x.shape(), &out)?], sent))
}

/// Split along `split_dim`, send piece j to rank j, join what arrives
/// along `concat_dim` in rank order.
pub(crate) fn all_to_all(
    mesh: &Mesh,
    shards: &[LocalTensor],
    split_dim: usize,
    concat_dim: usize,
) -> Result<(Vec<LocalTensor>, u64)> {
    const OP: &str = "all_to_all";
    let (c, x) = Call::over(mesh, OP, shards)?;
    let mut h = Header::new(OP, x.dtype(), x.shape());
    (h.dim, h.dim2) = (split_dim as u64, concat_dim as u64);
    let all = c.agree(OP, &h)?;
    same_except(OP, &all, concat_dim)?;
    let words = words_of(x)?;
    // Rank r's piece for this rank.
    let incoming = |r: usize| {
        let s = &all[r].shape;
        with_dim(s, split_dim, split_range(s[split_dim], c.p, c.me).len())
    };
    let piece = |j: usize| {
        host_narrow(
            &words,
            x.shape(),
            split_dim,
            split_range(x.shape()[split_dim], c.p, j),
        )
    };
    let words_from = |r: usize| incoming(r).iter().product::<usize>();
    let parts = c.round(OP, 1, words_from, |r| piece(r).into(), piece(c.me))?;
    let sizes: Vec<usize> = (0..c.p).map(|r| incoming(r)[concat_dim]).collect();
    let shape = with_dim(&incoming(0), concat_dim, sizes.iter().sum());
    let (outer, _, inner) = outer_dim_inner(&shape, concat_dim);
    let refs: Vec<(&[u32], usize)> = parts
        .iter()
        .zip(&sizes)
        .map(|(w, &n)| (&w[..], n))
        .collect();
    let out = host_concat(&refs, outer, inner);
    Ok((vec![upload(x, OP, &shape, &out)?], total(&all)))
}

/// Every rank's `words`, in rank order (reading a tensor's value back to
/// the host; not counted as communication).
pub(crate) fn gather_words(mesh: &Mesh, words: Vec<u32>) -> Result<Vec<Vec<u32>>> {
    const OP: &str = "to_host";
    let c = Call::new(mesh, OP)?;
    let all = c.agree(OP, &Header::new(OP, DType::I32, &[words.len()]))?;
    let shared: Arc<[u32]> = words.as_slice().into();
    c.round(OP, 1, |r| all[r].words(), |_| Arc::clone(&shared), words)
}
