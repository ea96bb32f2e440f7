//! Reverse-mode automatic differentiation over [`DTensor`].
//!
//! Operations on tracked tensors (a [`Parameter`](crate::nn::Parameter)'s
//! value, or a tensor made with [`DTensor::requires_grad`]) record
//! themselves while grad mode is on; [`DTensor::backward`] then runs their
//! vector–Jacobian products in reverse and adds the results into the
//! leaves' gradients (a parameter's [`grad`](crate::nn::Parameter::grad)),
//! summing where a value fans out. Each operation's VJP is the backward the
//! layers used to hand-write, communication included: the backward of a
//! [`Mapping`](crate::tensor::Mapping) is its conjugate collective
//! (Megatron's f / g), so a model's communication is the same whether its
//! backward is written out or taped.
//!
//! Nothing is recorded inside [`no_grad`] or for tensors no tracked input
//! reached, so generation and evaluation pay nothing for the tape. A graph
//! runs backward once: its saved tensors are freed as it goes.
//!
//! ```
//! # fn main() -> wgpu_tp::Result<()> {
//! use wgpu_tp::{DTensor, Mesh, Placement};
//! let mesh = Mesh::simulated(2)?;
//! let x = DTensor::from_host(&mesh, &[1, 2], &[1.0, 2.0], Placement::Replicate)?;
//! let w = DTensor::from_host(&mesh, &[2, 2], &[1.0, 0.0, 0.0, 3.0], Placement::Shard(0))?
//!     .requires_grad();
//! // y = x·wᵀ (column parallel), then all ranks' columns summed: [1·1 + 2·3].
//! let y = x.matmul(&w, true)?.sum_rows()?; // [2], Shard(0)
//! let loss = y.redistribute(Placement::Replicate)?; // placed for the seed
//! loss.backward_with(&DTensor::from_host(&mesh, &[2], &[1.0, 1.0], Placement::Replicate)?)?;
//! // d/dw_ij of Σ_i (x·wᵀ)_i = x_j for every row i.
//! assert_eq!(w.grad().unwrap().to_host()?, vec![1.0, 2.0, 1.0, 2.0]);
//! # Ok(()) }
//! ```

mod accumulate;
mod engine;
mod mode;
mod node;
mod recompute;
mod tape;

use std::sync::Arc;

pub use mode::{NoGradGuard, is_grad_enabled, no_grad};
pub(crate) use node::TapeNode;
pub(crate) use tape::{
    GradSlot, Node, grad_placement, in_taped_forward, linear_dy, placed, record, record_source,
    tracking,
};

use crate::error::{Error, Result};
use crate::tensor::DTensor;

impl DTensor {
    /// This tensor's node on the tape, if it is tracked.
    pub(crate) fn node(&self) -> Option<&Arc<Node>> {
        self.node.as_ref()
    }

    /// The same tensor (shared buffers) with `node` as its tape node.
    pub(crate) fn with_node(mut self, node: Option<Arc<Node>>) -> DTensor {
        self.node = node;
        self
    }

    /// A leaf of the tape sharing this tensor's buffers: operations on it
    /// record themselves, and [`DTensor::backward`] leaves its gradient in
    /// [`DTensor::grad`]. Each call makes a new leaf with no gradient yet.
    pub fn requires_grad(&self) -> DTensor {
        let slot = GradSlot::default();
        self.clone()
            .with_node(Some(Node::leaf(self.dtype(), self.placement(), slot)))
    }

    /// Whether operations on this tensor are recorded (it is a leaf, or an
    /// operation on tracked tensors made it while grad mode was on).
    pub fn is_tracked(&self) -> bool {
        self.node.is_some()
    }

    /// The same values, not tracked: nothing flows back through it.
    pub fn detach(&self) -> DTensor {
        self.clone().with_node(None)
    }

    /// The gradient accumulated in this leaf ([`DTensor::requires_grad`], or
    /// a parameter's value) by the backward passes so far; `None` for
    /// tensors that are not leaves or got no gradient yet.
    pub fn grad(&self) -> Option<DTensor> {
        self.node.as_ref()?.slot.as_ref()?.get()
    }

    /// Backward from a one-element tensor (a loss): its gradient is 1. Runs
    /// every recorded operation that led to it in reverse and adds the
    /// gradients into the leaves (parameters). Errors, changing no
    /// gradient, when nothing was recorded, the tensor has more than one
    /// element ([`DTensor::backward_with`]), or backward already ran
    /// through this graph.
    pub fn backward(&self) -> Result<()> {
        const OP: &str = "DTensor::backward";
        let n: usize = self.shape().iter().product();
        if n != 1 {
            return Err(Error::invalid(
                OP,
                format!(
                    "backward() starts from a one-element loss, this tensor is {:?}: reduce it \
                     to a loss, or pass its gradient to backward_with",
                    self.shape()
                ),
            ));
        }
        let seed = engine::ones_like(self)?;
        self.backward_with(&seed)
    }

    /// Backward with `dy` (shaped and placed like this tensor, or
    /// `Replicate` for a `Partial` one) as this tensor's gradient.
    pub fn backward_with(&self, dy: &DTensor) -> Result<()> {
        const OP: &str = "DTensor::backward";
        let node = self.node.as_ref().ok_or_else(|| {
            Error::invalid(
                OP,
                "nothing was recorded for this tensor: no tracked tensor (a parameter, or one \
                 made with requires_grad) led to it, or it was computed inside no_grad",
            )
        })?;
        if dy.shape() != self.shape() {
            return Err(Error::shape(OP, self.shape(), dy.shape()));
        }
        if !dy.mesh().same_as(self.mesh()) {
            return Err(Error::invalid(OP, "the gradient lives on another mesh"));
        }
        engine::run(node, dy.detach())
    }
}
