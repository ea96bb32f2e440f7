//! Without the `mpi` feature no multi-process mesh can be built, so these
//! are never reached; they keep the transport's match exhaustive.

use crate::device::{LocalTensor, Mesh};
use crate::element::{DType, ReduceOp};
use crate::error::{Error, Result};

fn none<T>() -> Result<T> {
    Err(Error::Mpi(
        "this build has no MPI support: rebuild with `--features mpi`".into(),
    ))
}

pub(crate) fn all_reduce(
    _: &Mesh,
    _: &[LocalTensor],
    _: ReduceOp,
) -> Result<(Vec<LocalTensor>, u64)> {
    none()
}
pub(crate) fn all_gather(_: &Mesh, _: &[LocalTensor], _: usize) -> Result<(Vec<LocalTensor>, u64)> {
    none()
}
pub(crate) fn reduce_scatter(
    _: &Mesh,
    _: &[LocalTensor],
    _: usize,
    _: ReduceOp,
) -> Result<(Vec<LocalTensor>, u64)> {
    none()
}
pub(crate) fn broadcast(_: &Mesh, _: &[LocalTensor], _: usize) -> Result<(Vec<LocalTensor>, u64)> {
    none()
}
pub(crate) fn all_to_all(
    _: &Mesh,
    _: &[LocalTensor],
    _: usize,
    _: usize,
) -> Result<(Vec<LocalTensor>, u64)> {
    none()
}
pub(crate) fn gather_words(_: &Mesh, _: Vec<u32>) -> Result<Vec<Vec<u32>>> {
    none()
}

/// Never built without MPI.
pub(crate) struct MpiShift;

impl MpiShift {
    pub(crate) fn start(_: &Mesh, _: &[LocalTensor]) -> Result<(MpiShift, u64)> {
        none()
    }
    pub(crate) fn finish(self) -> Result<Vec<LocalTensor>> {
        none()
    }
}

/// Never built without MPI.
pub(crate) struct PendingSend;

impl PendingSend {
    pub(crate) fn wait(self) -> Result<()> {
        none()
    }
}
pub(crate) fn send(_: &Mesh, _: usize, _: u32, _: DType, _: &[u32]) -> Result<PendingSend> {
    none()
}
pub(crate) fn recv(_: &Mesh, _: usize, _: u32, _: DType, _: usize) -> Result<Vec<u32>> {
    none()
}
