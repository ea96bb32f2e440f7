//! Whether a tensor's buffers are held by it alone: then a kernel may write
//! them in place (a gradient summed into, say) and nobody else sees the
//! value change.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::tensor::{Body, LocalTensor};

impl LocalTensor {
    /// Whether no other tensor (a clone, a reshape, another rank's shard)
    /// shares this one's buffers, so writing them in place changes no value
    /// that anything else can read.
    pub(crate) fn is_sole_owner(&self) -> bool {
        match &self.body {
            Body::Buffer(s) => {
                Arc::strong_count(s) == 1 && !s.shared_across_ranks.load(Ordering::Relaxed)
            }
            Body::Blocks(b) => Arc::strong_count(b) == 1 && b.iter().all(Self::is_sole_owner),
        }
    }
}

impl LocalTensor {
    /// Whether `other` is this tensor over the same buffers (an alias, e.g.
    /// another rank's shard of a replicated value on a shared device): the
    /// same bytes, shape and dtype, not merely equal values.
    pub(crate) fn same_buffer(&self, other: &LocalTensor) -> bool {
        if self.shape() != other.shape() || self.dtype() != other.dtype() {
            return false;
        }
        match (&self.body, &other.body) {
            (Body::Buffer(a), Body::Buffer(b)) => Arc::ptr_eq(a, b),
            (Body::Blocks(a), Body::Blocks(b)) => {
                a.len() == b.len() && a.iter().zip(b.iter()).all(|(x, y)| x.same_buffer(y))
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Mesh};

    /// A fresh tensor is its buffers' sole owner; a clone, a reshape or a
    /// block handed out shares them until it is dropped.
    #[test]
    fn sharing_a_buffer_ends_sole_ownership() {
        let mesh = Mesh::simulated(1).unwrap();
        let rank = &mesh.ranks()[0];
        let t = rank.zeros(&[3, 4], DType::F32).unwrap();
        assert!(t.is_sole_owner());
        let c = t.clone();
        assert!(!t.is_sole_owner() && !c.is_sole_owner());
        drop(c);
        assert!(t.is_sole_owner());
        let r = t.reshape(&[12]).unwrap();
        assert!(!t.is_sole_owner());
        drop(r);
        assert!(t.is_sole_owner());
        // Blocks: the list and each block.
        let u = rank.zeros(&[2, 4], DType::F32).unwrap();
        let b = crate::LocalTensor::from_blocks(vec![t, u]).unwrap();
        assert!(b.is_blocked() && b.is_sole_owner());
        let c = b.clone();
        assert!(!b.is_sole_owner());
        drop(c);
        let first = b.blocks()[0].clone();
        assert!(!b.is_sole_owner());
        drop(first);
        assert!(b.is_sole_owner());
    }
}
