//! [`Mesh`]: the ordered group of ranks one controller drives.
//!
//! The mesh knows its ranks and how they sit on wgpu devices
//! ([`DeviceLayout`]); what the layers above keep per mesh (the comm layer's
//! counters) lives in typed extension slots, so this layer need not know it.

use std::any::Any;
use std::sync::{Arc, Mutex, PoisonError};

use super::context::{Device, distinct_devices};
use super::rank::Rank;
use crate::error::{Error, Result};

/// How ranks are laid onto adapters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceLayout {
    /// `n` logical ranks on one adapter, each its own wgpu device.
    Simulated,
    /// `n` logical ranks sharing one wgpu device; collectives are on-device copies.
    SharedDevice,
    /// One rank per matching physical adapter.
    PerAdapter,
}

type Extension = Arc<dyn Any + Send + Sync>;

struct MeshInner {
    ranks: Vec<Rank>,
    layout: DeviceLayout,
    extensions: Mutex<Vec<Extension>>,
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
                ranks,
                layout,
                extensions: Mutex::default(),
                _instance: instance,
            }),
        }
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

    /// Submit pending work on every device and wait for all of it.
    pub fn synchronize(&self) -> Result<()> {
        let devices = self.devices();
        for d in &devices {
            d.flush();
        }
        for d in &devices {
            d.synchronize()?;
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
