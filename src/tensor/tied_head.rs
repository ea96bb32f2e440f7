//! [`DTensor::matmul`](crate::DTensor::matmul)'s GEMMs on one rank when
//! `w` (a tied output head's vocab shard `E`, used transposed) or the
//! product is larger than one storage binding: `logits = h · Eᵀ`,
//! `dE = dlogitsᵀ · h`, `dh = dlogits · E`.
//!
//! Past one storage binding a vocab shard `E` is stored in row blocks of
//! vocab rows, and the logits `[tokens, vocab rows]` in row blocks of tokens
//! (`device/blocks.rs`). Logits are one GEMM per (token block, vocab block),
//! joined along the vocab; `dE` is accumulated per vocab block over the
//! token blocks (so it has `E`'s blocks), `dh` per token block over the
//! vocab blocks; both sums by GEMM accumulation.

use crate::device::{LocalTensor, copy_region};
use crate::element::DType;
use crate::error::{Error, Result};
use crate::kernels::{self, GemmOptions};

const OP: &str = "DTensor::linear (tied head)";

/// `parts` joined along `dim`, without a copy for one part.
fn join(mut parts: Vec<LocalTensor>, dim: usize) -> Result<LocalTensor> {
    match parts.len() {
        1 => Ok(parts.pop().expect("one part")),
        _ => kernels::concat(&parts.iter().collect::<Vec<_>>(), dim),
    }
}

/// Rows `start..start + n` of `x`, without a copy when that is all of it.
fn rows(x: &LocalTensor, dim: usize, start: usize, n: usize) -> Result<LocalTensor> {
    match start == 0 && n == x.shape()[dim] {
        true => Ok(x.clone()),
        false => kernels::narrow(x, dim, start, n),
    }
}

/// `x · w` as [`kernels::gemm`] with `opts` (w a weight), or, where `w` is used
/// transposed and it or the product is past one binding, block by block
/// ([`logits`]; no bias there).
pub(super) fn product(x: &LocalTensor, w: &LocalTensor, opts: GemmOptions) -> Result<LocalTensor> {
    let out = [x.shape()[0], w.shape()[0]];
    let out_dtype = opts.out_dtype.unwrap_or(x.dtype());
    if !opts.trans_b || !(w.is_blocked() || x.rank().row_blocks(&out, out_dtype)?.is_some()) {
        return kernels::gemm(x, w, opts.weight(true));
    }
    if opts.bias.is_some() || opts.multiply.is_some() {
        return Err(Error::invalid(
            "DTensor::linear",
            "a bias or a multiply with a weight or product past one storage binding is not \
             supported: apply it after the product (DTensor::add_row, DTensor::mul)",
        ));
    }
    logits(x, w, opts)
}

/// `(dx, dw)` of [`product`] from `dy`: `dy · w(ᵀ)` with `dx_opts` and
/// `dyᵀ · x` (`x · dy` unless transposed: `dw_opts`) as the matmul VJP runs
/// them, by [`backward`] where `dy` or a transposed `w` is blocked.
pub(super) fn product_vjp(
    dy: &LocalTensor,
    x: &LocalTensor,
    w: &LocalTensor,
    transposed: bool,
    (dx_opts, dw_opts): (GemmOptions, GemmOptions),
) -> Result<(LocalTensor, Option<LocalTensor>)> {
    if w.dtype().quant().is_some() {
        return Ok((frozen_dx(dy, w, transposed, dx_opts)?, None));
    }
    if transposed && (dy.is_blocked() || w.is_blocked()) {
        // dx sums over the vocab blocks: accumulated in f32, rounded once.
        let wide = GemmOptions {
            out_dtype: Some(DType::F32),
            ..dx_opts
        };
        let (dw, dx) = backward(dy, x, w, (dw_opts, wide))?;
        let dx = match dx_opts.out_dtype {
            Some(d) if d != DType::F32 => kernels::cast(&dx, d)?,
            _ => dx,
        };
        return Ok((dx, Some(dw)));
    }
    let dx = kernels::gemm(dy, w, dx_opts.weight(true))?;
    let (a, b) = if transposed { (dy, x) } else { (x, dy) };
    Ok((dx, Some(kernels::gemm(a, b, dw_opts)?)))
}

