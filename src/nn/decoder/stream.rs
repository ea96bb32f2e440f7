//! [`Stream`]: a decoder's residual stream, the one place where the fused
//! paths of a forward are chosen. Each block adds its branches to it
//! ([`Stream::branch`]); a branch's output is kept unfinished
//! ([`Branch::Row`]: a row-parallel product not yet summed) until the next
//! norm is known, so the sum, the branch's bias, the residual add and that
//! norm run in as few dispatches as the placement allows
//! ([`RowProduct::finish`]): on one rank in the product's store, on ranks
//! sharing a CPU adapter in the all-reduce's own pass. Each gives the bits
//! of the separate steps, so the stream is the same numbers either way.

use crate::error::Result;
use crate::nn::dropout::Dropout;
use crate::nn::norm::Normalize;
use crate::tensor::{DTensor, RowProduct};

/// What a residual branch gives the stream.
#[derive(Debug)]
pub enum Branch {
    /// A finished value, added to the stream as it is (a branch with
    /// dropout, or with a norm of its own after the sum: Gemma).
    Done(DTensor),
    /// A row-parallel product not yet summed: the stream finishes it with
    /// its residual and the norm that follows.
    Row(RowProduct),
}

impl Branch {
    /// The branch's value on its own.
    pub fn resolve(self) -> Result<DTensor> {
        match self {
            Branch::Done(t) => Ok(t),
            Branch::Row(p) => p.resolve(),
        }
    }

    /// `residual + self`, and the RMS norm `(γ, ε)` of that where the sum
    /// applied it (`None`: the caller norms).
    fn add_to(
        self,
        residual: &DTensor,
        norm: Option<(&DTensor, f32)>,
    ) -> Result<(DTensor, Option<DTensor>)> {
        match self {
            Branch::Done(t) => Ok((residual.add(&t)?, None)),
            Branch::Row(p) => p.finish(Some(residual), norm),
        }
    }
}

impl Branch {
    /// `p` through dropout `d`: left unfinished (for the stream to fuse)
    /// where `d` passes its input through (evaluation, or p = 0).
    pub fn dropout(p: RowProduct, d: &Dropout) -> Result<Branch> {
        if !d.is_training() || d.config().p == 0.0 {
            return Ok(Branch::Row(p));
        }
        Ok(Branch::Done(d.forward(&p.resolve()?)?))
    }
}

impl From<RowProduct> for Branch {
    fn from(p: RowProduct) -> Self {
        Branch::Row(p)
    }
}

impl From<DTensor> for Branch {
    fn from(t: DTensor) -> Self {
        Branch::Done(t)
    }
}

/// A residual stream `x` with at most one branch not yet added (module doc).
#[derive(Debug)]
pub struct Stream {
    x: DTensor,
    pending: Option<Branch>,
}

impl Stream {
    /// A stream starting at `x` (the embeddings, or a previous stage's output).
    pub fn new(x: DTensor) -> Self {
        Stream { x, pending: None }
    }

    /// `x ← x + f(norm(x))` (`f(x)` without a norm): `f` gets the normed
    /// stream and returns the branch.
    pub fn branch(
        &mut self,
        norm: Option<&dyn Normalize>,
        f: impl FnOnce(&DTensor) -> Result<Branch>,
    ) -> Result<()> {
        let normed = self.settle(norm)?;
        self.pending = Some(f(&normed)?);
        Ok(())
    }

    /// The stream's current value, every branch added.
    pub fn value(&mut self) -> Result<DTensor> {
        self.settle(None)
    }

    /// The stream after its last branch, and `norm` of it.
    pub fn finish_normed(mut self, norm: &dyn Normalize) -> Result<DTensor> {
        self.settle(Some(norm))
    }

    /// `norm` of the stream's last row only (a decoding step's next
    /// token): rows are normed apart, so it is the norm's last row.
    pub fn finish_last_row(mut self, norm: &dyn Normalize) -> Result<DTensor> {
        if let Some(b) = self.pending.take() {
            let (h, normed) = b.add_to(&self.x, norm.rms_gamma())?;
            if let Some(n) = normed {
                let rows = n.shape()[0];
                return n.narrow(0, rows - 1, 1);
            }
            self.x = h;
        }
        let rows = self.x.shape()[0];
        norm.normalize(&self.x.narrow(0, rows - 1, 1)?)
    }

    /// The stream with its pending branch added, and `norm` of it where
    /// given (fused into the branch's sum where that can).
    fn settle(&mut self, norm: Option<&dyn Normalize>) -> Result<DTensor> {
        let mut normed = None;
        if let Some(b) = self.pending.take() {
            let (h, n) = b.add_to(&self.x, norm.and_then(|n| n.rms_gamma()))?;
            self.x = h;
            normed = n;
        }
        match (normed, norm) {
            (Some(n), _) => Ok(n),
            (None, Some(norm)) => norm.normalize(&self.x),
            (None, None) => Ok(self.x.clone()),
        }
    }
}
