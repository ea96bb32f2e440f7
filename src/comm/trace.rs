//! Collectives on the trace: while a mesh traces
//! ([`Mesh::start_trace`](crate::device::Mesh::start_trace)), each
//! collective and each ring step is one host-time span on the collectives
//! track of every participating rank, named by its [`Collective`] kind, with
//! `bytes` (the whole payload, as [`Mesh::comm_stats`] counts it),
//! `rank_bytes` (the part this rank contributed) and `participants`.
//! Free when the mesh does not trace: the span never began.

use super::stats::Collective;
use crate::device::{HostSpan, Mesh};

/// End `span` (begun with [`Mesh::host_span`] when the mesh traced) as a
/// `kind` span on each participant of `parts`, given as (rank, bytes it
/// contributed).
pub(super) fn finish_span(
    mesh: &Mesh,
    span: Option<HostSpan>,
    kind: Collective,
    parts: impl Iterator<Item = (usize, u64)>,
) {
    let Some(span) = span else { return };
    let parts: Vec<(usize, u64)> = parts.collect();
    let total: u64 = parts.iter().map(|&(_, b)| b).sum();
    let n = parts.len() as u64;
    span.finish(
        mesh,
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
