//! Checking a collective's participants before anything moves: tensors on
//! distinct ranks of this mesh, one dtype, compatible shapes, dims in range.
//! A bad group is an [`Error`], never a panic, and nothing is recorded.

use crate::device::{LocalTensor, Mesh, Rank};
use crate::element::DType;
use crate::error::{Error, Result};

pub(super) fn bytes_of(shards: &[LocalTensor]) -> u64 {
    shards.iter().map(LocalTensor::byte_len).sum()
}

/// The mesh's [`Rank`] for index `r`, if `device_id` is that rank's device
/// (a tensor or rank from another mesh fails this).
fn member(mesh: &Mesh, r: usize, device_id: u64) -> Option<Rank> {
    mesh.local_position(r)
        .map(|i| &mesh.ranks()[i])
        .filter(|rank| rank.device().id() == device_id)
        .cloned()
}

fn foreign(op: &'static str, r: usize, mesh: &Mesh) -> Error {
    let what = if r < mesh.size() && mesh.is_multi_process() && mesh.local_position(r).is_none() {
        format!("rank {r} lives in another process")
    } else if r < mesh.size() {
        format!("rank {r} belongs to another mesh")
    } else {
        format!("rank {r} is not one of this mesh's {} ranks", mesh.size())
    };
    Error::invalid(
        op,
        format!("{what}; pass tensors and ranks of the mesh the collective runs on"),
    )
}

fn check_distinct(op: &'static str, indices: &[usize]) -> Result<()> {
    for (i, a) in indices.iter().enumerate() {
        if indices[..i].contains(a) {
            return Err(Error::invalid(
                op,
                format!(
                    "rank {a} appears twice in the group {indices:?}; pass one tensor per participating rank"
                ),
            ));
        }
    }
    Ok(())
}

/// Shards form a group: at least one, on distinct ranks of this mesh, one dtype.
pub(super) fn check_group(
    op: &'static str,
    mesh: &Mesh,
    shards: &[LocalTensor],
) -> Result<Vec<Rank>> {
    if shards.is_empty() {
        return Err(Error::invalid(
            op,
            "needs at least one tensor (one per participating rank)",
        ));
    }
    let ranks = shards
        .iter()
        .map(|s| {
            member(mesh, s.rank_index(), s.device().id())
                .ok_or_else(|| foreign(op, s.rank_index(), mesh))
        })
        .collect::<Result<Vec<_>>>()?;
    check_distinct(op, &ranks.iter().map(Rank::index).collect::<Vec<_>>())?;
    let dtype: DType = shards[0].dtype();
    for s in &shards[1..] {
        s.expect_dtype(op, dtype)?;
    }
    check_word_sized(op, &shards[0])?;
    Ok(ranks)
}

/// Collectives move and reduce whole 32-bit words: f16 tensors are cast to
/// f32 first, which also makes reductions accumulate in f32.
fn check_word_sized(op: &'static str, t: &LocalTensor) -> Result<()> {
    if t.dtype().size_bytes() == 2 {
        return Err(Error::invalid(
            op,
            "collectives move f32 and i32 tensors; cast f16 and bf16 to f32 first (DTensor::cast or kernels::cast), so sums also accumulate in f32",
        ));
    }
    Ok(())
}

/// Ranks of a rooted collective are distinct ranks of this mesh and include
/// `src`'s rank; returns them and the root's position among them.
pub(super) fn check_rooted(
    op: &'static str,
    mesh: &Mesh,
    src: &LocalTensor,
    ranks: &[Rank],
) -> Result<(Vec<Rank>, usize)> {
    if member(mesh, src.rank_index(), src.device().id()).is_none() {
        return Err(foreign(op, src.rank_index(), mesh));
    }
    check_word_sized(op, src)?;
    let ranks = ranks
        .iter()
        .map(|r| {
            member(mesh, r.index(), r.device().id()).ok_or_else(|| foreign(op, r.index(), mesh))
        })
        .collect::<Result<Vec<_>>>()?;
    let indices: Vec<usize> = ranks.iter().map(Rank::index).collect();
    check_distinct(op, &indices)?;
    let root = indices
        .iter()
        .position(|&r| r == src.rank_index())
        .ok_or_else(|| {
            Error::invalid(
                op,
                format!(
                    "the source lives on rank {}, which is not among the ranks {indices:?}; include the root",
                    src.rank_index()
                ),
            )
        })?;
    Ok((ranks, root))
}

pub(super) fn check_dim(
    op: &'static str,
    what: &'static str,
    dim: usize,
    ndim: usize,
) -> Result<()> {
    if dim >= ndim {
        return Err(Error::OutOfRange {
            op,
            what,
            value: dim as i64,
            bound: ndim,
        });
    }
    Ok(())
}

pub(super) fn check_same_shapes(op: &'static str, shards: &[LocalTensor]) -> Result<()> {
    let want = shards[0].shape();
    for s in &shards[1..] {
        if s.shape() != want {
            return Err(Error::shape(op, want, s.shape()));
        }
    }
    Ok(())
}

/// Same number of dims, equal in every dim but `dim`.
pub(super) fn check_same_except(
    op: &'static str,
    shards: &[LocalTensor],
    dim: usize,
) -> Result<()> {
    let want = shards[0].shape();
    for s in &shards[1..] {
        let got = s.shape();
        let ok = got.len() == want.len()
            && got
                .iter()
                .zip(want)
                .enumerate()
                .all(|(d, (a, b))| d == dim || a == b);
        if !ok {
            let mut expected: Vec<String> = want.iter().map(ToString::to_string).collect();
            expected[dim] = "*".into();
            return Err(Error::ShapeMismatch {
                op,
                expected: format!("[{}] (any size along dim {dim})", expected.join(", ")),
                got: format!("{got:?}"),
            });
        }
    }
    Ok(())
}
