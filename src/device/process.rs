//! The MPI process group behind a multi-process mesh (feature `mpi`).
//!
//! MPI is initialised once per process, with funneled threading: every MPI
//! call comes from the thread that built the mesh, which [`Process::check_thread`]
//! enforces. The group lives as long as some mesh holds it; the last one
//! dropped finalises MPI, after which no new MPI mesh can be built in this
//! process (MPI allows one initialisation).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::thread::ThreadId;
use std::time::Duration;

use mpi::environment::Universe;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::AsRaw;

use crate::error::{Error, Result};

/// This process's place in the MPI world.
pub(crate) struct Process {
    world: SimpleCommunicator,
    rank: usize,
    size: usize,
    local_rank: usize,
    thread: ThreadId,
    timeout_ms: AtomicU64,
    seq: AtomicU64,
    // Dropped last: finalises MPI.
    _universe: Universe,
}

// SAFETY: MPI handles are plain integers or pointers into the MPI library;
// every call through them is made on the initialising thread
// (`check_thread`), as MPI_THREAD_FUNNELED requires.
unsafe impl Send for Process {}
// SAFETY: as for Send; the mutable state is atomic.
unsafe impl Sync for Process {}

/// The live group, if any, and whether MPI was finalised already.
static GROUP: Mutex<(Weak<Process>, bool)> = Mutex::new((Weak::new(), false));

impl Process {
    /// The process group, initialising MPI on first use.
    pub(crate) fn get() -> Result<Arc<Process>> {
        let mut g = GROUP.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(p) = g.0.upgrade() {
            p.check_thread("MeshBuilder::mpi")?;
            return Ok(p);
        }
        if g.1 || mpi::environment::is_finalized() {
            return Err(Error::Mpi(
                "MPI was finalised when the last MPI mesh was dropped, and it cannot start twice in one process: keep one mesh alive for the program's life".into(),
            ));
        }
        let (universe, threading) =
            mpi::initialize_with_threading(mpi::Threading::Funneled).ok_or_else(|| {
                Error::Mpi(
                    "MPI was initialised by someone else in this process; let MeshBuilder::mpi initialise it".into(),
                )
            })?;
        if threading < mpi::Threading::Funneled {
            return Err(Error::Mpi(format!(
                "the MPI library gives thread level {threading:?}, below the funneled level wgpu-tp needs"
            )));
        }
        let world = universe.world();
        // Errors come back as codes, which every call checks, instead of
        // MPI's default of aborting the job (a message larger than its
        // receive, say, is then an `Error::Mpi`).
        // SAFETY: the world communicator of the MPI just initialised.
        unsafe {
            mpi::ffi::MPI_Comm_set_errhandler(world.as_raw(), mpi::ffi::RSMPI_ERRORS_RETURN);
        }
        let rank = world.rank() as usize;
        let size = world.size() as usize;
        let local_rank = world.split_shared(world.rank()).rank() as usize;
        // `WGPU_TP_MPI_TIMEOUT` unless set in code; a builder's own
        // limit replaces it after.
        let timeout = super::settings::current().mpi_timeout;
        let p = Arc::new(Process {
            world,
            rank,
            size,
            local_rank,
            thread: std::thread::current().id(),
            timeout_ms: AtomicU64::new(timeout.as_millis() as u64),
            seq: AtomicU64::new(0),
            _universe: universe,
        });
        *g = (Arc::downgrade(&p), false);
        Ok(p)
    }

    /// This process's rank in the world (its mesh rank).
    pub(crate) fn rank(&self) -> usize {
        self.rank
    }

    /// Number of processes.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// Rank among the processes on this host (shared-memory split).
    pub(crate) fn local_rank(&self) -> usize {
        self.local_rank
    }

    /// The world communicator's raw handle.
    pub(crate) fn raw_world(&self) -> mpi::ffi::MPI_Comm {
        self.world.as_raw()
    }

    /// How long a collective waits for the other ranks.
    pub(crate) fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.load(Ordering::Relaxed))
    }

    /// Set how long a collective waits for the other ranks.
    pub(crate) fn set_timeout(&self, t: Duration) {
        self.timeout_ms
            .store(t.as_millis().max(1) as u64, Ordering::Relaxed);
    }

    /// The next collective's sequence number (the same on every process,
    /// since all run the same collectives in the same order).
    pub(crate) fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    /// MPI calls must come from the thread that initialised MPI.
    pub(crate) fn check_thread(&self, op: &'static str) -> Result<()> {
        if std::thread::current().id() != self.thread {
            return Err(Error::invalid(
                op,
                "MPI runs funneled: call collectives of a multi-process mesh from the thread that built it",
            ));
        }
        Ok(())
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let mut g = GROUP.lock().unwrap_or_else(PoisonError::into_inner);
        g.1 = true;
    }
}