/// `dx = dy·w` for a quantized (frozen) `w` `[N, K]` used transposed: by
/// blocks of `dy`'s rows (tokens) and of `w`'s rows (a vocabulary past one
/// binding), the vocabulary blocks' products summed in f32.
fn frozen_dx(
    dy: &LocalTensor,
    w: &LocalTensor,
    transposed: bool,
    dx_opts: GemmOptions,
) -> Result<LocalTensor> {
    if !transposed {
        return Err(crate::error::Error::invalid(
            "DTensor::matmul (backward)",
            "a quantized weight is used as a layer's [out, in] (transpose_w)",
        ));
    }
    let mut token_blocks = Vec::with_capacity(dy.blocks().len());
    for dyt in dy.blocks() {
        let mut sum: Option<LocalTensor> = None;
        let mut start = 0;
        for wb in w.blocks() {
            let n = wb.shape()[0];
            let part = match w.blocks().len() {
                1 => dyt.clone(),
                _ => kernels::slicing::narrow(dyt, 1, start, n)?,
            };
            let opts = GemmOptions {
                accumulate: sum.as_ref(),
                out_dtype: Some(DType::F32),
                ..dx_opts
            };
            sum = Some(kernels::gemm(&part, wb, opts)?);
            start += n;
        }
        let dx = sum.ok_or_else(|| {
            crate::error::Error::invalid("DTensor::matmul (backward)", "a weight without rows")
        })?;
        token_blocks.push(match dx_opts.out_dtype {
            Some(d) if d != DType::F32 => kernels::cast(&dx, d)?,
            _ => dx,
        });
    }
    LocalTensor::from_blocks(token_blocks)
}

/// `h · eᵀ` (`opts` has `trans_b`), in token-row blocks where the logits
/// do not fit one binding.
fn logits(h: &LocalTensor, e: &LocalTensor, opts: GemmOptions) -> Result<LocalTensor> {
    let t = h.shape()[0];
    let layout = h.rank().row_blocks(&[t, e.shape()[0]], h.dtype())?;
    let (mut start, mut token_blocks) = (0, Vec::new());
    for n in layout.unwrap_or_else(|| vec![t]) {
        let h_t = rows(h, 0, start, n)?;
        let parts = e
            .blocks()
            .iter()
            .map(|b| kernels::gemm(&h_t, b, opts.weight(true)))
            .collect::<Result<Vec<_>>>()?;
        token_blocks.push(join(parts, 1)?);
        start += n;
    }
    LocalTensor::from_blocks(token_blocks)
}

/// Vocab rows per chunk of [`backward`] (chunks lie within `e`'s blocks):
/// what one texture holds (CPU adapters' GEMMs read their operands from
/// textures and split a longer side again, with copies), in whole 64s.
fn vocab_chunk(e: &LocalTensor) -> usize {
    let texture = e.device().limits().max_texture_dimension_2d as usize;
    (texture.min(e.blocks()[0].shape()[0]) / 64 * 64).max(64)
}

/// `(dlᵀ · h, dl · e)` with the GEMM options `grad` (`trans_a`) and
/// `partial`, where `dl` or `e` is blocked: over chunks of [`vocab_chunk`]
/// vocab rows, each chunk's `dE` rows (f32) summed over the token blocks
/// and copied into place, so no part of `dE` is held twice (BENCHMARKS
/// round 29: this was the training step's peak of device memory).
fn backward(
    dl: &LocalTensor,
    h: &LocalTensor,
    e: &LocalTensor,
    (grad, partial): (GemmOptions, GemmOptions),
) -> Result<(LocalTensor, LocalTensor)> {
    let tb = dl.blocks();
    if tb.len() == 1 && !e.is_blocked() {
        return Ok((
            kernels::gemm(dl, h, grad)?,
            kernels::gemm(dl, e, partial.weight(true))?,
        ));
    }
    let (width, chunk) = (e.shape()[1], vocab_chunk(e));
    let mut de: Option<LocalTensor> = None;
    let mut dh: Vec<Option<LocalTensor>> = vec![None; tb.len()];
    let chunks = e
        .blocks()
        .iter()
        .zip(e.block_row_starts())
        .flat_map(|(block, b0)| {
            let n = block.shape()[0];
            (0..n)
                .step_by(chunk)
                .map(move |c0| (block, b0 + c0, c0, chunk.min(n - c0)))
        });
    for (block, v0, c0, len) in chunks {
        let e_c = rows(block, 0, c0, len)?;
        let mut de_c: Option<LocalTensor> = None;
        for ((d, t0), acc) in tb.iter().zip(dl.block_row_starts()).zip(dh.iter_mut()) {
            let h_t = rows(h, 0, t0, d.shape()[0])?;
            let d_c = rows(d, 1, v0, len)?;
            let accumulate = de_c.as_ref();
            de_c = Some(kernels::gemm(
                &d_c,
                &h_t,
                GemmOptions { accumulate, ..grad },
            )?);
            let accumulate = acc.as_ref();
            *acc = Some(kernels::gemm(
                &d_c,
                &e_c,
                GemmOptions {
                    accumulate,
                    ..partial
                },
            )?);
        }
        let de_c = de_c.expect("dl has a token block");
        let de = match &mut de {
            Some(de) => de,
            None => de.insert(e.rank().alloc(OP, e.shape(), de_c.dtype())?),
        };
        copy_region(&de_c, 0, de, v0 * width, len * width)?;
    }
    let de = de.ok_or_else(|| Error::invalid(OP, "a vocab shard of no rows"))?;
    Ok((de, join(dh.into_iter().flatten().collect(), 0)?))
}
