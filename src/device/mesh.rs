//! [`Mesh`]: the ordered group of ranks a program drives.
//!
//! The mesh knows its ranks and how they sit on wgpu devices
//! ([`DeviceLayout`]); what the layers above keep per mesh (the comm layer's
//! counters) lives in typed extension slots, so this layer need not know it.
//!
//! Multi-controller, as JAX's multi-process mode: in a mesh built with
//! [`MeshBuilder::mpi`](super::MeshBuilder::mpi) every process runs the same
//! program and holds only its own rank; [`Mesh::size`] is the world size over
//! all processes, [`Mesh::ranks`] the ranks this process can address. In a
//! single-process mesh every rank is addressable and the two agree.

use std::any::Any;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use super::context::{Device, distinct_devices};
use super::rank::Rank;
use crate::error::{Error, Result};

/// How ranks are laid onto adapters. Unless the builder names one, several
/// ranks on one adapter share a device ([`DeviceLayout::SharedDevice`]) and
/// one rank gets a device ([`DeviceLayout::Simulated`]):
/// [`DeviceLayout::default_for`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceLayout {
    /// `n` logical ranks on one adapter, each its own wgpu device;
    /// collectives copy through the host, as between adapters or processes.
    Simulated,
    /// `n` logical ranks sharing one wgpu device; collectives are on-device copies.
    SharedDevice,
    /// One rank per matching physical adapter.
    PerAdapter,
    /// One rank per process, the processes joined by MPI
    /// ([`MeshBuilder::mpi`](super::MeshBuilder::mpi)).
    Process,
}

impl DeviceLayout {
    /// The layout a builder that names none gives `ranks` ranks on an
    /// adapter of `kind`: several ranks share one device, on every kind of
    /// adapter. A further device holds its own pipelines and driver memory
    /// (about 250 MiB each in GPT-2's training step on lavapipe), and its
    /// collectives go through the host: on an H100, GPT-2's decoding at 4
    /// ranks took twice as long with a device each (BENCHMARKS.md, round
    /// 33). Training small models on a CPU adapter, whose steps are
    /// dispatches more than arithmetic, is 15–20 % faster with a device
    /// each, which `layout` can ask for (round 30). One rank gets a device
    /// of its own; a browser gives a page one device.
    pub fn default_for(kind: wgpu::DeviceType, ranks: usize) -> DeviceLayout {
        // Every kind alike since round 33; `kind` stays for the choice's callers.
        let _ = kind;
        if cfg!(target_arch = "wasm32") || ranks > 1 {
            DeviceLayout::SharedDevice
        } else {
            DeviceLayout::Simulated
        }
    }
}

pub(super) type Extension = Arc<dyn Any + Send + Sync>;

/// Where a mesh sits among named axes.
pub(crate) struct Arrangement {
    /// This mesh's axes (a sub-mesh: the ones it spans), in the root's order.
    pub(super) names: Vec<String>,
    pub(super) sizes: Vec<usize>,
    /// The root's index of each of this mesh's ranks, in rank order.
    pub(super) members: Vec<usize>,
    /// The mesh the axes were given to; `None` on that mesh.
    pub(super) root: Option<Mesh>,
    /// On the root: sub-meshes made so far, by (axes mask, group number).
    pub(super) subs: Mutex<Vec<(GroupKey, Weak<MeshInner>)>>,
}

/// A group of the root: (the axes it spans as a bit mask, its number).
pub(super) type GroupKey = (u32, usize);

pub(super) struct MeshInner {
    /// The ranks this process addresses (all of them in one process).
    pub(super) ranks: Vec<Rank>,
    /// The world size over every process.
    pub(super) world: usize,
    pub(super) layout: DeviceLayout,
    #[cfg(feature = "mpi")]
    pub(super) process: Option<Arc<super::process::Process>>,
    pub(super) extensions: Mutex<Vec<Extension>>,
    /// Named axes and where this mesh sits among them (`axes.rs`).
    pub(super) arrangement: Option<Arrangement>,
    // Keeps the instance (and so the adapters) alive as long as the mesh.
    pub(super) instance: wgpu::Instance,
}

/// An ordered group of ranks. Cheap to clone (shared).
#[derive(Clone)]
pub struct Mesh {
    pub(super) inner: Arc<MeshInner>,
}

impl std::fmt::Debug for Mesh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mesh")
            .field("size", &self.size())
            .field("layout", &self.inner.layout)
            .field("adapter", &self.adapter_summary())
            .finish()
    }
}

impl Mesh {
    pub(crate) fn from_parts(
        instance: wgpu::Instance,
        ranks: Vec<Rank>,
        layout: DeviceLayout,
    ) -> Self {
        Mesh {
            inner: Arc::new(MeshInner {
                world: ranks.len(),
                ranks,
                layout,
                #[cfg(feature = "mpi")]
                process: None,
                extensions: Mutex::default(),
                arrangement: None,
                instance,
            }),
        }
    }

    /// This process's rank in a multi-process mesh.
    #[cfg(feature = "mpi")]
    pub(crate) fn from_process(
        instance: wgpu::Instance,
        rank: Rank,
        process: Arc<super::process::Process>,
    ) -> Self {
        Mesh {
            inner: Arc::new(MeshInner {
                world: process.size(),
                ranks: vec![rank],
                layout: DeviceLayout::Process,
                process: Some(process),
                extensions: Mutex::default(),
                arrangement: None,
                instance,
            }),
        }
    }

