//! Whether operations record themselves: on by default, off inside
//! [`no_grad`] (generation, evaluation) and while a backward pass runs.
//! Per thread, as PyTorch's grad mode: a mesh is driven from one thread.

use std::cell::Cell;

thread_local! {
    static ENABLED: Cell<bool> = const { Cell::new(true) };
}

/// Whether operations on tracked tensors record themselves on this thread.
pub fn is_grad_enabled() -> bool {
    ENABLED.with(Cell::get)
}

/// Runs `f` with recording off: nothing it computes can be differentiated,
/// and nothing is kept for a backward pass (decoding pays nothing for the
/// tape). Nests; the previous mode comes back when `f` returns or panics.
///
/// ```
/// # fn main() -> wgpu_tp::Result<()> {
/// use wgpu_tp::{DTensor, Mesh, Placement, no_grad};
/// let mesh = Mesh::simulated(1)?;
/// let w = DTensor::from_host(&mesh, &[2], &[1.0, 2.0], Placement::Replicate)?.requires_grad();
/// let y = no_grad(|| w.scale(3.0))?;
/// assert!(!y.is_tracked());
/// assert!(w.scale(3.0)?.is_tracked());
/// # Ok(()) }
/// ```
pub fn no_grad<T>(f: impl FnOnce() -> T) -> T {
    let _guard = NoGradGuard::new();
    f()
}

/// Recording off until this guard drops (the scope form of [`no_grad`]).
#[derive(Debug)]
pub struct NoGradGuard {
    previous: bool,
}

impl NoGradGuard {
    /// Turns recording off on this thread until the guard is dropped.
    pub fn new() -> NoGradGuard {
        NoGradGuard {
            previous: ENABLED.with(|e| e.replace(false)),
        }
    }
}

impl Default for NoGradGuard {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for NoGradGuard {
    fn drop(&mut self) {
        ENABLED.with(|e| e.set(self.previous));
    }
}

/// Recording on until this guard drops: a backward pass (which runs with
/// recording off) records a recomputed forward under it.
#[derive(Debug)]
pub(crate) struct GradGuard {
    previous: bool,
}

impl GradGuard {
    /// Turns recording on on this thread until the guard is dropped.
    pub(crate) fn new() -> GradGuard {
        GradGuard {
            previous: ENABLED.with(|e| e.replace(true)),
        }
    }
}

impl Drop for GradGuard {
    fn drop(&mut self) {
        ENABLED.with(|e| e.set(self.previous));
    }
}
