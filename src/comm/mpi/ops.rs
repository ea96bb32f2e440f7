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
use super::p2p::{Traffic, tag};
use crate::device::{LocalTensor, Mesh, Process, download_many};
use crate::element::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::shard::{host_concat, host_narrow, outer_dim_inner, split_range, with_dim};

/// What a collective over MPI needs: the process group, this rank, its
/// shard as words, and the collective's sequence number.
struct Call {
    process: Arc<Process>,
    me: usize,
    p: usize,
    seq: u64,
}

impl Call {
    fn new(mesh: &Mesh, op: &'static str, shards: &[LocalTensor]) -> Result<Call> {
        let process = mesh
            .process()
            .cloned()
            .ok_or_else(|| Error::invalid(op, "not a multi-process mesh"))?;
        process.check_thread(op)?;
        if shards.len() != 1 {
            return Err(Error::invalid(
                op,
                "a multi-process mesh runs collectives over all its ranks: pass this process's one shard",
            ));
        }
        let seq = process.next_seq();
        Ok(Call {
            me: process.rank(),
            p: process.size(),
            process,
            seq,
        })
    }

    fn traffic(&self, op: &'static str) -> Result<Traffic> {
        Traffic::new(&self.process, op)
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

fn to_words(b: &[u8]) -> Vec<u32> {
    bytemuck::pod_collect_to_vec(b)
}

fn bytes(w: &[u32]) -> Vec<u8> {
    bytemuck::cast_slice(w).to_vec()
}

/// Reduce, in rank order, piece `k` of every rank: `mine` is this rank's,
/// `others` the rest in rank order.
fn reduce_in_order(
    me: usize,
    mine: &[u32],
    others: &[Vec<u32>],
    dtype: DType,
    op: ReduceOp,
) -> Vec<u32> {
    let mut it = others.iter();
    let pieces: Vec<&[u32]> = (0..=others.len())
        .map(|r| {
            if r == me {
                mine
            } else {
                it.next().map_or(mine, |v| &v[..])
            }
        })
        .collect();
    let mut acc = pieces[0].to_vec();
    for x in &pieces[1..] {
        for (a, b) in acc.iter_mut().zip(x.iter()) {
            *a = op.combine_words(dtype, *a, *b);
        }
    }
    acc
}

/// All-reduce; returns the output and the bytes every rank contributed.
pub(crate) fn all_reduce(
    mesh: &Mesh,
    shards: &[LocalTensor],
    op: ReduceOp,
) -> Result<(Vec<LocalTensor>, u64)> {
    const OP: &str = "all_reduce";
    let c = Call::new(mesh, OP, shards)?;
    let x = &shards[0];
    let mut h = Header::new(OP, x.dtype(), x.shape());
    h.op = op_code(op);
    let all = agree(&c.process, OP, c.seq, &h)?;
    same_shapes(OP, &all)?;
    let words = words_of(x)?;
    let n = words.len();
    let slice = |j: usize| split_range(n, c.p, j);
    let mut t = c.traffic(OP)?;
    for r in (0..c.p).filter(|&r| r != c.me) {
        t.recv(r, tag(c.seq, 1), slice(c.me).len() * 4)?;
        t.send(r, tag(c.seq, 1), bytes(&words[slice(r)]))?;
    }
    let got: Vec<Vec<u32>> = t.wait()?.iter().map(|b| to_words(b)).collect();
    let reduced = reduce_in_order(c.me, &words[slice(c.me)], &got, x.dtype(), op);
    let mut t = c.traffic(OP)?;
    for r in (0..c.p).filter(|&r| r != c.me) {
        t.recv(r, tag(c.seq, 2), slice(r).len() * 4)?;
        t.send(r, tag(c.seq, 2), bytes(&reduced))?;
    }
    let mut got = t.wait()?.into_iter();
    let mut out = Vec::with_capacity(n);
    for r in 0..c.p {
        if r == c.me {
            out.extend_from_slice(&reduced);
        } else if let Some(b) = got.next() {
            out.extend(to_words(&b));
        }
    }
    let total = all.iter().map(Header::bytes).sum();
    Ok((vec![upload(x, OP, x.shape(), &out)?], total))
}

/// All-gather along `dim` (sizes may differ along it, 0 included).
pub(crate) fn all_gather(
    mesh: &Mesh,
    shards: &[LocalTensor],
    dim: usize,
) -> Result<(Vec<LocalTensor>, u64)> {
    const OP: &str = "all_gather";
    let c = Call::new(mesh, OP, shards)?;
    let x = &shards[0];
    let mut h = Header::new(OP, x.dtype(), x.shape());
    h.dim = dim as u64;
    let all = agree(&c.process, OP, c.seq, &h)?;
    same_except(OP, &all, dim)?;
    let words = words_of(x)?;
    let mut t = c.traffic(OP)?;
    for r in (0..c.p).filter(|&r| r != c.me) {
        t.recv(r, tag(c.seq, 1), all[r].bytes() as usize)?;
        t.send(r, tag(c.seq, 1), bytes(&words))?;
    }
    let mut got = t.wait()?.into_iter();
    let parts: Vec<Vec<u32>> = (0..c.p)
        .map(|r| {
            if r == c.me {
                words.clone()
            } else {
                got.next().map(|b| to_words(&b)).unwrap_or_default()
            }
        })
        .collect();
    let total: usize = all.iter().map(|h| h.shape[dim]).sum();
    let shape = with_dim(x.shape(), dim, total);
    let (outer, _, inner) = outer_dim_inner(&shape, dim);
    let refs: Vec<(&[u32], usize)> = parts
        .iter()
        .zip(&all)
        .map(|(w, h)| (&w[..], h.shape[dim]))
        .collect();
    let out = host_concat(&refs, outer, inner);
    let sent = all.iter().map(Header::bytes).sum();
    Ok((vec![upload(x, OP, &shape, &out)?], sent))
}

/// Reduce full-shape shards; rank r keeps slice r along `dim`.
pub(crate) fn reduce_scatter(
    mesh: &Mesh,
    shards: &[LocalTensor],
    dim: usize,
    op: ReduceOp,
) -> Result<(Vec<LocalTensor>, u64)> {
    const OP: &str = "reduce_scatter";
    let c = Call::new(mesh, OP, shards)?;
    let x = &shards[0];
    let mut h = Header::new(OP, x.dtype(), x.shape());
    (h.op, h.dim) = (op_code(op), dim as u64);
    let all = agree(&c.process, OP, c.seq, &h)?;
    same_shapes(OP, &all)?;
    let words = words_of(x)?;
    let shape = x.shape();
    let piece = |j: usize| host_narrow(&words, shape, dim, split_range(shape[dim], c.p, j));
    let mine_shape = with_dim(shape, dim, split_range(shape[dim], c.p, c.me).len());
    let mine_len = mine_shape.iter().product::<usize>();
    let mut t = c.traffic(OP)?;
    for r in (0..c.p).filter(|&r| r != c.me) {
        t.recv(r, tag(c.seq, 1), mine_len * 4)?;
        t.send(r, tag(c.seq, 1), bytes(&piece(r)))?;
    }
    let got: Vec<Vec<u32>> = t.wait()?.iter().map(|b| to_words(b)).collect();
    let reduced = reduce_in_order(c.me, &piece(c.me), &got, x.dtype(), op);
    let total = all.iter().map(Header::bytes).sum();
    Ok((vec![upload(x, OP, &mine_shape, &reduced)?], total))
}

/// Every rank ends with rank `root`'s tensor (all pass same-shaped tensors;
/// only the root's bytes are read).
pub(crate) fn broadcast(
    mesh: &Mesh,
    shards: &[LocalTensor],
    root: usize,
) -> Result<(Vec<LocalTensor>, u64)> {
    const OP: &str = "broadcast";
    let c = Call::new(mesh, OP, shards)?;
    let x = &shards[0];
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
    let all = agree(&c.process, OP, c.seq, &h)?;
    same_shapes(OP, &all)?;
    let mut t = c.traffic(OP)?;
    if c.me == root {
        let words = words_of(x)?;
        for r in (0..c.p).filter(|&r| r != c.me) {
            t.send(r, tag(c.seq, 1), bytes(&words))?;
        }
        t.wait()?;
        return Ok((vec![x.clone()], all[root].bytes()));
    }
    t.recv(root, tag(c.seq, 1), all[root].bytes() as usize)?;
    let got = t.wait()?;
    let out = got.first().map(|b| to_words(b)).unwrap_or_default();
    Ok((vec![upload(x, OP, x.shape(), &out)?], all[root].bytes()))
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
    let c = Call::new(mesh, OP, shards)?;
    let x = &shards[0];
    let mut h = Header::new(OP, x.dtype(), x.shape());
    (h.dim, h.dim2) = (split_dim as u64, concat_dim as u64);
    let all = agree(&c.process, OP, c.seq, &h)?;
    same_except(OP, &all, concat_dim)?;
    let words = words_of(x)?;
    let piece_shape =
        |s: &[usize], j: usize| with_dim(s, split_dim, split_range(s[split_dim], c.p, j).len());
    let piece = |j: usize| {
        host_narrow(
            &words,
            x.shape(),
            split_dim,
            split_range(x.shape()[split_dim], c.p, j),
        )
    };
    let mut t = c.traffic(OP)?;
    for r in (0..c.p).filter(|&r| r != c.me) {
        let len: usize = piece_shape(&all[r].shape, c.me).iter().product();
        t.recv(r, tag(c.seq, 1), len * 4)?;
        t.send(r, tag(c.seq, 1), bytes(&piece(r)))?;
    }
    let mut got = t.wait()?.into_iter();
    let parts: Vec<(Vec<u32>, usize)> = (0..c.p)
        .map(|r| {
            let n = piece_shape(&all[r].shape, c.me)[concat_dim];
            let w = if r == c.me {
                piece(c.me)
            } else {
                got.next().map(|b| to_words(&b)).unwrap_or_default()
            };
            (w, n)
        })
        .collect();
    let first = piece_shape(&all[0].shape, c.me);
    let joined: usize = parts.iter().map(|(_, n)| n).sum();
    let shape = with_dim(&first, concat_dim, joined);
    let (outer, _, inner) = outer_dim_inner(&shape, concat_dim);
    let refs: Vec<(&[u32], usize)> = parts.iter().map(|(w, n)| (&w[..], *n)).collect();
    let out = host_concat(&refs, outer, inner);
    let total = all.iter().map(Header::bytes).sum();
    Ok((vec![upload(x, OP, &shape, &out)?], total))
}

/// Every rank's `words`, in rank order (reading a tensor's value back to
/// the host; not counted as communication).
pub(crate) fn gather_words(mesh: &Mesh, words: Vec<u32>) -> Result<Vec<Vec<u32>>> {
    const OP: &str = "to_host";
    let process = mesh
        .process()
        .cloned()
        .ok_or_else(|| Error::invalid(OP, "not a multi-process mesh"))?;
    process.check_thread(OP)?;
    let (me, p, seq) = (process.rank(), process.size(), process.next_seq());
    let h = Header::new(OP, DType::I32, &[words.len()]);
    let all = agree(&process, OP, seq, &h)?;
    let mut t = Traffic::new(&process, OP)?;
    for r in (0..p).filter(|&r| r != me) {
        t.recv(r, tag(seq, 1), all[r].bytes() as usize)?;
        t.send(r, tag(seq, 1), bytes(&words))?;
    }
    let mut got = t.wait()?.into_iter();
    Ok((0..p)
        .map(|r| {
            if r == me {
                words.clone()
            } else {
                got.next().map(|b| to_words(&b)).unwrap_or_default()
            }
        })
        .collect())
}
