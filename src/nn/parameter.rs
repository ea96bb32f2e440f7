//! [`Parameter`]: a trainable distributed tensor, its gradient, and how its
//! master (full, serial) value maps onto shards, including `stride` for fused
//! weights and a shard `unit` for keeping whole attention heads on a rank.
//! [`Params`](super::Params) lists a layer's parameters by name.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};

use super::held::Held;

mod dtype;
mod quant;
use crate::device::{Mesh, block_on};
use crate::error::{Error, Result};
use crate::shard::{outer_dim_inner, split_range_in_units};
use crate::tensor::{DTensor, GradSlot, Holding, Node, Placement};

/// A trainable tensor sharded like its layer says, with its gradient.
///
/// Its value is a leaf of the autodiff tape: operations on it record
/// themselves, and [`DTensor::backward`] adds into [`Parameter::grad`].
#[derive(Debug)]
pub struct Parameter {
    /// The value, tracked by the tape. Replace it with
    /// [`Parameter::load_master`]; a tensor assigned here directly is not
    /// tracked, so no gradient reaches this parameter through it.
    pub value: DTensor,
    /// The accumulated gradient (placed like `value`), `None` after zero-grad;
    /// shared with the value's leaf node.
    slot: GradSlot,
    /// Fused-weight stride: the master is cut into `stride` blocks along the
    /// shard dim and each block is split over the ranks (Megatron's `stride`).
    stride: usize,
    /// Each block is split in whole units of this many entries (1, or
    /// `head_dim` so a rank holds whole heads).
    unit: usize,
    /// Who this parameter is, for optimiser state: names repeat across
    /// modules (`weight`), identities do not.
    id: ParamId,
    /// Rows held by several ranks: the value is the expanded tensor.
    held: Option<Held>,
    /// Frozen: the value is not a tape leaf, so no gradient is computed for
    /// it and optimisers skip it (a LoRA base).
    frozen: bool,
}

/// A parameter's identity: unique per [`Parameter`] created in this process,
/// kept by clones (which share its buffers) and by [`Parameter::load_master`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ParamId(u64);

