//! How a mesh's collectives move bytes, which follows from how its ranks sit
//! on wgpu devices.

use crate::device::{DeviceLayout, Mesh};

/// How collectives move bytes between ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Each rank is its own wgpu device; bytes go device -> host -> device.
    HostStaged,
    /// All ranks share one wgpu device; bytes move with on-device copies, and
    /// replicated results share one buffer
    /// ([`LocalTensor::is_shared_across_ranks`](crate::device::LocalTensor::is_shared_across_ranks)).
    SharedDevice,
    /// Each rank in its own process, joined by MPI (feature `mpi`): bytes go
    /// device -> host -> MPI -> host -> device, combined in rank order.
    Mpi,
}

impl Mesh {
    /// How collectives move bytes.
    pub fn transport(&self) -> Transport {
        match self.layout() {
            DeviceLayout::SharedDevice => Transport::SharedDevice,
            DeviceLayout::Simulated | DeviceLayout::PerAdapter => Transport::HostStaged,
            DeviceLayout::Process => Transport::Mpi,
        }
    }
}
