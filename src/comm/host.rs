//! Host-staged transport (each rank its own wgpu device), built on
//! [`Exchange`]: every input is copied into a pooled MAP_READ staging buffer
//! and every output gets a pooled MAP_WRITE staging buffer, all mapped with
//! one wait per device; the host then reads the inputs straight from the
//! mapped views and writes each result straight into the output views, and
//! one `copy_buffer_to_buffer` per output moves it into place (submitted, not
//! waited on).
//!
//! No host `Vec` holds a payload on the many-to-many paths (all-reduce,
//! all-gather, reduce-scatter, broadcast, scatter): reductions run through a
//! 16 KiB stack chunk that stays in L1 while it is copied to every output.
//! Large calls split the host work over a few threads (disjoint output ranges
//! or disjoint outputs), since the staging copies on the device side already
//! run on every rank's queue at once. Reductions combine in fixed participant
//! order (acc = x0; acc = op(acc, x1); ...) and every rank receives the same
//! bytes. Works on raw 32-bit words, so f32 and i32 share every path but the
//! arithmetic.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::OnceLock;

use super::plan::{AllToAll, Split, gathered_shape};
use crate::device::{Exchange, LocalTensor, Mapped, OutView, Rank};
use crate::element::{DType, ReduceOp};
use crate::error::Result;
use crate::shard::{host_concat, host_narrow, outer_dim_inner, with_dim};

/// Words reduced at a time (16 KiB on the stack).
const CHUNK: usize = 4096;

/// Below this much output per call, one thread does the host work (spawning
/// threads costs tens of microseconds).
const PARALLEL_MIN_BYTES: usize = 1 << 20;

/// Host threads for a call writing `bytes` of output in total.
fn threads(bytes: usize) -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    if bytes < PARALLEL_MIN_BYTES {
        return 1;
    }
    *CORES.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(4)
    })
}

/// Run every job, the first on this thread and the rest on scoped threads.
fn run<J: Send>(jobs: Vec<J>, f: impl Fn(J) + Sync) {
    if jobs.len() <= 1 {
        jobs.into_iter().for_each(f);
        return;
    }
    std::thread::scope(|s| {
        let mut it = jobs.into_iter();
        let first = it.next();
        for job in it {
            let f = &f;
            s.spawn(move || f(job));
        }
        if let Some(job) = first {
            f(job);
        }
    });
}

/// `0..n` cut into `parts` contiguous ranges (fewer when `n` is small).
fn parts(n: usize, parts: usize, align: usize) -> Vec<Range<usize>> {
    let parts = parts.clamp(1, n.div_ceil(align).max(1));
    let step = n.div_ceil(parts).div_ceil(align) * align;
    let mut out = Vec::with_capacity(parts);
    let mut at = 0;
    while at < n || out.is_empty() {
        let end = (at + step).min(n);
        out.push(at..end);
        at = end;
    }
    out
}

/// Mapped bytes as words: borrowed when 4-aligned (mapped memory is), copied
/// otherwise.
fn words(bytes: &[u8]) -> Cow<'_, [u32]> {
    match bytemuck::try_cast_slice(bytes) {
        Ok(w) => Cow::Borrowed(w),
        Err(_) => Cow::Owned(bytemuck::pod_collect_to_vec(bytes)),
    }
}

fn inputs(m: &Mapped, n: usize) -> Vec<Cow<'_, [u32]>> {
    (0..n).map(|i| words(m.input(i))).collect()
}

/// Write `data` at word offset `at` of a view.
fn put(view: &mut OutView, at: usize, data: &[u32]) {
    if !data.is_empty() {
        view.slice(at * 4..(at + data.len()) * 4)
            .copy_from_slice(bytemuck::cast_slice(data));
    }
}

/// `acc = op(acc, x)` element-wise on words holding `dtype` values.
fn combine(acc: &mut [u32], x: &[u32], dtype: DType, op: ReduceOp) {
    // One monomorphic loop per (dtype, op), so the match stays out of the
    // inner loop and it vectorises.
    fn zip<const F32: bool, const SUM: bool>(acc: &mut [u32], x: &[u32]) {
        let dtype = if F32 { DType::F32 } else { DType::I32 };
        let op = if SUM { ReduceOp::Sum } else { ReduceOp::Max };
        for (a, b) in acc.iter_mut().zip(x) {
            *a = op.combine_words(dtype, *a, *b);
        }
    }
    match (dtype, op) {
        (DType::F32, ReduceOp::Sum) => zip::<true, true>(acc, x),
        (DType::F32, ReduceOp::Max) => zip::<true, false>(acc, x),
        (DType::I32, ReduceOp::Sum) => zip::<false, true>(acc, x),
        (DType::I32, ReduceOp::Max) => zip::<false, false>(acc, x),
        // Refused by `group::check_group` before any bytes move.
        (DType::F16 | DType::BF16 | DType::Quant(_), _) => {
            debug_assert!(
                false,
                "collectives refuse 16-bit floats and quantized weights"
            )
        }
    }
}

