//! What a mesh's collectives have moved: calls and bytes per kind, counted
//! by every collective (world size 1 too) and read through
//! [`Mesh::comm_stats`]. The counters live in the mesh's extension slot for
//! this layer, so the device layer need not know about them.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use crate::device::Mesh;

/// The kinds of collective a mesh counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Collective {
    /// All-gather along a dimension.
    AllGather,
    /// All-reduce (sum or max).
    AllReduce,
    /// Reduce-scatter along a dimension.
    ReduceScatter,
    /// Broadcast from a root.
    Broadcast,
    /// Scatter from a root (or local slicing of a replicated tensor).
    Scatter,
    /// All-to-all (Shard(d) -> Shard(e)).
    AllToAll,
    /// One point-to-point step of a ring algorithm.
    SendRecv,
    /// One point-to-point message ([`send`](crate::comm::send)), counted
    /// where it is sent: a pipeline's activations and gradients.
    Send,
}

/// Calls and bytes for one kind of collective.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommCount {
    /// Number of calls.
    pub calls: u64,
    /// Bytes of payload: the sum over participating ranks of the bytes each
    /// rank contributed.
    pub bytes: u64,
}

/// A snapshot of a mesh's communication counters.
pub type CommStats = BTreeMap<Collective, CommCount>;

/// The counters one mesh keeps (its extension slot for this layer).
#[derive(Default)]
struct Ledger(Mutex<CommStats>);

impl Ledger {
    fn with<R>(&self, f: impl FnOnce(&mut CommStats) -> R) -> R {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl Mesh {
    /// Count one collective of `bytes` payload.
    pub(crate) fn record_comm(&self, kind: Collective, bytes: u64) {
        self.extension::<Ledger>().with(|c| {
            let e = c.entry(kind).or_default();
            e.calls += 1;
            e.bytes += bytes;
        });
    }

    /// A snapshot of the communication counters.
    pub fn comm_stats(&self) -> CommStats {
        self.extension::<Ledger>().with(|c| c.clone())
    }

    /// Calls of one kind so far.
    pub fn comm_calls(&self, kind: Collective) -> u64 {
        self.comm_stats().get(&kind).map_or(0, |c| c.calls)
    }

    /// The counters of every group along axis `name` that has a rank in
    /// this process (named axes, [`Mesh::axis_groups`]), summed per kind:
    /// what the axis moved. A group nothing holds any more counts from zero.
    pub fn axis_comm_stats(&self, name: &str) -> crate::error::Result<CommStats> {
        let mut sum = CommStats::new();
        for g in self.axis_groups(name)? {
            for (kind, c) in g.comm_stats() {
                let e = sum.entry(kind).or_default();
                e.calls += c.calls;
                e.bytes += c.bytes;
            }
        }
        Ok(sum)
    }

    /// Zero the communication counters.
    pub fn reset_comm_stats(&self) {
        self.extension::<Ledger>().with(|c| c.clear());
    }
}
