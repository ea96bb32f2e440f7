//! The tape's data: every recorded operation is a [`TapeNode`] holding its
//! inputs' nodes and the vector–Jacobian product (VJP) that maps the
//! gradient of its output to the gradients of its inputs. Leaves
//! (parameters, tensors made with `DTensor::requires_grad`) hold a [`Slot`]
//! instead. Generic over the tensor `T` so that the tensor, which holds its
//! node, and the node, which holds tensors, need not import each other:
//! `tape.rs` fixes `T` to `DTensor` and records.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::element::DType;
use crate::error::Result;
use crate::tensor::placement::Placement;

/// Gradient of an operation's output → gradients of its inputs, in the order
/// the inputs were given (`None` where an input gets no gradient).
pub(crate) type Vjp<T> = Box<dyn FnOnce(&T) -> Result<Vec<Option<T>>> + Send>;

/// Where a leaf's gradient accumulates; shared by a parameter and its value.
pub(crate) struct Slot<T>(Arc<Mutex<Option<T>>>);

impl<T> Clone for Slot<T> {
    fn clone(&self) -> Self {
        Slot(Arc::clone(&self.0))
    }
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Slot(Arc::new(Mutex::new(None)))
    }
}

impl<T: Clone> Slot<T> {
    pub(super) fn lock(&self) -> MutexGuard<'_, Option<T>> {
        // A panic while the lock was held leaves a whole tensor or none.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The gradient so far.
    pub(crate) fn get(&self) -> Option<T> {
        self.lock().clone()
    }

    /// Replace the gradient.
    pub(crate) fn set(&self, g: Option<T>) {
        *self.lock() = g;
    }
}

/// One recorded operation, or a leaf.
pub(crate) struct TapeNode<T> {
    /// Creation order: a node's inputs were made before it.
    pub(super) seq: u64,
    pub(super) op: &'static str,
    pub(super) dtype: DType,
    pub(super) placement: Placement,
    pub(super) parents: Vec<Option<Arc<TapeNode<T>>>>,
    /// Taken by the backward pass that runs it.
    pub(super) vjp: Mutex<Option<Vjp<T>>>,
    pub(super) slot: Option<Slot<T>>,
}

impl<T> fmt::Debug for TapeNode<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Node")
            .field("op", &self.op)
            .field("seq", &self.seq)
            .field("leaf", &self.slot.is_some())
            .finish()
    }
}

/// The next node's creation number.
pub(super) fn next_seq() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl<T> TapeNode<T> {
    /// A leaf whose gradient goes to `slot`.
    pub(crate) fn leaf(dtype: DType, placement: Placement, slot: Slot<T>) -> Arc<TapeNode<T>> {
        Arc::new(TapeNode {
            seq: next_seq(),
            op: "leaf",
            dtype,
            placement,
            parents: Vec::new(),
            vjp: Mutex::new(None),
            slot: Some(slot),
        })
    }

    pub(super) fn take_vjp(&self) -> Option<Vjp<T>> {
        self.vjp.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}
