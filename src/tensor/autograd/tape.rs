//! Recording on the tape: [`record`] runs an operation's forward and, when
//! an input is tracked, keeps its VJP in a node ([`Node`], the tape's node
//! for [`DTensor`]); a leaf's [`GradSlot`] sums what backward gives it; and
//! the placements a gradient takes ([`placed`], [`linear_dy`]).

use std::fmt;
use std::sync::{Arc, Mutex};

use super::accumulate;
use super::mode::{NoGradGuard, is_grad_enabled};
use super::node::{Slot, TapeNode, next_seq};
use crate::error::Result;
use crate::tensor::{DTensor, Placement};

/// A node of the tape over [`DTensor`]s.
pub(crate) type Node = TapeNode<DTensor>;

/// Where a leaf's gradient accumulates; shared by a parameter and its value.
pub(crate) type GradSlot = Slot<DTensor>;

impl fmt::Debug for Slot<DTensor> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.get() {
            Some(g) => write!(f, "GradSlot({:?} {:?})", g.shape(), g.placement()),
            None => f.write_str("GradSlot(None)"),
        }
    }
}

impl Slot<DTensor> {
    /// `grad += g` (placed alike), or `grad = g` when there is none.
    pub(crate) fn accumulate(&self, g: DTensor) -> Result<()> {
        let mut slot = self.lock();
        let sum = match slot.as_ref() {
            None => g,
            Some(old) if accumulate::add_in_place(old, &g)? => return Ok(()),
            Some(old) => accumulate::sum(old, &g)?,
        };
        *slot = Some(sum);
        Ok(())
    }
}

thread_local! {
    static TAPED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the forward of a recorded operation (and what it calls) while it
/// runs, restoring the previous mark on drop.
struct TapedForward(bool);

impl TapedForward {
    fn enter(track: bool) -> TapedForward {
        TapedForward(TAPED.with(|t| t.replace(t.get() || track)))
    }
}

impl Drop for TapedForward {
    fn drop(&mut self) {
        TAPED.with(|t| t.set(self.0));
    }
}

/// Whether the forward of a recorded operation is running on this thread
/// (inside one, directly or in what it calls). Replicated operations run
/// once for every rank only outside such forwards (`tensor/aliased.rs`):
/// training keeps one computation per rank, so its first step does what
/// every later one does.
pub(crate) fn in_taped_forward() -> bool {
    TAPED.with(|t| t.get())
}

/// Whether an operation on `inputs` records itself: grad mode is on and at
/// least one input is tracked. Operations that compute something only
/// backward needs skip it when this is false.
pub(crate) fn tracking(inputs: &[&DTensor]) -> bool {
    is_grad_enabled() && inputs.iter().any(|x| x.node().is_some())
}

/// Runs `forward` with recording off (what it calls inside is one
/// operation) and, when [`tracking`], records the VJP it returns, with
/// `inputs` as the VJP's inputs in that order.
pub(crate) fn record<V>(
    op: &'static str,
    inputs: &[&DTensor],
    forward: impl FnOnce() -> Result<(DTensor, V)>,
) -> Result<DTensor>
where
    V: FnOnce(&DTensor) -> Result<Vec<Option<DTensor>>> + Send + 'static,
{
    let track = tracking(inputs);
    let (y, vjp) = {
        let _off = NoGradGuard::new();
        let _taped = TapedForward::enter(track);
        forward()?
    };
    if !track {
        return Ok(y);
    }
    let node = Arc::new(Node {
        seq: next_seq(),
        op,
        dtype: y.dtype(),
        placement: y.placement(),
        parents: inputs.iter().map(|x| x.node().cloned()).collect(),
        vjp: Mutex::new(Some(Box::new(vjp))),
        slot: None,
    });
    Ok(y.with_node(Some(node)))
}

/// `y`, made from no tracked input (a tensor received from another
/// pipeline stage), as a tracked source when grad mode is on: backward
/// hands its gradient to `vjp` (which passes it on, out of this tape)
/// and goes no further.
pub(crate) fn record_source<V>(op: &'static str, y: DTensor, vjp: V) -> DTensor
where
    V: FnOnce(&DTensor) -> Result<()> + Send + 'static,
{
    if !is_grad_enabled() {
        return y;
    }
    let node = Arc::new(Node {
        seq: next_seq(),
        op,
        dtype: y.dtype(),
        placement: y.placement(),
        parents: Vec::new(),
        vjp: Mutex::new(Some(Box::new(move |dy: &DTensor| {
            vjp(dy).map(|()| Vec::new())
        }))),
        slot: None,
    });
    y.with_node(Some(node))
}

/// How the gradient of a tensor placed `p` is placed: like it, except that
/// a partial sum's gradient is the sum's, the same on every rank.
pub(crate) fn grad_placement(p: Placement) -> Placement {
    match p {
        Placement::Partial(_) => Placement::Replicate,
        p => p,
    }
}

/// `dy` placed as the gradient of a tensor placed `placement` is
/// ([`grad_placement`]: a partial gradient reduced, a gradient of another
/// placement moved), for VJPs that act element by element.
pub(crate) fn placed(dy: &DTensor, placement: Placement) -> Result<DTensor> {
    let placement = grad_placement(placement);
    if dy.placement() == placement {
        Ok(dy.clone())
    } else if dy.mesh().size() == 1 {
        Ok(dy.with_shards(dy.shards().to_vec(), dy.shape().to_vec(), placement))
    } else {
        dy.redistribute(placement)
    }
}

/// For a VJP that is linear in `dy` and acts shard by shard: `dy` as it came
/// when it is a partial sum (each rank's share stays a share, reduced later,
/// once), else [`placed`] as the gradient of a tensor placed `from`; with
/// the placement the result of acting on it has.
pub(crate) fn linear_dy(dy: &DTensor, from: Placement) -> Result<(DTensor, Placement)> {
    let sum = Placement::Partial(crate::element::ReduceOp::Sum);
    if dy.placement() == sum && dy.mesh().size() > 1 {
        return Ok((dy.clone(), sum));
    }
    Ok((placed(dy, from)?, grad_placement(from)))
}
