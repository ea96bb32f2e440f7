//! [`Mesh`]: the ordered group of ranks one controller drives, and the
//! communication counters its collectives update.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::gpu::Gpu;
use super::local::Rank;
use crate::error::{Error, Result};

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

/// How collectives move bytes between ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Each rank is its own wgpu device; bytes go device -> host -> device.
    HostStaged,
    /// All ranks share one wgpu device; bytes move with on-device copies, and
    /// replicated results share one buffer
    /// ([`LocalTensor::is_shared_across_ranks`](crate::LocalTensor::is_shared_across_ranks)).
    SharedDevice,
}

struct MeshInner {
    ranks: Vec<Rank>,
    transport: Transport,
    counters: Mutex<CommStats>,
    // Keeps the instance (and so the adapters) alive as long as the mesh.
    _instance: wgpu::Instance,
}

/// An ordered group of ranks. Cheap to clone (shared).
#[derive(Clone)]
pub struct Mesh {
    inner: Arc<MeshInner>,
}

impl std::fmt::Debug for Mesh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mesh")
            .field("size", &self.size())
            .field("transport", &self.inner.transport)
            .field("adapter", &self.adapter_summary())
            .finish()
    }
}

impl Mesh {
    pub(crate) fn from_parts(
        instance: wgpu::Instance,
        ranks: Vec<Rank>,
        transport: Transport,
    ) -> Self {
        Mesh {
            inner: Arc::new(MeshInner {
                ranks,
                transport,
                counters: Mutex::new(CommStats::new()),
                _instance: instance,
            }),
        }
    }

    /// `n` simulated ranks on the default adapter, each its own wgpu device.
    /// See [`MeshBuilder`](crate::MeshBuilder) for other choices.
    pub fn simulated(n: usize) -> Result<Mesh> {
        crate::MeshBuilder::new().ranks(n).build()
    }

    /// Number of ranks (the world size P).
    pub fn size(&self) -> usize {
        self.inner.ranks.len()
    }

    /// All ranks in order.
    pub fn ranks(&self) -> &[Rank] {
        &self.inner.ranks
    }

    /// Rank `r`, or an error naming the mesh size.
    pub fn rank(&self, r: usize) -> Result<&Rank> {
        self.inner.ranks.get(r).ok_or(Error::OutOfRange {
            op: "Mesh::rank",
            what: "rank",
            value: r as i64,
            bound: self.size(),
        })
    }

    /// How collectives move bytes.
    pub fn transport(&self) -> Transport {
        self.inner.transport
    }

    /// Distinct devices used by the ranks (one per rank unless shared).
    pub fn gpus(&self) -> Vec<Arc<Gpu>> {
        let mut out: Vec<Arc<Gpu>> = Vec::new();
        for r in &self.inner.ranks {
            if !out.iter().any(|g| g.id() == r.gpu.id()) {
                out.push(r.gpu.clone());
            }
        }
        out
    }

    /// "name (backend, type)" of rank 0's adapter.
    pub fn adapter_summary(&self) -> String {
        match self.inner.ranks.first() {
            Some(r) => {
                let i = r.gpu.adapter_info();
                format!("{} ({:?}, {:?})", i.name, i.backend, i.device_type)
            }
            None => "no ranks".into(),
        }
    }

    /// Turn poisoning of fresh kernel outputs on or off on every device (tests).
    pub fn set_poison(&self, on: bool) {
        for g in self.gpus() {
            g.set_poison(on);
        }
    }

    /// Submit pending work on every device and wait for all of it.
    pub fn synchronize(&self) -> Result<()> {
        let gpus = self.gpus();
        for g in &gpus {
            g.flush();
        }
        for g in &gpus {
            g.synchronize()?;
        }
        Ok(())
    }

    /// Record one collective of `bytes` payload.
    pub fn record_comm(&self, kind: Collective, bytes: u64) {
        let mut c = self
            .inner
            .counters
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let e = c.entry(kind).or_default();
        e.calls += 1;
        e.bytes += bytes;
    }

    /// A snapshot of the communication counters.
    pub fn comm_stats(&self) -> CommStats {
        self.inner
            .counters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Calls of one kind so far.
    pub fn comm_calls(&self, kind: Collective) -> u64 {
        self.comm_stats().get(&kind).map_or(0, |c| c.calls)
    }

    /// Zero the communication counters.
    pub fn reset_comm_stats(&self) {
        self.inner
            .counters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Whether two handles name the same mesh.
    pub fn same_as(&self, other: &Mesh) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}
