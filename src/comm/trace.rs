//! Collectives on the trace: while a mesh traces
//! ([`Mesh::start_trace`](crate::device::Mesh::start_trace)), each
//! collective and each ring step is one host-time span on the collectives
//! track of every participating rank, named by its [`Collective`] kind, with
//! `bytes` (the whole payload, as [`Mesh::comm_stats`] counts it),
//! `rank_bytes` (the part this rank contributed) and `participants`.
//! Free when the mesh does not trace: no span begins.

use super::stats::Collective;
use crate::device::{HostSpan, Mesh};

/// A collective being timed on a traced mesh.
pub(super) struct CommSpan {
    mesh: Mesh,
    span: HostSpan,
    kind: Collective,
    /// (rank, bytes it contributed) per participant.
    parts: Vec<(usize, u64)>,
}

impl CommSpan {
    /// Begin timing `kind` if `mesh` traces; `parts` (rank, bytes it
    /// contributed) is only read then.
    pub(super) fn begin(
        mesh: &Mesh,
        kind: Collective,
        parts: impl Iterator<Item = (usize, u64)>,
    ) -> Option<CommSpan> {
        let span = mesh.host_span()?;
        Some(CommSpan {
            mesh: mesh.clone(),
            span,
            kind,
            parts: parts.collect(),
        })
    }
}

/// End a span begun by [`CommSpan::begin`] (nothing when it did not begin).
pub(super) fn finish_span(span: Option<CommSpan>) {
    let Some(CommSpan {
        mesh,
        span,
        kind,
        parts,
    }) = span
    else {
        return;
    };
    let total: u64 = parts.iter().map(|&(_, b)| b).sum();
    let n = parts.len() as u64;
    span.finish(
        &mesh,
        &format!("{kind:?}"),
        "comm",
        parts.into_iter().map(|(rank, bytes)| {
            (
                rank,
                vec![("bytes", total), ("rank_bytes", bytes), ("participants", n)],
            )
        }),
    );
}
