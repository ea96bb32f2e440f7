//! [`Peers`]: the processes one collective runs among. A whole MPI mesh is
//! every process in rank order; a sub-mesh of named axes
//! ([`Mesh::axis`](crate::device::Mesh::axis)) is its members, in its own
//! rank order, with a sequence counter of its own, since processes outside
//! the group do not run its collectives. Messages still go over the world
//! communicator, addressed by world rank.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::p2p::Traffic;
use crate::device::{Mesh, Process};
use crate::error::{Error, Result};

/// Each sub-group's collective count, the same on every member, kept on
/// the root mesh by member list: a sub-mesh dropped and made again (which
/// one process may do and another not) continues its count.
#[derive(Default)]
struct GroupSeqs(Mutex<HashMap<Vec<usize>, u64>>);

/// The processes of one collective.
pub(super) struct Peers {
    pub(super) process: Arc<Process>,
    /// World rank of each participant, in the group's rank order.
    ranks: Vec<usize>,
    /// This process's position among them.
    pub(super) me: usize,
    /// How errors name the group ("" for the whole mesh).
    label: String,
}

impl Peers {
    /// The participants of a collective on `mesh`, and its sequence number.
    pub(super) fn of(mesh: &Mesh, op: &'static str) -> Result<(Peers, u64)> {
        let (peers, whole) = Peers::members(mesh, op)?;
        let seq = if whole {
            peers.process.next_seq()
        } else {
            let seqs = mesh.root().extension::<GroupSeqs>();
            let mut seqs = seqs.0.lock().unwrap_or_else(PoisonError::into_inner);
            let next = seqs.entry(peers.ranks.clone()).or_default();
            let seq = *next;
            *next += 1;
            seq
        };
        Ok((peers, seq))
    }

    /// The participants of `mesh`, counting nothing (point-to-point
    /// messages, which only two members run), and whether they are the
    /// whole world in order.
    pub(super) fn members(mesh: &Mesh, op: &'static str) -> Result<(Peers, bool)> {
        let process = mesh
            .process()
            .cloned()
            .ok_or_else(|| Error::invalid(op, "not a multi-process mesh"))?;
        process.check_thread(op)?;
        let world = process.size();
        let ranks: Vec<usize> = match mesh.members() {
            Some(m) => m.to_vec(),
            None => (0..world).collect(),
        };
        let whole = ranks.len() == world && ranks.iter().enumerate().all(|(i, &r)| i == r);
        let me = ranks
            .iter()
            .position(|&r| r == process.rank())
            .ok_or_else(|| Error::invalid(op, "this process is not a member of the mesh"))?;
        let label = if whole {
            String::new()
        } else {
            let names: Vec<String> = mesh.axes().into_iter().map(|(n, _)| n).collect();
            format!(" (axis {names:?}, world ranks {ranks:?})")
        };
        Ok((
            Peers {
                process,
                ranks,
                me,
                label,
            },
            whole,
        ))
    }

    /// Number of participants.
    pub(super) fn p(&self) -> usize {
        self.ranks.len()
    }

    /// World rank of participant `r`.
    pub(super) fn world(&self, r: usize) -> usize {
        self.ranks[r]
    }

    /// A batch of messages whose errors name this group.
    pub(super) fn traffic(&self, op: &'static str) -> Result<Traffic> {
        Ok(Traffic::new(&self.process, op)?.in_group(&self.label))
    }
}