/// Reduce words `src..src + len` of every input in participant order and
/// write the result at word `dst` of every view.
fn reduce_run(
    ins: &[Cow<'_, [u32]>],
    src: usize,
    len: usize,
    views: &mut [OutView],
    dst: usize,
    dtype: DType,
    op: ReduceOp,
) {
    let mut buf = [0u32; CHUNK];
    let mut c = 0;
    while c < len {
        let n = CHUNK.min(len - c);
        let acc = &mut buf[..n];
        let s = src + c;
        acc.copy_from_slice(&ins[0][s..s + n]);
        for x in &ins[1..] {
            combine(acc, &x[s..s + n], dtype, op);
        }
        for v in views.iter_mut() {
            put(v, dst + c, acc);
        }
        c += n;
    }
}

/// Copy words `src..src + len` of `input` to word `dst` of every view, a
/// chunk at a time so the source stays in cache across the views.
fn copy_run(input: &[u32], src: usize, len: usize, views: &mut [OutView], dst: usize) {
    let mut c = 0;
    while c < len {
        let n = CHUNK.min(len - c);
        for v in views.iter_mut() {
            put(v, dst + c, &input[src + c..src + c + n]);
        }
        c += n;
    }
}

/// Whole-output views of outputs `range`.
fn views(m: &Mapped, range: Range<usize>) -> Result<Vec<OutView>> {
    range.map(|k| m.view(k, 0..m.output_len(k))).collect()
}

/// Output groups for `threads(bytes)` threads, each with whole-output views.
fn output_jobs(m: &Mapped, bytes: usize) -> Result<Vec<(Range<usize>, Vec<OutView>)>> {
    parts(m.outputs(), threads(bytes), 1)
        .into_iter()
        .map(|r| Ok((r.clone(), views(m, r)?)))
        .collect()
}

/// Stage `shards` as inputs and outputs of `shapes` on `ranks`, mapped.
fn exchange(shards: &[&LocalTensor], outs: &[(&Rank, &[usize])], dtype: DType) -> Result<Mapped> {
    let mut x = Exchange::with_capacity(shards.len(), outs.len());
    for s in shards {
        x.read(s)?;
    }
    for (r, shape) in outs {
        x.write(r, shape, dtype)?;
    }
    x.map()
}

pub(super) fn all_reduce(
    shards: &[LocalTensor],
    ranks: &[Rank],
    op: ReduceOp,
) -> Result<Vec<LocalTensor>> {
    let (shape, dtype) = (shards[0].shape(), shards[0].dtype());
    let refs: Vec<&LocalTensor> = shards.iter().collect();
    let outs: Vec<(&Rank, &[usize])> = ranks.iter().map(|r| (r, shape)).collect();
    let m = exchange(&refs, &outs, dtype)?;
    {
        let ins = inputs(&m, shards.len());
        let n = shards[0].len();
        // Threads take disjoint element ranges of every output (starts are
        // multiples of CHUNK words, so 8-byte aligned as mapping needs).
        let jobs = parts(n, threads(n * 4 * ranks.len()), CHUNK)
            .into_iter()
            .map(|r| {
                let vs = (0..ranks.len())
                    .map(|k| m.view(k, r.start * 4..r.end * 4))
                    .collect::<Result<Vec<_>>>()?;
                Ok((r, vs))
            })
            .collect::<Result<Vec<_>>>()?;
        run(jobs, |(r, mut vs)| {
            reduce_run(&ins, r.start, r.len(), &mut vs, 0, dtype, op);
        });
    }
    m.finish()
}

pub(super) fn all_gather(
    shards: &[LocalTensor],
    ranks: &[Rank],
    dim: usize,
) -> Result<Vec<LocalTensor>> {
    let shape = gathered_shape(shards, dim);
    let (total, dtype) = (shape[dim], shards[0].dtype());
    let refs: Vec<&LocalTensor> = shards.iter().collect();
    let outs: Vec<(&Rank, &[usize])> = ranks.iter().map(|r| (r, &shape[..])).collect();
    let m = exchange(&refs, &outs, dtype)?;
    {
        let ins = inputs(&m, shards.len());
        let (outer, _, inner) = outer_dim_inner(&shape, dim);
        let bytes = shape.iter().product::<usize>() * 4 * ranks.len();
        run(output_jobs(&m, bytes)?, |(_, mut vs)| {
            for o in 0..outer {
                let mut at = 0;
                for (i, s) in shards.iter().enumerate() {
                    let run = s.shape()[dim] * inner;
                    copy_run(&ins[i], o * run, run, &mut vs, (o * total + at) * inner);
                    at += s.shape()[dim];
                }
            }
        });
    }
    m.finish()
}

pub(super) fn reduce_scatter(
    shards: &[LocalTensor],
    ranks: &[Rank],
    dim: usize,
    op: ReduceOp,
) -> Result<Vec<LocalTensor>> {
    let (shape, dtype) = (shards[0].shape(), shards[0].dtype());
    let split = Split::new(shape, dim, ranks.len());
    let refs: Vec<&LocalTensor> = shards.iter().collect();
    let m = exchange(&refs, &split.outputs(ranks), dtype)?;
    let ranges = &split.ranges;
    {
        let ins = inputs(&m, shards.len());
        let (outer, n, inner) = outer_dim_inner(shape, dim);
        run(output_jobs(&m, shards[0].len() * 4)?, |(group, mut vs)| {
            for (j, v) in group.zip(vs.iter_mut()) {
                let len = ranges[j].len() * inner;
                for o in 0..outer {
                    let src = (o * n + ranges[j].start) * inner;
                    reduce_run(&ins, src, len, std::slice::from_mut(v), o * len, dtype, op);
                }
            }
        });
    }
    m.finish()
}

pub(super) fn broadcast(
    src: &LocalTensor,
    ranks: &[Rank],
    root: usize,
) -> Result<Vec<LocalTensor>> {
    let others: Vec<(&Rank, &[usize])> = ranks
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != root)
        .map(|(_, r)| (r, src.shape()))
        .collect();
    let m = exchange(&[src], &others, src.dtype())?;
    {
        let ins = inputs(&m, 1);
        let n = src.len();
        run(output_jobs(&m, n * 4 * others.len())?, |(_, mut vs)| {
            copy_run(&ins[0], 0, n, &mut vs, 0);
        });
    }
    let mut out = m.finish()?;
    out.insert(root, src.clone());
    Ok(out)
}

