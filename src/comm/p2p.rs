//! Point-to-point messages between two ranks of a group: [`send`] on the
//! sending rank, [`recv`] on the receiving one, what pipeline stages pass
//! each other ([`Pipe`](crate::tensor::Pipe)).
//!
//! In one process both ranks are here: `send` moves the tensor to the
//! receiver's device at once (a host-staged copy between devices, nothing
//! at all on a shared device, where the receiver gets the same immutable
//! buffer) and queues it; `recv` takes the oldest queued tensor of that
//! sender, receiver and [`Channel`]. Over MPI `send` posts the message and
//! leaves it in flight (so neighbours sending to each other before they
//! receive never wait on each other) until [`wait_sends`]; `recv` waits for
//! it, within the process's time limit, and an error names the rank that
//! sent nothing. Messages of one sender, receiver and channel arrive in the
//! order they were sent, on every transport. Each send counts once as
//! [`Collective::Send`] on the group's mesh.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use super::mpi::{self, PendingSend};
use super::stats::Collective;
use crate::device::{LocalTensor, Mesh, download_many};
use crate::element::DType;
use crate::error::{Error, Result};

/// What a message carries, so that messages of different purposes between
/// the same two ranks never take each other's place.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Channel {
    /// Activations, from a pipeline stage to the next.
    Activation,
    /// Gradients of activations, from a stage to the previous.
    Gradient,
    /// Gradients of parameters two stages share (a tied embedding).
    Tied,
    /// Token ids the last stage chose, to the others (generation).
    Ids,
    /// The loss the last stage computed, to the others.
    Loss,
}

type Key = (Channel, usize, usize);

/// Tensors sent within this process and not yet received (per group).
#[derive(Default)]
struct Mailbox(Mutex<HashMap<Key, VecDeque<LocalTensor>>>);

/// Sends over MPI still in flight (per group).
#[derive(Default)]
struct InFlight(Mutex<Vec<PendingSend>>);

fn check_pair(op: &'static str, mesh: &Mesh, from: usize, to: usize) -> Result<()> {
    for (what, r) in [("from", from), ("to", to)] {
        if r >= mesh.size() {
            return Err(Error::OutOfRange {
                op,
                what,
                value: r as i64,
                bound: mesh.size(),
            });
        }
    }
    if from == to {
        return Err(Error::invalid(op, "a rank cannot send to itself"));
    }
    Ok(())
}

/// Rank `from` of `mesh` sends `t` (a tensor on that rank's device) to rank
/// `to` on `channel`. Over MPI only the process driving `from` calls it.
pub fn send(mesh: &Mesh, from: usize, to: usize, channel: Channel, t: &LocalTensor) -> Result<()> {
    const OP: &str = "comm::send";
    check_pair(OP, mesh, from, to)?;
    let src = mesh.rank(from)?;
    if !Arc::ptr_eq(src.device(), t.device()) {
        return Err(Error::invalid(
            OP,
            format!("the tensor is not on rank {from}'s device"),
        ));
    }
    if !matches!(t.dtype(), DType::F32 | DType::I32) {
        return Err(Error::invalid(
            OP,
            format!(
                "messages carry f32 or i32 tensors, this one is {}: cast it first",
                t.dtype()
            ),
        ));
    }
    let words = || -> Result<Vec<u32>> {
        let raw = download_many(&[t])?;
        Ok(bytemuck::pod_collect_to_vec(&raw[0]))
    };
    if mesh.is_multi_process() {
        let pending = mpi::send(mesh, to, channel as u32, t.dtype(), &words()?)?;
        lock(&mesh.extension::<InFlight>().0).push(pending);
    } else {
        let dst = mesh.rank(to)?;
        let moved = if Arc::ptr_eq(dst.device(), t.device()) {
            t.retagged(to)
        } else {
            let bytes: Vec<u8> = bytemuck::cast_slice(&words()?).to_vec();
            dst.upload_bytes(OP, t.shape(), t.dtype(), &bytes)?
        };
        let mailbox = mesh.extension::<Mailbox>();
        let mut queues = lock(&mailbox.0);
        queues
            .entry((channel, from, to))
            .or_default()
            .push_back(moved);
    }
    mesh.record_comm(Collective::Send, t.byte_len());
    Ok(())
}

/// Rank `to` of `mesh` receives the oldest tensor rank `from` sent it on
/// `channel`, which must have `shape` and `dtype`. Over MPI only the
/// process driving `to` calls it; in one process the send must come first.
pub fn recv(
    mesh: &Mesh,
    from: usize,
    to: usize,
    channel: Channel,
    shape: &[usize],
    dtype: DType,
) -> Result<LocalTensor> {
    const OP: &str = "comm::recv";
    check_pair(OP, mesh, from, to)?;
    let dst = mesh.rank(to)?;
    if mesh.is_multi_process() {
        let len: usize = shape.iter().product();
        let words = mpi::recv(mesh, from, channel as u32, dtype, len)?;
        return dst.upload_bytes(OP, shape, dtype, bytemuck::cast_slice(&words));
    }
    let mailbox = mesh.extension::<Mailbox>();
    let mut queues = lock(&mailbox.0);
    let queue = queues.entry((channel, from, to)).or_default();
    match queue.front() {
        None => Err(Error::invalid(
            OP,
            format!(
                "rank {from} has sent rank {to} nothing on {channel:?}: in one process a \
                 receive follows its send"
            ),
        )),
        Some(t) if t.shape() != shape || t.dtype() != dtype => Err(Error::invalid(
            OP,
            format!(
                "rank {from} sent a {:?} {} tensor, rank {to} expected {shape:?} {dtype}: the two \
                 sides must send and receive the same tensors in the same order",
                t.shape(),
                t.dtype()
            ),
        )),
        Some(_) => Ok(queue.pop_front().expect("checked above")),
    }
}

/// Forget every tensor sent within this process on `mesh` and not yet
/// received: what a step that failed midway left queued, so that the next
/// step does not receive it. Returns how many there were. (Over MPI a
/// failed step's messages cannot be recalled; end the processes.)
pub fn discard_queued(mesh: &Mesh) -> usize {
    let mailbox = mesh.extension::<Mailbox>();
    let mut queues = lock(&mailbox.0);
    let n = queues.values().map(VecDeque::len).sum();
    queues.clear();
    n
}

/// Wait until every message this process sent on `mesh` has left (over
/// MPI; in one process sends complete at once).
pub fn wait_sends(mesh: &Mesh) -> Result<()> {
    let pending = std::mem::take(&mut *lock(&mesh.extension::<InFlight>().0));
    pending.into_iter().try_for_each(PendingSend::wait)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
