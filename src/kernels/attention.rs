//! Causal softmax attention over one rank's heads (`shaders/attention.wgsl`).
//!
//! The input is the fused QKV activation of one rank as the column-parallel
//! QKV projection produces it: `qkv` `[B·T, 3·H·D]`, row `b·T + t` for token
//! `t` of sequence `b`, columns `[q | k | v]`, each `H·D` wide with head `h` at
//! columns `h·D..(h+1)·D` (H = this rank's heads, possibly 0). Per sequence
//! `b` and head `h`:
//!
//! `S = q kᵀ / √D` masked to `j ≤ i`, `P = softmax_row(S)` (row max
//! subtracted; masked entries exactly 0), `O = P v`,
//!
//! with `O` returned as `[B·T, H·D]` in the same head-contiguous column layout,
//! ready for the row-parallel output projection. The backward pass, from the
//! saved `P` and the output gradient `dO`:
//!
//! `dV = Pᵀ dO`, `dP = dO vᵀ`, `dS = P ⊙ (dP − rowsum(dP ⊙ P))`,
//! `dQ = dS k / √D`, `dK = dSᵀ q / √D`,
//!
//! returned as one `[B·T, 3·H·D]` gradient in the fused layout.
//!
//! Cached decoding ([`attention_decode`]) runs the same kernels on queries at
//! positions `past..past + T` against a key/value cache `[2, B, H, past + T,
//! D]` (keys, then values) that holds only this rank's heads.
//!
//! Five entry points: `softmax_rows` (scores and softmax, one invocation per
//! row), `apply_probs` (`P v`, one per output element), `grad_scores` (`dS`,
//! one per row), `grad_qkv` (one per element of the fused gradient) and
//! `append_kv` (the grown cache). Every sum runs in a fixed order, so equal
//! inputs give bit-equal results.

use super::grid::{GRID_WORKGROUP, grid_source};
use crate::device::{Access, Device, Dispatch, KernelSpec, LocalTensor};
use crate::element::DType;
use crate::error::{Error, Result};

const SOURCE: &str = grid_source!("attention.wgsl");
/// q source, k/v source, probs, d_out, d_scores, out: one layout for every entry.
const BINDINGS: &[Access] = &[
    Access::Read,
    Access::Read,
    Access::Read,
    Access::Read,
    Access::Read,
    Access::ReadWrite,
];
/// Per-row kernels: one invocation per row (see the shader).
const ROW_WORKGROUP: u64 = 64;

/// The sizes of one rank's attention problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionShape {
    /// Sequences in the batch (B).
    pub batch: usize,
    /// Tokens per sequence (T); in [`attention_decode`], the new tokens.
    pub seq: usize,
    /// This rank's heads (H, may be 0).
    pub heads: usize,
    /// Width of one head (D, at least 1 when `heads > 0`).
    pub head_dim: usize,
}

impl AttentionShape {
    /// `batch` sequences of `seq` tokens over `heads` heads of `head_dim`.
    pub fn new(batch: usize, seq: usize, heads: usize, head_dim: usize) -> Self {
        AttentionShape {
            batch,
            seq,
            heads,
            head_dim,
        }
    }

    /// `[B·T, 3·H·D]`: the fused QKV input (and its gradient).
    pub fn qkv_shape(&self) -> [usize; 2] {
        [self.batch * self.seq, 3 * self.heads * self.head_dim]
    }

    /// `[B·T, H·D]`: the attention output (and its gradient).
    pub fn out_shape(&self) -> [usize; 2] {
        [self.batch * self.seq, self.heads * self.head_dim]
    }

    /// `[B, H, T, T]`: the probabilities [`attention_forward`] saves.
    pub fn probs_shape(&self) -> [usize; 4] {
        [self.batch, self.heads, self.seq, self.seq]
    }

    /// `[2, B, H, len, D]`: a key/value cache of `len` positions.
    pub fn cache_shape(&self, len: usize) -> [usize; 5] {
        [2, self.batch, self.heads, len, self.head_dim]
    }

    /// Whether there is no work: no heads or no tokens.
    fn is_empty(&self) -> bool {
        self.heads == 0 || self.batch == 0 || self.seq == 0
    }
}

/// What [`attention_forward`] returns.
#[derive(Clone, Debug)]
pub struct Attention {
    /// `[B·T, H·D]`: the attention output, heads contiguous in the columns.
    pub out: LocalTensor,
    /// `[B, H, T, T]`: the softmax probabilities (0 above the diagonal),
    /// saved for [`attention_backward`].
    pub probs: LocalTensor,
}

