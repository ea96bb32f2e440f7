//! Element-wise kernels (`shaders/elementwise.wgsl`): `alpha·a + beta·b`
//! (add, scale, axpy), a bias row with or without a residual, the product `a ⊙ b` (SwiGLU's gate) and the activations GELU (tanh form), ReLU and SiLU with
//! their backward `dy · act'(x)`. One invocation per four elements, read and
//! written as vec4s (`KernelSpec::in_vec4s` in `device/pipeline.rs`).

use super::grid::{grid_groups, grid_source};
use crate::device::{Access, Dispatch, KernelSpec, LocalTensor, map_blocks};
use crate::element::DType;
use crate::error::{Error, Result};

const SOURCE: &str = grid_source!("elementwise.wgsl");
const BINDINGS: &[Access] = &[Access::Read, Access::Read, Access::ReadWrite];
/// `add_row_add`'s: the residual after the output.
const BINDINGS_RES: &[Access] = &[Access::Read, Access::Read, Access::ReadWrite, Access::Read];

/// An activation function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// GELU, tanh approximation (GPT-2, Megatron).
    Gelu,
    /// max(x, 0).
    Relu,
    /// SiLU (swish): `x·σ(x)`, `σ(x) = 1/(1 + e^{−x})`; backward
    /// `σ(x)·(1 + x·(1 − σ(x)))`. The kernel clamps the exponent's argument to
    /// ±80, so no intermediate overflows.
    Silu,
}

fn spec(entry: &'static str) -> KernelSpec {
    KernelSpec::new("elementwise", SOURCE, BINDINGS, entry).in_vec4s()
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    cols: u32,
    alpha: f32,
    beta: f32,
}

/// One kernel per block when the operands are blocked (same shape, so same blocks).
fn run(
    entry: &'static str,
    op: &'static str,
    a: &LocalTensor,
    b: &LocalTensor,
    alpha: f32,
    beta: f32,
) -> Result<LocalTensor> {
    if a.shape() != b.shape() {
        return Err(Error::shape(op, a.shape(), b.shape()));
    }
    map_blocks(op, &[a, b], |p| run_one(entry, op, p[0], p[1], alpha, beta))
}

fn run_one(
    entry: &'static str,
    op: &'static str,
    a: &LocalTensor,
    b: &LocalTensor,
    alpha: f32,
    beta: f32,
) -> Result<LocalTensor> {
    a.expect_dtype(op, DType::F32)?;
    b.expect_dtype(op, DType::F32)?;
    a.same_rank(op, b)?;
    if a.shape() != b.shape() {
        return Err(Error::shape(op, a.shape(), b.shape()));
    }
    let n = u32::try_from(a.len()).map_err(|_| Error::invalid(op, "more than 2^32 elements"))?;
    let out = a.rank().alloc(op, a.shape(), DType::F32)?;
    let params = Params {
        n,
        cols: 0,
        alpha,
        beta,
    };
    Dispatch {
        spec: &spec(entry),
        params: bytemuck::bytes_of(&params),
        buffers: &[a, b, &out],
        workgroups: grid_groups(a.device(), n.div_ceil(4) as usize),
    }
    .record(a.device())?;
    Ok(out)
}

/// `alpha·a + beta·b` (same shape, same rank).
pub fn axpby(alpha: f32, a: &LocalTensor, beta: f32, b: &LocalTensor) -> Result<LocalTensor> {
    run("axpby", "axpby", a, b, alpha, beta)
}

/// `a + b`.
pub fn add(a: &LocalTensor, b: &LocalTensor) -> Result<LocalTensor> {
    run("axpby", "add", a, b, 1.0, 1.0)
}

/// `a += b` in place, with [`add`]'s bits (same shape, f32, same rank,
/// blocked alike). The caller makes sure nothing else holds `a`'s buffers
/// ([`LocalTensor::is_sole_owner`]): every holder would see the sum.
pub(crate) fn add_assign(a: &LocalTensor, b: &LocalTensor) -> Result<()> {
    const OP: &str = "add_assign";
    a.expect_dtype(OP, DType::F32)?;
    b.expect_dtype(OP, DType::F32)?;
    a.same_rank(OP, b)?;
    let blocks = |t: &LocalTensor| t.blocks().iter().map(|b| b.len()).collect::<Vec<_>>();
    if a.shape() != b.shape() || blocks(a) != blocks(b) {
        return Err(Error::shape(OP, a.shape(), b.shape()));
    }
    for (a, b) in a.blocks().iter().zip(b.blocks()) {
        let n =
            u32::try_from(a.len()).map_err(|_| Error::invalid(OP, "more than 2^32 elements"))?;
        let params = Params {
            n,
            cols: 0,
            alpha: 1.0,
            beta: 1.0,
        };
        Dispatch {
            spec: &spec("axpby_in_place"),
            params: bytemuck::bytes_of(&params),
            buffers: &[b, b, a],
            workgroups: grid_groups(a.device(), n.div_ceil(4) as usize),
        }
        .record(a.device())?;
    }
    Ok(())
}