impl ParamId {
    fn fresh() -> ParamId {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        ParamId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// Row order of a strided split: entry i of the rank-contiguous layout is
/// entry `order[i]` of the master along the shard dim. Rank r holds, for each
/// of the `stride` blocks, its uneven-split slice (in whole units of `unit`)
/// of that block.
fn strided_order(n: usize, stride: usize, unit: usize, p: usize) -> Vec<usize> {
    let block = n / stride;
    let mut order = Vec::with_capacity(n);
    for r in 0..p {
        let range = split_range_in_units(block, p, r, unit);
        for k in 0..stride {
            order.extend(range.clone().map(|j| k * block + j));
        }
    }
    order
}

/// Move rows along `dim`: `out[.., i, ..] = src[.., order[i], ..]`, or the
/// inverse when `inverse`.
fn reorder(src: &[f32], shape: &[usize], dim: usize, order: &[usize], inverse: bool) -> Vec<f32> {
    let (outer, d, inner) = outer_dim_inner(shape, dim);
    let mut out = vec![0.0; src.len()];
    for o in 0..outer {
        for (i, &j) in order.iter().enumerate() {
            let (to, from) = if inverse { (j, i) } else { (i, j) };
            let t = (o * d + to) * inner;
            let f = (o * d + from) * inner;
            out[t..t + inner].copy_from_slice(&src[f..f + inner]);
        }
    }
    out
}

/// Reorder a master tensor so each rank's blocks of a strided split are
/// contiguous (`inverse`: back to the master order). Stride 1 is the identity.
fn strided(
    data: &[f32],
    shape: &[usize],
    dim: usize,
    (stride, unit): (usize, usize),
    p: usize,
    inverse: bool,
) -> Vec<f32> {
    if stride == 1 {
        return data.to_vec();
    }
    let order = strided_order(shape[dim], stride, unit, p);
    reorder(data, shape, dim, &order, inverse)
}

impl Parameter {
    /// Shard a host master value of `shape` over `mesh` with `placement`
    /// (`Shard(d)` with `stride` ≥ 1, or `Replicate`).
    pub fn from_master(
        mesh: &Mesh,
        shape: &[usize],
        master: &[f32],
        placement: Placement,
        stride: usize,
    ) -> Result<Parameter> {
        Self::from_master_in_units(mesh, shape, master, placement, stride, 1)
    }

    /// [`Parameter::from_master`] where each of the `stride` blocks is split
    /// in whole units of `unit` entries (e.g. `head_dim`, so every rank holds
    /// whole heads; the first ranks take one more, and a rank may hold none).
    /// The sharded dim must be a multiple of `stride × unit`.
    pub fn from_master_in_units(
        mesh: &Mesh,
        shape: &[usize],
        master: &[f32],
        placement: Placement,
        stride: usize,
        unit: usize,
    ) -> Result<Parameter> {
        const OP: &str = "Parameter::from_master";
        if stride == 0 || unit == 0 {
            return Err(Error::invalid(OP, "stride and unit must be at least 1"));
        }
        let want = shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| Error::invalid(OP, format!("shape {shape:?} overflows usize")))?;
        // Before the strided reorder, which indexes the master by `shape`.
        check_master(OP, "the master value", master.len(), want)?;
        let data = match placement {
            Placement::Shard(d) => {
                let n = shape.get(d).copied().unwrap_or(0);
                if !n.is_multiple_of(stride * unit) {
                    return Err(Error::invalid(
                        OP,
                        format!(
                            "dim {d} of size {n} must be a multiple of stride ({stride}) × unit ({unit})"
                        ),
                    ));
                }
                strided(master, shape, d, (stride, unit), mesh.size(), false)
            }
            _ => master.to_vec(),
        };
        // Rank r's blocks are contiguous now: `stride` slices of whole units.
        let value = DTensor::from_host_in_units(mesh, shape, &data, placement, stride * unit)?;
        Ok(Parameter::from_value(value, stride, unit))
    }

    /// A parameter holding `value`, whose `Shard` dim is split in `stride`
    /// sections of whole `unit`s (each rank's blocks contiguous, in units of
    /// `stride × unit`, as [`Parameter::from_master_in_units`] stores them).
    pub(crate) fn from_value(value: DTensor, stride: usize, unit: usize) -> Parameter {
        let slot = GradSlot::default();
        Parameter {
            value: tracked(value, &slot),
            slot,
            stride,
            unit,
            id: ParamId::fresh(),
            held: None,
            frozen: false,
        }
    }

    /// A parameter of logical `shape` whose dim-0 rows are held as
    /// `holding` says (several ranks may hold one row), from its expanded
    /// `value` (`[P·per, …]`, `Shard(0)` in units of `per`). Its gradient
    /// should come through [`DTensor::share_replicas`], so the copies stay
    /// equal; `master`, `load_master` and checkpoints use the logical form.
    pub(crate) fn held(value: DTensor, holding: Holding, shape: &[usize]) -> Parameter {
        let per = holding.per;
        let mut p = Parameter::from_value(value, 1, per);
        p.held = Some(Held {
            holding,
            shape: shape.to_vec(),
        });
        p
    }

    /// How this parameter's rows are held, for a held parameter.
    pub fn holding(&self) -> Option<&Holding> {
        self.held.as_ref().map(|h| &h.holding)
    }

    /// The accumulated gradient (placed like the value), `None` before the
    /// first backward pass and after [`Parameter::zero_grad`].
    pub fn grad(&self) -> Option<DTensor> {
        self.slot.get()
    }

    /// Replace the gradient (shaped and placed like the value, else an error).
    pub fn set_grad(&mut self, grad: Option<DTensor>) -> Result<()> {
        let want = self.value.shape();
        if let Some(g) = grad.as_ref().filter(|g| g.shape() != want) {
            return Err(Error::shape("Parameter::set_grad", want, g.shape()));
        }
        // Later passes add into it shard by shard.
        if let Some(g) = grad
            .as_ref()
            .filter(|g| g.placement() != self.value.placement())
        {
            return Err(Error::invalid(
                "Parameter::set_grad",
                format!(
                    "the gradient is placed {:?}, the value {:?}: redistribute it first",
                    g.placement(),
                    self.value.placement()
                ),
            ));
        }
        self.slot.set(grad.map(|g| g.detach()));
        Ok(())
    }

    /// The logical shape (the master's; a held parameter's value is larger).
    pub fn shape(&self) -> &[usize] {
        match &self.held {
            Some(h) => &h.shape,
            None => self.value.shape(),
        }
    }

    /// The full (serial) value on the host, undoing any stride.
    pub fn master(&self) -> Result<Vec<f32>> {
        block_on("Parameter::master", self.master_async())
    }

    /// [`Parameter::master`] as a future.
    pub async fn master_async(&self) -> Result<Vec<f32>> {
        self.to_master(&self.value).await
    }

    /// The full gradient on the host (`None` if no gradient yet).
    pub fn master_grad(&self) -> Result<Option<Vec<f32>>> {
        block_on("Parameter::master_grad", self.master_grad_async())
    }

    /// [`Parameter::master_grad`] as a future.
    pub async fn master_grad_async(&self) -> Result<Option<Vec<f32>>> {
        match self.grad() {
            Some(g) => Ok(Some(self.to_master(&g).await?)),
            None => Ok(None),
        }
    }

    /// Gather `t` (placed like the value) and undo the stride permutation.
    async fn to_master(&self, t: &DTensor) -> Result<Vec<f32>> {
        let v = t.to_host_async().await?;
        if let Some(h) = &self.held {
            return Ok(h.to_master(&v));
        }
        Ok(match t.placement() {
            Placement::Shard(d) => {
                let split = (self.stride, self.unit);
                strided(&v, self.shape(), d, split, t.mesh().size(), true)
            }
            _ => v,
        })
    }

    /// `t`, laid out like the value (a gradient, optimiser state), as a
    /// master on the host.
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn master_of(&self, t: &DTensor) -> Result<Vec<f32>> {
        block_on("Parameter::master_of", self.to_master(t))
    }

    /// An f32 tensor laid out like the value, holding the master `master`
    /// (optimiser state read back, a value that could not be overwritten).
    pub(crate) fn laid_out(&self, master: &[f32]) -> Result<DTensor> {
        const OP: &str = "Parameter::laid_out";
        check_master(
            OP,
            "the master value",
            master.len(),
            self.shape().iter().product(),
        )?;
        if let Some(h) = &self.held {
            return h.upload(self.value.mesh(), master);
        }
        let p = Parameter::from_master_in_units(
            self.value.mesh(),
            self.shape(),
            master,
            self.value.placement(),
            self.stride,
            self.unit,
        )?;
        Ok(p.value.detach())
    }

    /// Overwrite the value from a host master (checkpoint loading), in the
    /// value's own buffers where it can (f32 shards of this rank alone), so
    /// loading needs no second copy of the model on the devices: clones of
    /// this parameter (and views of its value) see the new values too. On
    /// error nothing changes.
    pub fn load_master(&mut self, master: &[f32]) -> Result<()> {
        const OP: &str = "Parameter::load_master";
        let shape = self.shape();
        check_master(OP, "the master value", master.len(), shape.iter().product())?;
        if let Some(h) = &self.held {
            if !self
                .value
                .overwrite_from_host_in_units(OP, &h.expand(master), self.unit)?
            {
                let fresh = self.laid_out(master)?.cast(self.value.dtype())?;
                self.value = self.track(fresh);
            }
            return Ok(());
        }
        // Rank-contiguous blocks, as `from_master_in_units` uploads them.
        let data = match self.value.placement() {
            Placement::Shard(d) if self.stride != 1 => {
                let split = (self.stride, self.unit);
                Cow::Owned(strided(
                    master,
                    shape,
                    d,
                    split,
                    self.value.mesh().size(),
                    false,
                ))
            }
            _ => Cow::Borrowed(master),
        };
        let unit = self.stride * self.unit;
        if self.value.overwrite_from_host_in_units(OP, &data, unit)? {
            return Ok(());
        }
        // A value kept in bf16 / f16 stays so (narrowed on the device).
        let fresh = self.laid_out(master)?.cast(self.value.dtype())?;
        self.value = self.track(fresh);
        Ok(())
    }

    /// Give the value a buffer per rank before an in-place update: a value
    /// that came from a replicated collective on a shared-device mesh shares
    /// one buffer between ranks, and updating it would update every rank at
    /// once. Copies only such shards; on error nothing changes.
    pub(crate) fn own_buffers(&mut self) -> Result<()> {
        if let Some(value) = self.value.owning_buffers()? {
            self.value = self.track(value);
        }
        Ok(())
    }

    /// Add a gradient (same placement and shape) into [`Parameter::grad`].
    pub fn accumulate_grad(&mut self, g: DTensor) -> Result<()> {
        if g.shape() != self.value.shape() {
            return Err(Error::shape(
                "Parameter::accumulate_grad",
                self.value.shape(),
                g.shape(),
            ));
        }
        self.slot.accumulate(g.detach())
    }

    /// Drop the gradient.
    pub fn zero_grad(&mut self) {
        self.slot.set(None);
    }

    /// Fused-weight stride.
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// This parameter's identity (optimisers key their state by it).
    pub fn id(&self) -> ParamId {
        self.id
    }

    /// Freeze the value: operations on it are no longer recorded, so no
    /// gradient is computed for it (gradients still flow through it to
    /// its inputs), optimisers give it no state, and its gradient is
    /// dropped. What a LoRA base is.
    pub fn freeze(&mut self) {
        self.frozen = true;
        self.slot.set(None);
        self.value = self.value.detach();
    }

    /// Make a frozen parameter trainable again (a no-op otherwise).
    pub fn unfreeze(&mut self) {
        self.frozen = false;
        self.value = tracked(self.value.detach(), &self.slot);
    }

    /// Another handle to this parameter: the same value, identity and
    /// gradient slot (unlike a clone, whose gradient is its own), so what
    /// is recorded on it reaches this parameter's gradient: how a block is
    /// recomputed in backward.
    pub(crate) fn alias(&self) -> Parameter {
        Parameter {
            value: self.value.clone(),
            slot: self.slot.clone(),
            stride: self.stride,
            unit: self.unit,
            id: self.id,
            held: self.held.clone(),
            frozen: self.frozen,
        }
    }

    /// Whether [`Parameter::freeze`] froze it.
    pub fn is_frozen(&self) -> bool {
        self.frozen
    }

    /// `value` as this parameter's: a tape leaf, or untracked when frozen.
    pub(crate) fn track(&self, value: DTensor) -> DTensor {
        if self.frozen {
            value.detach()
        } else {
            tracked(value, &self.slot)
        }
    }

    /// The value re-made as [`Parameter::track`] says (after a clone).
    fn retracked(mut self) -> Self {
        if self.frozen {
            self.value = self.value.detach();
        }
        self
    }
}

/// `value` as a tape leaf whose gradient goes to `slot`.
fn tracked(value: DTensor, slot: &GradSlot) -> DTensor {
    let node = Node::leaf(value.dtype(), value.placement(), slot.clone());
    value.with_node(Some(node))
}

impl Clone for Parameter {
    /// Shares the value's buffers and the identity; the clone's gradient
    /// starts as a copy of this one's and accumulates on its own.
    fn clone(&self) -> Self {
        let slot = GradSlot::default();
        slot.set(self.grad());
        Parameter {
            value: tracked(self.value.clone(), &slot),
            slot,
            stride: self.stride,
            unit: self.unit,
            id: self.id,
            held: self.held.clone(),
            frozen: self.frozen,
        }
        .retracked()
    }
}

/// A master value of the wrong length is an error naming `what` it is.
pub(crate) fn check_master(op: &'static str, what: &str, got: usize, want: usize) -> Result<()> {
    if got != want {
        return Err(Error::invalid(
            op,
            format!("{what} has {got} values, expected {want}"),
        ));
    }
    Ok(())
}