/// What [`attention_decode`] returns.
#[derive(Clone, Debug)]
pub struct Decoded {
    /// `[B·T_new, H·D]`: the attention output of the new tokens.
    pub out: LocalTensor,
    /// `[2, B, H, past + T_new, D]`: the cache grown by the new keys and
    /// values; pass it to the next step.
    pub cache: LocalTensor,
}

fn spec(entry: &'static str) -> KernelSpec {
    KernelSpec::new("attention", SOURCE, BINDINGS, entry)
}

/// Where element `e` of head `h` at position `t` of sequence `b` lives:
/// `base + b·sb + h·sh + t·st + e`.
#[derive(Clone, Copy)]
struct View {
    base: u64,
    sb: u64,
    sh: u64,
    st: u64,
}

impl View {
    /// Block `block` (0 = q, 1 = k, 2 = v) of the fused QKV layout with `seq`
    /// rows per sequence.
    fn fused(s: &AttentionShape, seq: usize, block: usize) -> View {
        let (hd, d) = ((s.heads * s.head_dim) as u64, s.head_dim as u64);
        View {
            base: block as u64 * hd,
            sb: seq as u64 * 3 * hd,
            sh: d,
            st: 3 * hd,
        }
    }

    /// Keys (`block` 0) or values (1) of a cache `[2, B, H, len, D]`.
    fn cache(s: &AttentionShape, len: usize, block: usize) -> View {
        let (b, h, d) = (s.batch as u64, s.heads as u64, s.head_dim as u64);
        let len = len as u64;
        View {
            base: block as u64 * b * h * len * d,
            sb: h * len * d,
            sh: len * d,
            st: d,
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    batch: u32,
    heads: u32,
    tq: u32,
    tk: u32,
    d: u32,
    hd: u32,
    past: u32,
    scale: f32,
    q: [u32; 4],
    k: [u32; 4],
    v: [u32; 4],
    n: u32,
    _pad: [u32; 3],
}

impl Params {
    /// Queries of `s` (`s.seq` per sequence) after `past` positions, keys and
    /// values at positions `< past + s.seq`. Every index the kernels form is
    /// below the length of a checked tensor, so the casts cannot truncate
    /// (see [`check_size`]).
    fn new(s: &AttentionShape, past: usize, q: View, k: View, v: View) -> Params {
        let view = |x: View| [x.base as u32, x.sb as u32, x.sh as u32, x.st as u32];
        Params {
            batch: s.batch as u32,
            heads: s.heads as u32,
            tq: s.seq as u32,
            tk: (past + s.seq) as u32,
            d: s.head_dim as u32,
            hd: (s.heads * s.head_dim) as u32,
            past: past as u32,
            scale: 1.0 / (s.head_dim.max(1) as f32).sqrt(),
            q: view(q),
            k: view(k),
            v: view(v),
            n: 0,
            _pad: [0; 3],
        }
    }

    fn with_n(mut self, n: u64) -> Params {
        self.n = n as u32;
        self
    }
}

/// Elements of a tensor of `dims`, saturating (an overflow is too large anyway).
fn elements(dims: &[usize]) -> u64 {
    dims.iter().fold(1u64, |a, &d| a.saturating_mul(d as u64))
}

/// A tensor of `dims` must fit one binding and 32-bit shader indices.
fn check_size(op: &'static str, what: &'static str, dims: &[usize], dev: &Device) -> Result<()> {
    let needed = elements(dims).saturating_mul(4);
    let l = dev.limits();
    let limits = [
        (
            l.max_storage_buffer_binding_size,
            "max_storage_buffer_binding_size",
        ),
        (l.max_buffer_size, "max_buffer_size"),
        (
            4 * u32::MAX as u64,
            "2^32 elements, the shaders' 32-bit indices",
        ),
    ];
    for (limit, limit_name) in limits {
        if needed > limit {
            return Err(Error::TooLarge {
                op,
                what,
                needed,
                limit,
                limit_name,
            });
        }
    }
    Ok(())
}

/// Check `s` itself and that `qkv` is its fused F32 input.
fn check_qkv(op: &'static str, qkv: &LocalTensor, s: &AttentionShape) -> Result<()> {
    qkv.expect_dtype(op, DType::F32)?;
    if s.heads > 0 && s.head_dim == 0 {
        return Err(Error::invalid(
            op,
            format!("{} heads of head_dim 0: give head_dim ≥ 1", s.heads),
        ));
    }
    let fits = |dims: &[usize]| {
        dims.iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .is_some()
    };
    if !fits(&[s.batch, s.seq]) || !fits(&[3, s.heads, s.head_dim]) {
        return Err(Error::invalid(op, format!("{s:?} overflows usize")));
    }
    let want = s.qkv_shape();
    if qkv.shape() != want {
        return Err(Error::ShapeMismatch {
            op,
            expected: format!(
                "fused QKV [batch·seq, 3·heads·head_dim] = {want:?} for batch {}, seq {}, heads {}, head_dim {}",
                s.batch, s.seq, s.heads, s.head_dim
            ),
            got: format!("{:?}", qkv.shape()),
        });
    }
    check_size(op, "the fused QKV activation", &want, qkv.device())
}

/// Check that `x` is an F32 tensor of `want` on `anchor`'s rank.
fn check_operand(
    op: &'static str,
    name: &str,
    anchor: &LocalTensor,
    x: &LocalTensor,
    want: &[usize],
) -> Result<()> {
    x.expect_dtype(op, DType::F32)?;
    anchor.same_rank(op, x)?;
    if x.shape() != want {
        return Err(Error::ShapeMismatch {
            op,
            expected: format!("{name} {want:?}"),
            got: format!("{:?}", x.shape()),
        });
    }
    Ok(())
}

/// Record `entry` over `n` rows or elements; `inputs` fill bindings 1..=5
/// (None → `qkv`, unused).
fn run(
    entry: &'static str,
    params: Params,
    inputs: [Option<&LocalTensor>; 5],
    qkv: &LocalTensor,
    out: &LocalTensor,
    n: u64,
    workgroup: u64,
) -> Result<()> {
    let b = inputs.map(|x| x.unwrap_or(qkv));
    let params = params.with_n(n);
    Dispatch {
        spec: &spec(entry),
        params: bytemuck::bytes_of(&params),
        buffers: &[b[0], b[1], b[2], b[3], b[4], out],
        workgroups: n.div_ceil(workgroup),
    }
    .record(qkv.device())
}

/// Softmax rows into `probs`, then `P v` into `out`: the forward pass of
/// queries in `q_src` against keys and values in `kv_src`.
fn forward_into(
    params: Params,
    s: &AttentionShape,
    q_src: &LocalTensor,
    kv_src: &LocalTensor,
    probs: &LocalTensor,
    out: &LocalTensor,
) -> Result<()> {
    let rows = elements(&[s.batch, s.heads, s.seq]);
    let kv = Some(kv_src);
    run(
        "softmax_rows",
        params,
        [None, kv, None, None, None],
        q_src,
        probs,
        rows,
        ROW_WORKGROUP,
    )?;
    run(
        "apply_probs",
        params,
        [None, kv, Some(probs), None, None],
        q_src,
        out,
        out.len() as u64,
        GRID_WORKGROUP,
    )
}

/// Causal softmax attention of one rank's heads: `qkv` `[B·T, 3·H·D]` (F32,
/// fused layout, see the module docs) → the output `[B·T, H·D]` and the
/// probabilities `[B, H, T, T]` that [`attention_backward`] needs.
///
/// With no heads (or no tokens) it returns empty tensors and records nothing.
/// Errors: a `qkv` of another shape or dtype, `head_dim` 0 with heads, or
/// probabilities larger than one storage binding ([`Error::TooLarge`]: use a
/// smaller batch or shorter sequences, or fewer heads per rank).
pub fn attention_forward(qkv: &LocalTensor, shape: AttentionShape) -> Result<Attention> {
    const OP: &str = "attention_forward";
    check_qkv(OP, qkv, &shape)?;
    let probs_shape = shape.probs_shape();
    check_size(
        OP,
        "the attention probabilities [B, H, T, T]",
        &probs_shape,
        qkv.device(),
    )?;
    let out = qkv.rank().alloc(OP, &shape.out_shape(), DType::F32)?;
    let probs = qkv.rank().alloc(OP, &probs_shape, DType::F32)?;
    if !shape.is_empty() {
        let t = shape.seq;
        let params = Params::new(
            &shape,
            0,
            View::fused(&shape, t, 0),
            View::fused(&shape, t, 1),
            View::fused(&shape, t, 2),
        );
        forward_into(params, &shape, qkv, qkv, &probs, &out)?;
    }
    Ok(Attention { out, probs })
}

/// Gradient of [`attention_forward`] w.r.t. its input: from `qkv` `[B·T,
/// 3·H·D]`, the saved `probs` `[B, H, T, T]` and the output gradient `d_out`
/// `[B·T, H·D]` (all F32 on one rank), the fused `[B·T, 3·H·D]` gradient
/// `[dQ | dK | dV]`.
///
/// With no heads (or no tokens) it returns an empty or zero-width tensor and
/// records nothing. Errors: operands of other shapes, dtypes or ranks.
pub fn attention_backward(
    qkv: &LocalTensor,
    probs: &LocalTensor,
    d_out: &LocalTensor,
    shape: AttentionShape,
) -> Result<LocalTensor> {
    const OP: &str = "attention_backward";
    check_qkv(OP, qkv, &shape)?;
    check_operand(
        OP,
        "probabilities [B, H, T, T]",
        qkv,
        probs,
        &shape.probs_shape(),
    )?;
    check_operand(
        OP,
        "output gradient [B·T, H·D]",
        qkv,
        d_out,
        &shape.out_shape(),
    )?;
    let d_qkv = qkv.rank().alloc(OP, &shape.qkv_shape(), DType::F32)?;
    if shape.is_empty() {
        return Ok(d_qkv);
    }
    let d_scores = qkv.rank().alloc(OP, &shape.probs_shape(), DType::F32)?;
    let t = shape.seq;
    let params = Params::new(
        &shape,
        0,
        View::fused(&shape, t, 0),
        View::fused(&shape, t, 1),
        View::fused(&shape, t, 2),
    );
    let rows = elements(&[shape.batch, shape.heads, t]);
    run(
        "grad_scores",
        params,
        [None, None, Some(probs), Some(d_out), None],
        qkv,
        &d_scores,
        rows,
        ROW_WORKGROUP,
    )?;
    run(
        "grad_qkv",
        params,
        [None, None, Some(probs), Some(d_out), Some(&d_scores)],
        qkv,
        &d_qkv,
        d_qkv.len() as u64,
        GRID_WORKGROUP,
    )?;
    Ok(d_qkv)
}

/// One step of cached decoding: `qkv` `[B·T_new, 3·H·D]` holds the new tokens
/// (`shape.seq` = T_new per sequence, at positions `past..past + T_new`),
/// `cache` `[2, B, H, past, D]` the keys (index 0) and values (index 1) of
/// the earlier positions of this rank's heads (`None`: nothing cached, past
/// = 0). Returns the new tokens' attention output `[B·T_new, H·D]`, which
/// equals the matching rows of [`attention_forward`] over all `past + T_new`
/// tokens, and the grown cache `[2, B, H, past + T_new, D]`.
///
/// Each step copies the cache into a new tensor (tensors are immutable), so a
/// step costs O(cache) besides the attention itself. Errors: operands of other
/// shapes, dtypes or ranks, or a cache or probability block larger than one
/// storage binding.
pub fn attention_decode(
    qkv: &LocalTensor,
    cache: Option<&LocalTensor>,
    shape: AttentionShape,
) -> Result<Decoded> {
    const OP: &str = "attention_decode";
    check_qkv(OP, qkv, &shape)?;
    let past = match cache {
        Some(c) => {
            let past = match *c.shape() {
                [_, _, _, len, _] => len,
                _ => 0,
            };
            check_operand(
                OP,
                "key/value cache [2, B, H, past, D]",
                qkv,
                c,
                &shape.cache_shape(past),
            )?;
            past
        }
        None => 0,
    };
    let total = past
        .checked_add(shape.seq)
        .ok_or_else(|| Error::invalid(OP, "past + seq overflows usize"))?;
    let cache_shape = shape.cache_shape(total);
    check_size(
        OP,
        "the key/value cache [2, B, H, T, D]",
        &cache_shape,
        qkv.device(),
    )?;
    let probs_shape = [shape.batch, shape.heads, shape.seq, total];
    check_size(
        OP,
        "the attention probabilities [B, H, T_new, T]",
        &probs_shape,
        qkv.device(),
    )?;
    let new_cache = qkv.rank().alloc(OP, &cache_shape, DType::F32)?;
    let out = qkv.rank().alloc(OP, &shape.out_shape(), DType::F32)?;
    let params = Params::new(
        &shape,
        past,
        View::fused(&shape, shape.seq, 0),
        View::cache(&shape, total, 0),
        View::cache(&shape, total, 1),
    );
    run(
        "append_kv",
        params,
        [None, cache, None, None, None],
        qkv,
        &new_cache,
        new_cache.len() as u64,
        GRID_WORKGROUP,
    )?;
    if !shape.is_empty() {
        let probs = qkv.rank().alloc(OP, &probs_shape, DType::F32)?;
        forward_into(params, &shape, qkv, &new_cache, &probs, &out)?;
    }
    Ok(Decoded {
        out,
        cache: new_cache,
    })
}