/// `a ⊙ b`, element by element (same shape, same rank).
pub fn mul(a: &LocalTensor, b: &LocalTensor) -> Result<LocalTensor> {
    run("mul", "mul", a, b, 1.0, 0.0)
}

/// `alpha·a`.
pub fn scale(a: &LocalTensor, alpha: f32) -> Result<LocalTensor> {
    run("axpby", "scale", a, a, alpha, 0.0)
}

/// `act(x)`.
pub fn activation(x: &LocalTensor, act: Activation) -> Result<LocalTensor> {
    let entry = match act {
        Activation::Gelu => "gelu",
        Activation::Relu => "relu",
        Activation::Silu => "silu",
    };
    run(entry, "activation", x, x, 0.0, 0.0)
}

/// `dy · act'(x)`, where `x` is the activation's input.
pub fn activation_backward(
    x: &LocalTensor,
    dy: &LocalTensor,
    act: Activation,
) -> Result<LocalTensor> {
    let entry = match act {
        Activation::Gelu => "gelu_backward",
        Activation::Relu => "relu_backward",
        Activation::Silu => "silu_backward",
    };
    run(entry, "activation_backward", x, dy, 0.0, 0.0)
}

/// `cap · tanh(x / cap)`: logits soft-capped at ±`cap` (Gemma 2).
pub fn softcap(x: &LocalTensor, cap: f32) -> Result<LocalTensor> {
    run("softcap", "softcap", x, x, cap, 0.0)
}

/// `dy · (1 − tanh²(x / cap))`: [`softcap`]'s backward at its input `x`.
pub fn softcap_backward(x: &LocalTensor, dy: &LocalTensor, cap: f32) -> Result<LocalTensor> {
    run("softcap_backward", "softcap_backward", x, dy, cap, 0.0)
}

/// `a[i, j] + b[j]`: a bias row `b` (`[cols]`) added to every row of `a` (`[.., cols]`).
pub fn add_row(a: &LocalTensor, b: &LocalTensor) -> Result<LocalTensor> {
    map_blocks("add_row", &[a], |p| add_row_one(p[0], b))
}

/// `(a[i, j] + b[j]) + res[i, j]`: [`add_row`] and then [`add`] of `res`
/// (same shape as `a`) in one kernel, with the same bits.
pub fn add_row_add(a: &LocalTensor, b: &LocalTensor, res: &LocalTensor) -> Result<LocalTensor> {
    if a.shape() != res.shape() {
        return Err(Error::shape("add_row_add", a.shape(), res.shape()));
    }
    map_blocks("add_row_add", &[a, res], |p| {
        add_row_with(p[0], b, Some(p[1]))
    })
}

fn add_row_one(a: &LocalTensor, b: &LocalTensor) -> Result<LocalTensor> {
    add_row_with(a, b, None)
}

fn add_row_with(
    a: &LocalTensor,
    b: &LocalTensor,
    res: Option<&LocalTensor>,
) -> Result<LocalTensor> {
    const OP: &str = "add_row";
    if let Some(r) = res {
        r.expect_dtype(OP, DType::F32)?;
        a.same_rank(OP, r)?;
        if r.shape() != a.shape() {
            return Err(Error::shape(OP, a.shape(), r.shape()));
        }
    }
    a.expect_dtype(OP, DType::F32)?;
    b.expect_dtype(OP, DType::F32)?;
    a.same_rank(OP, b)?;
    let cols = a.shape().last().copied().unwrap_or(1);
    if b.shape() != [cols] {
        return Err(Error::shape(OP, [cols], b.shape()));
    }
    let n = u32::try_from(a.len()).map_err(|_| Error::invalid(OP, "more than 2^32 elements"))?;
    let out = a.rank().alloc(OP, a.shape(), DType::F32)?;
    let params = Params {
        n,
        cols: cols.max(1) as u32,
        alpha: 1.0,
        beta: 1.0,
    };
    let (entry, bindings) = match res {
        None => (spec("add_row"), vec![a, b, &out]),
        Some(r) => (
            KernelSpec::new("elementwise", SOURCE, BINDINGS_RES, "add_row_add").in_vec4s(),
            vec![a, b, &out, r],
        ),
    };
    Dispatch {
        spec: &entry,
        params: bytemuck::bytes_of(&params),
        buffers: &bindings,
        workgroups: grid_groups(a.device(), n.div_ceil(4) as usize),
    }
    .record(a.device())?;
    Ok(out)
}
