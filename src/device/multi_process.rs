//! [`MeshBuilder::mpi`]: a mesh whose ranks are separate processes joined by
//! MPI, one rank per process (multi-controller, as JAX's multi-process mode).

use std::time::Duration;

use super::mesh::{DeviceLayout, Mesh};
use super::select::MeshBuilder;
use crate::error::Result;

impl MeshBuilder {
    /// One rank per MPI process: the world size and this process's rank come
    /// from MPI (launch with `mpirun -np P program`), and each process opens
    /// the adapter `local_rank % adapters` among the matching devices of the
    /// best backend, so a host with several GPUs runs one process per GPU. Every process runs
    /// the same program; tensors hold only this process's shard, and
    /// collectives go through MPI with the same bytes as a single-process
    /// mesh of the same size. Needs the cargo feature `mpi`; without it,
    /// [`MeshBuilder::build`] returns an error saying so.
    pub fn mpi(self) -> Self {
        self.layout(DeviceLayout::Process)
    }

    /// How long a collective of a multi-process mesh waits for the other
    /// ranks before it fails with [`Error::Timeout`](crate::error::Error::Timeout) naming those that did
    /// not arrive (default: the settings' `mpi_timeout`, 300 s unless
    /// `WGPU_TP_MPI_TIMEOUT` gives seconds).
    pub fn mpi_timeout(mut self, limit: Duration) -> Self {
        self.mpi_timeout = Some(limit);
        self
    }

    #[cfg(feature = "mpi")]
    pub(super) async fn open_process_mesh(
        &self,
        instance: wgpu::Instance,
        list: &[wgpu::Adapter],
        limits: super::open::OpenWith<'_>,
    ) -> Result<Mesh> {
        let process = super::process::Process::get()?;
        if let Some(t) = self.mpi_timeout {
            process.set_timeout(t);
        }
        // Distinct devices of the best backend: the same chip shows up under
        // several backends (lavapipe on Vulkan and llvmpipe on GL), and
        // ranks on different backends could round differently.
        let backend = list[0].get_info().backend;
        let mut seen = Vec::new();
        let distinct: Vec<&wgpu::Adapter> = list
            .iter()
            .filter(|a| {
                let i = a.get_info();
                let key = (i.name.clone(), i.vendor, i.device);
                let new = i.backend == backend && !seen.contains(&key);
                if new {
                    seen.push(key);
                }
                new
            })
            .collect();
        let adapter = distinct[process.local_rank() % distinct.len()];
        let rank = super::rank::Rank {
            index: process.rank(),
            device: super::open::open(adapter, process.rank(), limits).await?,
        };
        Ok(Mesh::from_process(instance, rank, process))
    }

    #[cfg(not(feature = "mpi"))]
    pub(super) async fn open_process_mesh(
        &self,
        _instance: wgpu::Instance,
        _list: &[wgpu::Adapter],
        _limits: super::open::OpenWith<'_>,
    ) -> Result<Mesh> {
        Err(crate::error::Error::Mpi(
            "this build has no MPI support: rebuild with `--features mpi` (Debian: apt-get install libopenmpi-dev openmpi-bin libclang-dev pkgconf)".into(),
        ))
    }
}
