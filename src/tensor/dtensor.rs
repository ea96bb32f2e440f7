//! [`DTensor`]: one logical tensor held as one shard per rank of a mesh (per
//! rank this process addresses, in a multi-process mesh), with a
//! [`Placement`] (`placement.rs`) saying how the shards make up the logical
//! value, and
//! [`DTensor::redistribute`] (in `redistribute.rs`) to move between
//! placements with collectives. Moving its value to and from the host
//! (`from_host*`, `to_host*`) is in `host.rs`.

use std::sync::Arc;

use super::autograd::TapeNode;
use super::placement::local_shape_in_units;
// Where it was defined before `placement.rs`: files written against that
// path still build.
pub(super) use super::placement::Placement;
use crate::device::{LocalTensor, Mesh};
use crate::element::DType;
use crate::error::{Error, Result};

/// A tensor distributed over the ranks of a mesh. Cloning is cheap.
#[derive(Clone, Debug)]
pub struct DTensor {
    mesh: Mesh,
    shards: Vec<LocalTensor>,
    shape: Vec<usize>,
    placement: Placement,
    /// Under `Shard(d)`: dim d is split in whole units of this many (1 unless
    /// a layer keeps whole attention heads per rank); 1 for other placements.
    unit: usize,
    /// Its node on the autodiff tape when tracked (`autograd/`).
    pub(super) node: Option<Arc<TapeNode<DTensor>>>,
}

impl DTensor {
    pub(super) fn check_placement(
        op: &'static str,
        shape: &[usize],
        placement: Placement,
    ) -> Result<()> {
        Self::check_units(op, shape, placement, 1)
    }

    pub(super) fn check_units(
        op: &'static str,
        shape: &[usize],
        placement: Placement,
        unit: usize,
    ) -> Result<()> {
        if unit == 0 {
            return Err(Error::invalid(op, "a shard unit must be at least 1"));
        }
        if let Placement::Shard(d) = placement {
            if d >= shape.len() {
                return Err(Error::OutOfRange {
                    op,
                    what: "shard dim",
                    value: d as i64,
                    bound: shape.len(),
                });
            }
            if !shape[d].is_multiple_of(unit) {
                return Err(Error::invalid(
                    op,
                    format!(
                        "dim {d} of size {} is not a whole number of units of {unit}",
                        shape[d]
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The unit the sharded dim is split in (1 unless a layer keeps whole
    /// heads per rank, or for placements other than `Shard`).
    pub fn shard_unit(&self) -> usize {
        self.unit
    }

    /// Wrap existing shards (one per rank in [`Mesh::ranks`], in that order:
    /// only this process's ranks in a multi-process mesh) after checking
    /// their ranks, dtypes and shapes against `shape` and `placement`.
    pub fn from_shards(
        mesh: &Mesh,
        shards: Vec<LocalTensor>,
        shape: &[usize],
        placement: Placement,
    ) -> Result<DTensor> {
        Self::from_shards_in_units(mesh, shards, shape, placement, 1)
    }

    /// Like [`DTensor::from_shards`], with a `Shard(d)` dim split in whole
    /// units of `unit` elements (the first ranks take one more unit).
    pub fn from_shards_in_units(
        mesh: &Mesh,
        shards: Vec<LocalTensor>,
        shape: &[usize],
        placement: Placement,
        unit: usize,
    ) -> Result<DTensor> {
        const OP: &str = "DTensor::from_shards";
        Self::check_units(OP, shape, placement, unit)?;
        let (p, n) = (mesh.size(), mesh.ranks().len());
        if shards.len() != n {
            return Err(Error::invalid(
                OP,
                format!(
                    "expected {n} shards (one per rank this process addresses), got {}",
                    shards.len()
                ),
            ));
        }
        let dtype = shards[0].dtype();
        for (s, rank) in shards.iter().zip(mesh.ranks()) {
            // Shard i sits on mesh.ranks()[i]; its shape is that global rank's.
            let r = rank.index();
            if s.rank_index() != r || s.device().id() != rank.device().id() {
                return Err(Error::RankMismatch {
                    op: OP,
                    a: r,
                    b: s.rank_index(),
                });
            }
            s.expect_dtype(OP, dtype)?;
            let want = local_shape_in_units(shape, placement, p, r, unit);
            if s.shape() != want.as_slice() {
                return Err(Error::shape(OP, want, s.shape()));
            }
        }
        Ok(DTensor::new(mesh, shards, shape.to_vec(), placement, unit))
    }

    pub(super) fn new(
        mesh: &Mesh,
        shards: Vec<LocalTensor>,
        shape: Vec<usize>,
        placement: Placement,
        unit: usize,
    ) -> DTensor {
        let unit = if matches!(placement, Placement::Shard(_)) {
            unit
        } else {
            1
        };
        DTensor {
            mesh: mesh.clone(),
            shards,
            shape,
            placement,
            unit,
            node: None,
        }
    }

    /// Same mesh, new shards (used by per-rank ops; unchecked). The shard
    /// unit carries over when the placement does; a new `Shard` placement
    /// splits in units of 1 (see [`DTensor::with_shards_in_units`]).
    pub(crate) fn with_shards(
        &self,
        shards: Vec<LocalTensor>,
        shape: Vec<usize>,
        placement: Placement,
    ) -> DTensor {
        let unit = if placement == self.placement {
            self.unit
        } else {
            1
        };
        DTensor::new(&self.mesh, shards, shape, placement, unit)
    }

    /// [`DTensor::with_shards`] with an explicit shard unit (a column layer's
    /// output is split like its weight's rows).
    pub(crate) fn with_shards_in_units(
        &self,
        shards: Vec<LocalTensor>,
        shape: Vec<usize>,
        placement: Placement,
        unit: usize,
    ) -> DTensor {
        DTensor::new(&self.mesh, shards, shape, placement, unit)
    }

    /// The mesh.
    pub fn mesh(&self) -> &Mesh {
        &self.mesh
    }

    /// The logical (global) shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The placement.
    pub fn placement(&self) -> Placement {
        self.placement
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.shards[0].dtype()
    }

    /// One shard per rank this process addresses ([`Mesh::ranks`]), in rank
    /// order: every rank's in a single-process mesh, only this process's in a
    /// multi-process one. `shards()[i].rank_index()` is the global rank.
    pub fn shards(&self) -> &[LocalTensor] {
        &self.shards
    }

    /// Global rank `r`'s shard; an error when `r` is past the mesh or lives
    /// in another process (use [`DTensor::shards`] for this process's
    /// shards, or [`DTensor::to_host`] for the whole value).
    pub fn local(&self, r: usize) -> Result<&LocalTensor> {
        const OP: &str = "DTensor::local";
        if r >= self.mesh.size() {
            return Err(Error::OutOfRange {
                op: OP,
                what: "rank",
                value: r as i64,
                bound: self.mesh.size(),
            });
        }
        let i = self.mesh.local_position(r).ok_or_else(|| {
            Error::invalid(
                OP,
                format!(
                    "rank {r} lives in another process: use shards() for this process's \
                     shards, or to_host() for the whole value"
                ),
            )
        })?;
        self.shard_at(i)
    }

    /// The shard at position `i` of [`DTensor::shards`] (tensors on one mesh
    /// pair up by position).
    pub(crate) fn shard_at(&self, i: usize) -> Result<&LocalTensor> {
        self.shards.get(i).ok_or(Error::OutOfRange {
            op: "DTensor::shard_at",
            what: "shard position",
            value: i as i64,
            bound: self.shards.len(),
        })
    }
}