    /// The MPI process group of a multi-process mesh.
    #[cfg(feature = "mpi")]
    pub(crate) fn process(&self) -> Option<&Arc<super::process::Process>> {
        self.inner.process.as_ref()
    }

    /// Number of ranks over every process (the world size P).
    pub fn size(&self) -> usize {
        self.inner.world
    }

    /// The ranks this process addresses, in rank order: every rank in a
    /// single-process mesh, this process's own in a multi-process one. A
    /// [`DTensor`](crate::tensor::DTensor) holds one shard per rank listed here.
    pub fn ranks(&self) -> &[Rank] {
        &self.inner.ranks
    }

    /// Whether the ranks live in several processes ([`MeshBuilder::mpi`](super::MeshBuilder::mpi)).
    pub fn is_multi_process(&self) -> bool {
        self.inner.ranks.len() != self.inner.world
    }

    /// This process's index among the mesh's processes (0 in one process;
    /// over MPI its rank's index in this mesh, a sub-mesh's too).
    pub fn process_index(&self) -> usize {
        match self.is_multi_process() {
            true => self.inner.ranks.first().map_or(0, Rank::index),
            false => 0,
        }
    }

    /// Number of processes the mesh spans (1 in one process).
    pub fn process_count(&self) -> usize {
        match self.is_multi_process() {
            true => self.inner.world,
            false => 1,
        }
    }

    /// Position in [`Mesh::ranks`] of global rank `r`, when this process
    /// addresses it.
    pub fn local_position(&self, r: usize) -> Option<usize> {
        self.inner.ranks.iter().position(|x| x.index() == r)
    }

    /// Rank `r` (a global index), or an error naming the mesh size, or that
    /// the rank lives in another process.
    pub fn rank(&self, r: usize) -> Result<&Rank> {
        if r >= self.size() {
            return Err(Error::OutOfRange {
                op: "Mesh::rank",
                what: "rank",
                value: r as i64,
                bound: self.size(),
            });
        }
        match self.local_position(r) {
            Some(i) => Ok(&self.inner.ranks[i]),
            None => Err(Error::invalid(
                "Mesh::rank",
                format!(
                    "rank {r} lives in another process (this is process {} of {}); each process addresses only its own ranks",
                    self.process_index(),
                    self.process_count()
                ),
            )),
        }
    }

    /// How the ranks sit on wgpu devices.
    pub fn layout(&self) -> DeviceLayout {
        self.inner.layout
    }

    /// Distinct devices used by the ranks (one per rank unless shared).
    pub fn devices(&self) -> Vec<Arc<Device>> {
        distinct_devices(self.inner.ranks.iter().map(Rank::device))
    }

    /// "name (backend, type)" of rank 0's adapter.
    pub fn adapter_summary(&self) -> String {
        match self.inner.ranks.first() {
            Some(r) => {
                let i = r.device().adapter_info();
                format!("{} ({:?}, {:?})", i.name, i.backend, i.device_type)
            }
            None => "no ranks".into(),
        }
    }

    /// Turn poisoning of fresh kernel outputs on or off on every device (tests).
    pub fn set_poison(&self, on: bool) {
        for d in self.devices() {
            d.set_poison(on);
        }
    }

    /// Submit pending work on every device and wait for all of it (in a
    /// browser, use [`Mesh::synchronize_async`]).
    pub fn synchronize(&self) -> Result<()> {
        super::wait::block_on("Mesh::synchronize", self.synchronize_async())
    }

    /// [`Mesh::synchronize`] as a future.
    pub async fn synchronize_async(&self) -> Result<()> {
        let devices = self.devices();
        for d in &devices {
            d.flush();
        }
        for d in &devices {
            d.synchronize_async().await?;
        }
        Ok(())
    }

    /// Whether two handles name the same mesh.
    pub fn same_as(&self, other: &Mesh) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// This mesh's slot of type `T`, created on first use: per-mesh state of
    /// an upper layer (the comm layer's counters).
    pub(crate) fn extension<T: Any + Send + Sync + Default>(&self) -> Arc<T> {
        let mut slots = self
            .inner
            .extensions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(found) = slots.iter().find_map(|e| e.clone().downcast::<T>().ok()) {
            return found;
        }
        let made = Arc::new(T::default());
        slots.push(made.clone());
        made
    }
}

#[cfg(test)]
mod tests {
    use super::DeviceLayout;
    use wgpu::DeviceType;

    #[test]
    fn several_ranks_share_a_device_by_default_on_every_adapter_kind() {
        let one = if cfg!(target_arch = "wasm32") {
            DeviceLayout::SharedDevice
        } else {
            DeviceLayout::Simulated
        };
        for kind in [
            DeviceType::Cpu,
            DeviceType::DiscreteGpu,
            DeviceType::IntegratedGpu,
            DeviceType::Other,
        ] {
            for ranks in [2, 3, 4, 8] {
                assert_eq!(
                    DeviceLayout::default_for(kind, ranks),
                    DeviceLayout::SharedDevice
                );
            }
            assert_eq!(DeviceLayout::default_for(kind, 1), one);
        }
    }
}