pub(super) fn scatter(src: &LocalTensor, ranks: &[Rank], dim: usize) -> Result<Vec<LocalTensor>> {
    let shape = src.shape();
    let split = Split::new(shape, dim, ranks.len());
    let m = exchange(&[src], &split.outputs(ranks), src.dtype())?;
    let ranges = &split.ranges;
    {
        let ins = inputs(&m, 1);
        let (outer, n, inner) = outer_dim_inner(shape, dim);
        run(output_jobs(&m, src.len() * 4)?, |(group, mut vs)| {
            for (j, v) in group.zip(vs.iter_mut()) {
                let len = ranges[j].len() * inner;
                for o in 0..outer {
                    let at = (o * n + ranges[j].start) * inner;
                    copy_run(&ins[0], at, len, std::slice::from_mut(v), o * len);
                }
            }
        });
    }
    m.finish()
}

pub(super) fn all_to_all(
    shards: &[LocalTensor],
    ranks: &[Rank],
    plan: &AllToAll,
) -> Result<Vec<LocalTensor>> {
    let dtype = shards[0].dtype();
    let (split, concat) = (plan.split_dim, plan.concat_dim);
    let refs: Vec<&LocalTensor> = shards.iter().collect();
    let outs: Vec<(&Rank, &[usize])> = ranks
        .iter()
        .zip(&plan.out_shapes)
        .map(|(r, s)| (r, &s[..]))
        .collect();
    let m = exchange(&refs, &outs, dtype)?;
    {
        // Two windows along two dims: cut and join through host Vecs (not a
        // bandwidth-critical path).
        let ins = inputs(&m, shards.len());
        for j in 0..ranks.len() {
            let pieces: Vec<(Vec<u32>, usize)> = shards
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let range = plan.pieces[i][j].clone();
                    let shape = with_dim(s.shape(), split, range.len());
                    let w = host_narrow(&ins[i], s.shape(), split, range);
                    (w, shape[concat])
                })
                .collect();
            let shape = &plan.out_shapes[j];
            let (outer, _, inner) = outer_dim_inner(shape, concat);
            let parts: Vec<(&[u32], usize)> = pieces.iter().map(|(w, n)| (&w[..], *n)).collect();
            let mut v = m.view(j, 0..m.output_len(j))?;
            put(&mut v, 0, &host_concat(&parts, outer, inner));
        }
    }
    m.finish()
}
