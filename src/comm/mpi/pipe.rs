//! Point-to-point messages over MPI ([`crate::comm::send`] /
//! [`crate::comm::recv`]): a send is posted and left in flight (kept by the
//! caller until [`PendingSend::wait`]), so two neighbours that send to each
//! other before receiving (a pipeline's activations one way, gradients the
//! other) never wait on each other; a receive waits, within the time limit.
//! Each message starts with two words, its element count and dtype, so a
//! receiver expecting another tensor gets an error, not wrong numbers (a
//! larger message than expected is MPI's truncation error, returned as an
//! error code: `Process` sets `MPI_ERRORS_RETURN`).

use super::p2p::{Traffic, channel_tag};
use super::peers::Peers;
use crate::device::Mesh;
use crate::element::DType;
use crate::error::{Error, Result};

/// A send in flight.
pub(crate) struct PendingSend(Traffic);

// SAFETY: the MPI requests inside are plain handles. A send is posted on
// the thread that initialised MPI (`Process::check_thread`) and `wait`
// checks that thread again before any MPI call. Dropping one unfinished
// frees its request through MPI (`Traffic`'s drop), so, like the mesh that
// keeps it, it must be dropped on that thread (MPI_THREAD_FUNNELED).
unsafe impl Send for PendingSend {}

impl PendingSend {
    /// Wait until MPI is done with the message (on the thread that
    /// initialised MPI).
    pub(crate) fn wait(self) -> Result<()> {
        self.0.check_thread("comm::wait_sends")?;
        self.0.wait().map(drop)
    }
}

fn code(dtype: DType) -> u32 {
    super::header::dtype_code(dtype) as u32
}

/// Post `words` (a tensor of `dtype`) to member `to` of `mesh` on `channel`.
pub(crate) fn send(
    mesh: &Mesh,
    to: usize,
    channel: u32,
    dtype: DType,
    words: &[u32],
) -> Result<PendingSend> {
    const OP: &str = "comm::send";
    let (peers, _) = Peers::members(mesh, OP)?;
    let mut message = Vec::with_capacity(words.len() + 2);
    message.extend_from_slice(&[words.len() as u32, code(dtype)]);
    message.extend_from_slice(words);
    let mut t = peers.traffic(OP)?;
    t.send(peers.world(to), channel_tag(channel), message.into())?;
    Ok(PendingSend(t))
}

/// Receive a tensor of `len` words of `dtype` from member `from` of `mesh`
/// on `channel`.
pub(crate) fn recv(
    mesh: &Mesh,
    from: usize,
    channel: u32,
    dtype: DType,
    len: usize,
) -> Result<Vec<u32>> {
    const OP: &str = "comm::recv";
    let (peers, _) = Peers::members(mesh, OP)?;
    let mut t = peers.traffic(OP)?;
    t.recv(peers.world(from), channel_tag(channel), len + 2)?;
    let mut got = t.wait()?.pop().unwrap_or_default();
    if got.len() < 2 || got[0] as usize != len || got[1] != code(dtype) {
        return Err(Error::invalid(
            OP,
            format!(
                "rank {from} sent {} words of dtype code {}, this rank expected {len} of {dtype}: \
                 the two sides must send and receive the same tensors in the same order",
                got.first().copied().unwrap_or(0),
                got.get(1).copied().unwrap_or(u32::MAX)
            ),
        ));
    }
    got.drain(..2);
    Ok(got)
}
