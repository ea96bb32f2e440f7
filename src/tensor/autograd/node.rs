//! The tape: every recorded operation is a [`Node`] holding its inputs'
//! nodes and the vector–Jacobian product (VJP) that maps the gradient of its
//! output to the gradients of its inputs. Leaves (parameters, tensors made
//! with [`DTensor::requires_grad`]) hold a [`GradSlot`] instead.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::mode::{NoGradGuard, is_grad_enabled};
use crate::element::DType;
use crate::error::Result;
use crate::tensor::{DTensor, Placement};

/// Gradient of an operation's output → gradients of its inputs, in the order
/// the inputs were given (`None` where an input gets no gradient).
pub(crate) type Vjp = Box<dyn FnOnce(&DTensor) -> Result<Vec<Option<DTensor>>> + Send>;

/// Where a leaf's gradient accumulates; shared by a parameter and its value.
#[derive(Clone, Default)]
pub(crate) struct GradSlot(Arc<Mutex<Option<DTensor>>>);

impl fmt::Debug for GradSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.get() {
            Some(g) => write!(f, "GradSlot({:?} {:?})", g.shape(), g.placement()),
            None => f.write_str("GradSlot(None)"),
        }
    }
}

impl GradSlot {
    fn lock(&self) -> MutexGuard<'_, Option<DTensor>> {
        // A panic while the lock was held leaves a whole tensor or none.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The gradient so far.
    pub(crate) fn get(&self) -> Option<DTensor> {
        self.lock().clone()
    }

    /// Replace the gradient.
    pub(crate) fn set(&self, g: Option<DTensor>) {
        *self.lock() = g;
    }

    /// `grad += g` (placed alike), or `grad = g` when there is none.
    pub(crate) fn accumulate(&self, g: DTensor) -> Result<()> {
        let mut slot = self.lock();
        let sum = match slot.as_ref() {
            None => g,
            Some(old) if super::accumulate::add_in_place(old, &g)? => return Ok(()),
            Some(old) => super::accumulate::sum(old, &g)?,
        };
        *slot = Some(sum);
        Ok(())
    }
}

/// One recorded operation, or a leaf.
pub(crate) struct Node {
    /// Creation order: a node's inputs were made before it.
    pub(super) seq: u64,
    pub(super) op: &'static str,
    pub(super) dtype: DType,
    pub(super) placement: Placement,
    pub(super) parents: Vec<Option<Arc<Node>>>,
    /// Taken by the backward pass that runs it.
    pub(super) vjp: Mutex<Option<Vjp>>,
    pub(super) slot: Option<GradSlot>,
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Node")
            .field("op", &self.op)
            .field("seq", &self.seq)
            .field("leaf", &self.slot.is_some())
            .finish()
    }
}

fn next_seq() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl Node {
    /// A leaf whose gradient goes to `slot`.
    pub(crate) fn leaf(dtype: DType, placement: Placement, slot: GradSlot) -> Arc<Node> {
        Arc::new(Node {
            seq: next_seq(),
            op: "leaf",
            dtype,
            placement,
            parents: Vec::new(),
            vjp: Mutex::new(None),
            slot: Some(slot),
        })
    }

    pub(super) fn take_vjp(&self) -> Option<Vjp> {
        self.vjp.lock().unwrap_or_else(|e| e.into_inner()).take()
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
