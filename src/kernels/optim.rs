//! Optimiser kernels (`shaders/optim.wgsl`): SGD with momentum and weight
//! decay, and AdamW (decoupled weight decay, bias-corrected moments). They
//! update the parameter and its state buffers in place, so a step allocates
//! nothing.

use super::grid::{grid_groups, grid_source};
use crate::device::{Access, Dispatch, KernelSpec, LocalTensor, for_each_block};
use crate::element::DType;
use crate::error::{Error, Result};

const SOURCE: &str = grid_source!("optim.wgsl");
const BINDINGS: &[Access] = &[
    Access::Read,
    Access::ReadWrite,
    Access::ReadWrite,
    Access::ReadWrite,
];

#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    first_step: u32,
    lr: f32,
    weight_decay: f32,
    momentum: f32,
    beta2: f32,
    eps: f32,
    bias_c1: f32,
    bias_c2: f32,
    _pad: [f32; 3],
}

fn spec(entry: &'static str) -> KernelSpec {
    KernelSpec::new("optim", SOURCE, BINDINGS, entry).in_vec4s()
}

fn check(op: &'static str, param: &LocalTensor, others: &[&LocalTensor]) -> Result<u32> {
    param.expect_dtype(op, DType::F32)?;
    for t in others {
        t.expect_dtype(op, DType::F32)?;
        param.same_rank(op, t)?;
        if t.shape() != param.shape() {
            return Err(Error::shape(op, param.shape(), t.shape()));
        }
    }
    u32::try_from(param.len()).map_err(|_| Error::invalid(op, "more than 2^32 elements"))
}

/// Tensors these kernels write in place must not share their buffer with
/// another rank's tensor (replicated collective results on a shared-device
/// mesh do): the update would land on every rank at once.
fn check_writable(op: &'static str, written: &[&LocalTensor]) -> Result<()> {
    match written.iter().find(|t| t.is_shared_across_ranks()) {
        Some(t) => Err(Error::invalid(
            op,
            format!(
                "rank {}'s tensor shares its buffer with other ranks (a replicated collective \
                 result on a shared-device mesh); update a `deep_copy()` of it instead",
                t.rank_index()
            ),
        )),
        None => Ok(()),
    }
}

/// SGD settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdStep {
    /// Learning rate.
    pub lr: f32,
    /// Momentum μ (0 for plain SGD).
    pub momentum: f32,
    /// L2 weight decay added to the gradient.
    pub weight_decay: f32,
    /// Whether the momentum buffer is fresh (first step: buf = g).
    pub first_step: bool,
}

/// One SGD step in place on `param`, and on `momentum_buf` (same shape) when
/// μ ≠ 0. `spare` is a placeholder for the state slots SGD does not use (any
/// f32 tensor on the rank): binding one buffer to several writable slots is
/// aliasing that WebGPU implementations may reject, so every slot gets its own.
pub fn sgd_step(
    param: &LocalTensor,
    grad: &LocalTensor,
    momentum_buf: Option<&LocalTensor>,
    spare: [&LocalTensor; 2],
    s: SgdStep,
) -> Result<()> {
    const OP: &str = "sgd_step";
    if s.momentum != 0.0 && momentum_buf.is_none() {
        return Err(Error::invalid(OP, "momentum needs a momentum buffer"));
    }
    check(OP, param, &[grad])?;
    check_writable(OP, &[param])?;
    if let Some(b) = momentum_buf {
        check(OP, param, &[b])?;
        check_writable(OP, &[b])?;
    }
    for t in spare {
        t.expect_dtype(OP, DType::F32)?;
        param.same_rank(OP, t)?;
    }
    // Block by block for a parameter past one binding (state blocks alike).
    let mut operands = vec![grad, param];
    operands.extend(momentum_buf);
    for_each_block(OP, &operands, |p| {
        let n = p[1].len() as u32;
        let params = Params {
            n,
            first_step: u32::from(s.first_step),
            lr: s.lr,
            weight_decay: s.weight_decay,
            momentum: s.momentum,
            ..Default::default()
        };
        Dispatch {
            spec: &spec("sgd"),
            params: bytemuck::bytes_of(&params),
            buffers: &[p[0], p[1], p.get(2).copied().unwrap_or(spare[0]), spare[1]],
            workgroups: grid_groups(param.device(), n.div_ceil(4) as usize),
        }
        .record(param.device())
    })
}

/// AdamW settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWStep {
    /// Learning rate.
    pub lr: f32,
    /// β1.
    pub beta1: f32,
    /// β2.
    pub beta2: f32,
    /// ε.
    pub eps: f32,
    /// Decoupled weight decay.
    pub weight_decay: f32,
    /// Step number, from 1 (for bias correction).
    pub step: u32,
}

/// One AdamW step in place on `param`, `m` and `v`.
pub fn adamw_step(
    param: &LocalTensor,
    grad: &LocalTensor,
    m: &LocalTensor,
    v: &LocalTensor,
    s: AdamWStep,
) -> Result<()> {
    const OP: &str = "adamw_step";
    check(OP, param, &[grad, m, v])?;
    check_writable(OP, &[param, m, v])?;
    if s.step == 0 {
        return Err(Error::invalid(OP, "step counts from 1"));
    }
    // Block by block for a parameter past one binding (state blocks alike).
    for_each_block(OP, &[grad, param, m, v], |p| {
        let n = p[1].len() as u32;
        let params = Params {
            n,
            lr: s.lr,
            weight_decay: s.weight_decay,
            momentum: s.beta1,
            beta2: s.beta2,
            eps: s.eps,
            bias_c1: 1.0 - s.beta1.powi(s.step as i32),
            bias_c2: 1.0 - s.beta2.powi(s.step as i32),
            ..Default::default()
        };
        Dispatch {
            spec: &spec("adamw"),
            params: bytemuck::bytes_of(&params),
            buffers: &[p[0], p[1], p[2], p[3]],
            workgroups: grid_groups(param.device(), n.div_ceil(4) as usize),
        }
        .record(param.device())
    })
}
