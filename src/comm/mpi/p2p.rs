//! Point-to-point messages with a time limit: a batch of `MPI_Isend` /
//! `MPI_Irecv` of 32-bit words (collectives move only f32 and i32), polled
//! until all complete or the limit runs out. A payload sent to several ranks
//! is one shared buffer, not a copy per rank. On time-out the receives are cancelled, buffers still in MPI's hands
//! are leaked (never freed under it), and the error names the ranks whose
//! messages did not arrive.

use std::os::raw::c_int;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mpi::ffi;

use crate::device::Process;
use crate::error::{Error, Result};

/// Largest single message in words (1 GiB); bigger payloads go as several
/// with one tag (MPI keeps their order).
const MAX_MESSAGE: usize = 1 << 28;

/// How long a wait polls without sleeping.
const SPIN: Duration = Duration::from_millis(50);

/// A tag for phase `phase` (0..4) of collective `seq`; 8190 collectives in
/// flight at most (tags up to 32759), below the point-to-point tags
/// ([`channel_tag`]).
pub(super) fn tag(seq: u64, phase: u32) -> c_int {
    ((seq % 8190) as u32 * 4 + phase) as c_int
}

/// The tag of point-to-point channel `channel` (0..8): 32760 and up, above
/// every collective's and within the 32767 every MPI allows.
pub(super) fn channel_tag(channel: u32) -> c_int {
    (8190 * 4 + channel.min(7)) as c_int
}

struct Pending {
    request: ffi::MPI_Request,
    done: bool,
}

/// One batch of messages in flight.
pub(super) struct Traffic {
    process: Arc<Process>,
    op: &'static str,
    group: String,
    sends: Vec<(usize, Arc<[u32]>, Vec<Pending>)>,
    recvs: Vec<(usize, Vec<u32>, Vec<Pending>)>,
}

fn check(code: c_int, what: &str) -> Result<()> {
    if code == ffi::MPI_SUCCESS as c_int {
        Ok(())
    } else {
        Err(Error::Mpi(format!(
            "{what} failed with MPI error code {code}"
        )))
    }
}

impl Traffic {
    pub(super) fn new(process: &Arc<Process>, op: &'static str) -> Result<Traffic> {
        process.check_thread(op)?;
        Ok(Traffic {
            process: Arc::clone(process),
            op,
            group: String::new(),
            sends: Vec::new(),
            recvs: Vec::new(),
        })
    }

    /// An error unless this is the thread that initialised MPI.
    pub(super) fn check_thread(&self, op: &'static str) -> Result<()> {
        self.process.check_thread(op)
    }

    /// Name the group in a time-out's error (see `peers.rs`).
    pub(super) fn in_group(mut self, label: &str) -> Traffic {
        self.group = label.to_string();
        self
    }

    /// Send `data` to rank `to` under `tag`.
    pub(super) fn send(&mut self, to: usize, tag: c_int, data: Arc<[u32]>) -> Result<()> {
        let base = data.as_ptr();
        let len = data.len();
        self.sends.push((to, data, Vec::new()));
        let i = self.sends.len() - 1;
        self.post(false, i, (base.cast_mut(), len), to, tag)
    }

    /// Receive `len` words from rank `from` under `tag`.
    pub(super) fn recv(&mut self, from: usize, tag: c_int, len: usize) -> Result<()> {
        self.recvs.push((from, vec![0u32; len], Vec::new()));
        let i = self.recvs.len() - 1;
        let base = self.recvs[i].1.as_mut_ptr();
        self.post(true, i, (base, len), from, tag)
    }

    /// Post entry `i` of the sends or receives, whose buffer is `(base,
    /// len)`, in pieces MPI's counts can hold. The buffer joined the batch
    /// before the first piece is posted, so it outlives every posted request
    /// even when a later post fails.
    fn post(
        &mut self,
        recv: bool,
        i: usize,
        (base, len): (*mut u32, usize),
        peer: usize,
        tag: c_int,
    ) -> Result<()> {
        let comm = self.process.raw_world();
        for chunk in pieces(len) {
            let mut request = unsafe { ffi::RSMPI_REQUEST_NULL };
            // SAFETY: the buffer belongs to this batch until the request
            // completes, or is leaked if it never does (`release`); moving
            // a Vec or an Arc moves no heap bytes. Sends are only read.
            let code = unsafe {
                let (at, n) = (base.add(chunk.start).cast(), (chunk.len() * 4) as c_int);
                let (peer, dt) = (peer as c_int, ffi::RSMPI_UINT8_T);
                if recv {
                    ffi::MPI_Irecv(at, n, dt, peer, tag, comm, &mut request)
                } else {
                    ffi::MPI_Isend(at, n, dt, peer, tag, comm, &mut request)
                }
            };
            check(code, if recv { "MPI_Irecv" } else { "MPI_Isend" })?;
            let list = if recv {
                &mut self.recvs[i].2
            } else {
                &mut self.sends[i].2
            };
            list.push(Pending {
                request,
                done: false,
            });
        }
        Ok(())
    }

