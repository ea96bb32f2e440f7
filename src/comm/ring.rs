//! Point-to-point ring steps: every participant sends its tensor to the next
//! one, `(i + 1) mod P`, and receives from the previous one. A ring of
//! `P − 1` such steps is an all-gather (pass the chunks on) or, with an add
//! after each step, a reduce-scatter; the sequence-parallel linear layers use
//! it to overlap each step's transfer with the GEMM on the chunk already
//! present (xlstm-jax's `TPAsyncDense`, `async_gather` / `async_scatter`).
//!
//! Two phases, so a caller can record work between them:
//! [`RingShift::start`] begins the transfer, [`RingShift::finish`] returns the
//! received tensors; [`ring_shift`] does both at once. Each started shift
//! counts once as [`Collective::SendRecv`], with bytes = the sum of the
//! participants' tensors. On a traced mesh its span runs from `start` to the
//! end of `finish`, so it covers the work recorded in between.
//!
//! What overlaps on one controller, honestly:
//! - [`Transport::HostStaged`] (each rank its own device): `start` records the
//!   device → staging copies through the one staging path
//!   ([`Exchange`](crate::device::Exchange)) and submits them at once, ahead
//!   of whatever the caller records next; `finish` submits that work too,
//!   waits only for the staging copies' submission, then writes each tensor
//!   into the next rank's upload staging.
//!   On separate real GPUs the host copies and uploads then run while the
//!   GEMMs recorded in between execute. On CPU adapters (lavapipe, llvmpipe)
//!   the "devices" are the same CPU cores that do the host copies, and each
//!   step still costs a device round-trip, so nothing is gained there.
//! - [`Transport::SharedDevice`] (all ranks on one device): nothing moves;
//!   the next rank gets a tensor over the same (immutable) buffer, so the
//!   step costs nothing and there is nothing to overlap.

use super::collectives::alone;
use super::group::{bytes_of, check_group};
use super::mpi::MpiShift;
use super::stats::Collective;
use super::trace::{CommSpan, finish_span};
use super::transport::Transport;
use crate::device::{Exchange, InFlight, LocalTensor, Mesh};
use crate::error::Result;

/// A ring shift in flight: created by [`RingShift::start`], completed by
/// [`RingShift::finish`]. Dropping it unfinished abandons the transfer
/// (nothing is leaked; the received tensors are simply never produced).
#[must_use = "call finish() to receive the shifted tensors"]
pub struct RingShift {
    pending: Pending,
    /// The span begun at `start`, when the mesh traces.
    span: Option<CommSpan>,
}

impl std::fmt::Debug for RingShift {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.pending {
            Pending::Done(_) => "shared-device",
            Pending::Host(_) => "host-staged",
            Pending::Mpi(_) => "mpi",
        };
        f.debug_struct("RingShift")
            .field("transport", &kind)
            .finish()
    }
}

enum Pending {
    /// Shared device (or a group of one): nothing left to move.
    Done(Vec<LocalTensor>),
    /// Host-staged: input i is being read back; output i, on participant
    /// i + 1, waits for its bytes.
    Host(InFlight),
    /// MPI: this rank's send and receive are posted.
    Mpi(MpiShift),
}

impl RingShift {
    /// Begin sending `shards[i]` (on the i-th participating rank) to
    /// participant `(i + 1) mod n`. Shards may differ in shape (ragged
    /// chunks, including empty ones) but must share a dtype and sit on
    /// distinct ranks of `mesh`. Counts one [`Collective::SendRecv`].
    pub fn start(mesh: &Mesh, shards: &[LocalTensor]) -> Result<RingShift> {
        const OP: &str = "ring_shift";
        let ranks = check_group(OP, mesh, shards)?;
        let parts = shards.iter().map(|s| (s.rank_index(), s.byte_len()));
        let span = CommSpan::begin(mesh, Collective::SendRecv, parts);
        let n = shards.len();
        let mut bytes = bytes_of(shards);
        let pending = if alone(mesh, shards) {
            Pending::Done(shards.to_vec())
        } else if mesh.transport() == Transport::Mpi {
            let (shift, b) = MpiShift::start(mesh, shards)?;
            bytes = b;
            Pending::Mpi(shift)
        } else {
            match mesh.transport() {
                Transport::SharedDevice => {
                    // Same device, immutable tensors: the next rank gets the
                    // same buffer (see `LocalTensor::alias_on`).
                    let out = (0..n)
                        .map(|i| shards[i].alias_on(&ranks[(i + 1) % n]))
                        .collect::<Result<Vec<_>>>()?;
                    Pending::Done(received_order(out))
                }
                Transport::HostStaged | Transport::Mpi => {
                    let mut x = Exchange::with_capacity(n, n);
                    for (i, t) in shards.iter().enumerate() {
                        x.read(t)?;
                        x.write(&ranks[(i + 1) % n], t.shape(), t.dtype())?;
                    }
                    // Submitted now, ahead of whatever the caller records next.
                    Pending::Host(x.submit())
                }
            }
        };
        mesh.record_comm(Collective::SendRecv, bytes);
        Ok(RingShift { pending, span })
    }

    /// Complete the shift: element i of the result is participant
    /// `(i − 1) mod n`'s tensor, now on participant i's rank. Host-staged:
    /// submits any work recorded since [`RingShift::start`] (so it runs
    /// meanwhile), waits for the staging copies only, then uploads.
    pub fn finish(self) -> Result<Vec<LocalTensor>> {
        let out = match self.pending {
            Pending::Done(out) => out,
            Pending::Host(in_flight) => {
                let mapped = in_flight.wait()?;
                for i in 0..mapped.outputs() {
                    let bytes = mapped.input(i);
                    if !bytes.is_empty() {
                        let mut view = mapped.view(i, 0..0)?;
                        view.slice(..).copy_from_slice(bytes);
                    }
                }
                received_order(mapped.finish()?)
            }
            Pending::Mpi(shift) => shift.finish()?,
        };
        finish_span(self.span);
        Ok(out)
    }
}

/// Send each participant's tensor to the next, `(i + 1) mod n`, and return
/// what each received: [`RingShift::start`] then [`RingShift::finish`].
pub fn ring_shift(mesh: &Mesh, shards: &[LocalTensor]) -> Result<Vec<LocalTensor>> {
    RingShift::start(mesh, shards)?.finish()
}

/// Sender order (element i went to participant i + 1) → receiver order.
fn received_order(mut sent: Vec<LocalTensor>) -> Vec<LocalTensor> {
    sent.rotate_right(1);
    sent
}
