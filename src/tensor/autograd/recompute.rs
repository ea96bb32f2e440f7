//! Activation recomputation (gradient checkpointing): [`DTensor::recomputed`]
//! runs a function forward without recording, keeping only its input, and
//! runs it again, recorded, when backward reaches it.

use std::sync::{Arc, Mutex};

use super::engine;
use super::mode::{GradGuard, is_grad_enabled, no_grad};
use super::node::next_seq;
use super::tape::Node;
use crate::error::Result;
use crate::tensor::DTensor;

impl DTensor {
    /// `f(self)`, recomputed in backward: the forward runs with recording
    /// off and keeps only `self`; when backward reaches the result, `f`
    /// runs again with recording on and that graph's backward runs at once
    /// from the gradient received, giving the parameters `f` uses their
    /// gradients (as if recorded the first time: the same operations in the
    /// same order) and `self` its gradient. `track`: the result is
    /// recorded even when `self` is not (f uses trainable parameters of
    /// its own). Memory between forward and backward: `self` and the
    /// result, not `f`'s intermediates. `f` must compute the same both
    /// times (dropout masks keyed on a step, not drawn afresh).
    pub fn recomputed<F>(&self, track: bool, f: F) -> Result<DTensor>
    where
        F: FnOnce(&DTensor) -> Result<DTensor> + Clone + Send + 'static,
    {
        if !is_grad_enabled() || !(track || self.is_tracked()) {
            return f(self);
        }
        let again = f.clone();
        let y = no_grad(|| f(&self.detach()))?;
        let saved = self.detach();
        let wants_dx = self.is_tracked();
        let vjp = move |dy: &DTensor| -> Result<Vec<Option<DTensor>>> {
            let (x, y) = {
                let _on = GradGuard::new();
                let x = if wants_dx {
                    saved.requires_grad()
                } else {
                    saved
                };
                let y = again(&x)?;
                (x, y)
            };
            if let Some(node) = y.node() {
                engine::run(node, dy.clone())?;
            }
            Ok(vec![if wants_dx { x.grad() } else { None }])
        };
        let node = Arc::new(Node {
            seq: next_seq(),
            op: "DTensor::recomputed",
            dtype: y.dtype(),
            placement: y.placement(),
            parents: vec![self.node().cloned()],
            vjp: Mutex::new(Some(Box::new(vjp))),
            slot: None,
        });
        Ok(y.with_node(Some(node)))
    }
}