    /// Wait for every message; returns the received buffers in the order the
    /// receives were posted.
    pub(super) fn wait(mut self) -> Result<Vec<Vec<u32>>> {
        let limit = self.process.timeout();
        let start = Instant::now();
        let mut nap = Duration::from_micros(1);
        loop {
            let mut all = true;
            let sends = self.sends.iter_mut().map(|e| &mut e.2);
            for reqs in sends.chain(self.recvs.iter_mut().map(|e| &mut e.2)) {
                for r in reqs.iter_mut().filter(|r| !r.done) {
                    let mut flag: c_int = 0;
                    // SAFETY: a live request of this batch; status ignored.
                    let code = unsafe {
                        ffi::MPI_Test(&mut r.request, &mut flag, ffi::RSMPI_STATUS_IGNORE)
                    };
                    check(code, "MPI_Test")?;
                    r.done = flag != 0;
                    all &= r.done;
                }
            }
            if all {
                let recvs = std::mem::take(&mut self.recvs);
                return Ok(recvs.into_iter().map(|(_, d, _)| d).collect());
            }
            if start.elapsed() > limit {
                return Err(self.abandon(limit));
            }
            // MPI moves large messages only inside its calls: poll hot
            // (yielding the core, for oversubscribed ranks) for a while,
            // then back off to naps for long waits.
            if start.elapsed() < SPIN {
                std::thread::yield_now();
            } else {
                std::thread::sleep(nap);
                nap = (nap * 2).min(Duration::from_millis(1));
            }
        }
    }

    /// Cancel what did not arrive and name the ranks it should come from.
    fn abandon(&mut self, limit: Duration) -> Error {
        let mut missing: Vec<usize> = self
            .recvs
            .iter()
            .filter(|(_, _, reqs)| reqs.iter().any(|r| !r.done))
            .map(|(from, _, _)| *from)
            .collect();
        missing.sort_unstable();
        missing.dedup();
        self.release();
        Error::Timeout {
            op: self.op,
            missing,
            seconds: limit.as_secs_f64(),
            rank: self.process.rank(),
            group: std::mem::take(&mut self.group),
        }
    }

    /// Hand unfinished requests back to MPI without waiting: receives are
    /// cancelled, every unfinished request freed, and its buffer leaked so
    /// MPI never touches freed memory. Nothing here can block.
    fn release(&mut self) {
        for (_, data, reqs) in self.recvs.drain(..) {
            if free_live(reqs, true) {
                std::mem::forget(data);
            }
        }
        for (_, data, reqs) in self.sends.drain(..) {
            if free_live(reqs, false) {
                std::mem::forget(data);
            }
        }
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        // After an error while posting, some requests may still be live.
        self.release();
    }
}

/// Free (after cancelling, for receives) the requests that have not
/// completed; whether there were any, so their buffer must be leaked.
fn free_live(reqs: Vec<Pending>, cancel: bool) -> bool {
    let mut live = false;
    for mut r in reqs.into_iter().filter(|r| !r.done) {
        live = true;
        // SAFETY: a live request of this batch; freeing an active request
        // lets it finish (or be cancelled) on its own.
        unsafe {
            if cancel {
                ffi::MPI_Cancel(&mut r.request);
            }
            ffi::MPI_Request_free(&mut r.request);
        }
    }
    live
}

/// Word ranges of one message split into pieces MPI's int counts can hold
/// (one empty piece for an empty message, so it still matches).
fn pieces(len: usize) -> Vec<std::ops::Range<usize>> {
    if len == 0 {
        return std::iter::once(0..0).collect();
    }
    (0..len)
        .step_by(MAX_MESSAGE)
        .map(|s| s..(s + MAX_MESSAGE).min(len))
        .collect()
}
