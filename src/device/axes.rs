//! Named axes: a mesh's ranks laid out row-major over axes such as
//! `[("pp", 2), ("dp", 2), ("tp", 2)]` (the last axis fastest: ranks 0 and 1
//! differ only in `tp`), and the sub-meshes of the ranks that differ only
//! along some of them ([`Mesh::axis`], [`Mesh::sub`]), each a [`Mesh`] in
//! its own right.
//!
//! A sub-mesh numbers its ranks 0.. in the row-major order of its own axes
//! and runs on the devices of the mesh the axes were given to (its root), so
//! every layer and model works inside it unchanged; collectives on it run
//! among its ranks only, and it counts its own communication. Sub-meshes are
//! made on first use and kept while anything holds them, so asking twice
//! gives the same mesh ([`Mesh::same_as`]).

use std::sync::{Arc, Mutex};

use super::mesh::{Arrangement, Mesh, MeshInner};
use crate::error::{Error, Result};

/// A rank's group along one axis ([`Mesh::parallel_group_info`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AxisGroup {
    /// The axis's name.
    pub axis: String,
    /// The number of ranks along it.
    pub size: usize,
    /// The rank's index along it (its rank in [`Mesh::axis`]'s sub-mesh).
    pub index: usize,
    /// The group's ranks as ranks of the root mesh, in index order.
    pub peers: Vec<usize>,
}

impl std::fmt::Display for AxisGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: index {} of {}, ranks {:?}",
            self.axis, self.index, self.size, self.peers
        )
    }
}

/// Row-major coordinates of index `i` over `sizes` (the last axis fastest).
pub(super) fn coords(sizes: &[usize], mut i: usize) -> Vec<usize> {
    let mut c = vec![0; sizes.len()];
    for d in (0..sizes.len()).rev() {
        c[d] = i % sizes[d];
        i /= sizes[d];
    }
    c
}

/// The row-major index of coordinates `c` over `sizes`.
fn index(sizes: &[usize], c: &[usize]) -> usize {
    c.iter().zip(sizes).fold(0, |acc, (&x, &n)| acc * n + x)
}

impl Arrangement {
    /// Pick the axes in `mask` (true) or the others (false).
    pub(super) fn pick<T: Clone>(xs: &[T], mask: u32, keep: bool) -> Vec<T> {
        xs.iter()
            .enumerate()
            .filter(|(d, _)| (mask >> d & 1 == 1) == keep)
            .map(|(_, x)| x.clone())
            .collect()
    }

    /// On the root: the group along the axes in `mask` that holds root rank
    /// `g` (its number: the row-major index of the other axes' coordinates),
    /// and its members in the row-major order of the axes in `mask`.
    pub(super) fn group(&self, mask: u32, g: usize) -> (usize, Vec<usize>) {
        let c = coords(&self.sizes, g);
        let id = index(
            &Self::pick(&self.sizes, mask, false),
            &Self::pick(&c, mask, false),
        );
        let inner = Self::pick(&self.sizes, mask, true);
        let n: usize = inner.iter().product();
        let members = (0..n)
            .map(|pos| {
                let mut at = coords(&inner, pos).into_iter();
                let full: Vec<usize> = (0..c.len())
                    .map(|d| match mask >> d & 1 {
                        1 => at.next().unwrap_or(0),
                        _ => c[d],
                    })
                    .collect();
                index(&self.sizes, &full)
            })
            .collect();
        (id, members)
    }
}

fn check_axes(op: &'static str, axes: &[(&str, usize)], world: usize) -> Result<()> {
    if axes.is_empty() || axes.len() > 16 {
        return Err(Error::invalid(
            op,
            "give between 1 and 16 axes, e.g. [(\"dp\", 2), (\"tp\", 2)]",
        ));
    }
    for (i, (name, size)) in axes.iter().enumerate() {
        if name.is_empty() || *size == 0 {
            return Err(Error::invalid(
                op,
                format!(
                    "axis {i} ({name:?}, {size}): every axis needs a name and at least one rank"
                ),
            ));
        }
        if axes[..i].iter().any(|(n, _)| n == name) {
            return Err(Error::invalid(op, format!("axis {name:?} is named twice")));
        }
    }
    let product = axes.iter().try_fold(1usize, |acc, a| acc.checked_mul(a.1));
    if product != Some(world) {
        let product = product.map_or("more than usize holds".to_string(), |p| p.to_string());
        return Err(Error::invalid(
            op,
            format!(
                "the axis sizes {axes:?} multiply to {product}, but the mesh has {world} ranks; \
                 give sizes whose product is the world size"
            ),
        ));
    }
    Ok(())
}

impl Mesh {
    /// The same ranks with named axes, laid out row-major (the last axis
    /// fastest): `with_axes(&[("dp", 2), ("tp", 2)])` puts ranks 0, 1 in
    /// one tensor-parallel group and ranks 0, 2 in one data-parallel group.
    /// The sizes must multiply to [`Mesh::size`]. A new mesh (its own
    /// communication counts) over the same devices; tensors of this mesh's
    /// ranks are valid on it. [`MeshBuilder::axes`](super::MeshBuilder::axes)
    /// builds one directly.
    pub fn with_axes(&self, axes: &[(&str, usize)]) -> Result<Mesh> {
        const OP: &str = "Mesh::with_axes";
        if self.inner.arrangement.is_some() {
            return Err(Error::invalid(
                OP,
                "this mesh has named axes already; give the axes to a mesh without them",
            ));
        }
        check_axes(OP, axes, self.size())?;
        let i = &self.inner;
        Ok(Mesh {
            inner: Arc::new(MeshInner {
                ranks: i.ranks.clone(),
                world: i.world,
                layout: i.layout,
                #[cfg(feature = "mpi")]
                process: i.process.clone(),
                extensions: Default::default(),
                arrangement: Some(Arrangement {
                    names: axes.iter().map(|a| a.0.to_string()).collect(),
                    sizes: axes.iter().map(|a| a.1).collect(),
                    members: (0..i.world).collect(),
                    root: None,
                    subs: Mutex::default(),
                }),
                instance: i.instance.clone(),
            }),
        })
    }

    /// The axes as (name, size), in order; empty for a mesh without named
    /// axes. A sub-mesh has the axes it spans.
    pub fn axes(&self) -> Vec<(String, usize)> {
        self.inner.arrangement.as_ref().map_or(Vec::new(), |a| {
            a.names
                .iter()
                .cloned()
                .zip(a.sizes.iter().copied())
                .collect()
        })
    }

    /// The number of ranks along axis `name`.
    pub fn axis_size(&self, name: &str) -> Result<usize> {
        let a = self.arranged("Mesh::axis_size")?;
        let d = self.axis_position("Mesh::axis_size", name)?;
        Ok(a.sizes[d])
    }

    /// Rank `rank` of this mesh as a rank of the mesh its axes were given
    /// to (itself, unless this is a sub-mesh). MPI process `i` is rank `i`
    /// of that mesh.
    pub fn root_rank(&self, rank: usize) -> Result<usize> {
        self.check_rank("Mesh::root_rank", rank)?;
        Ok(self
            .inner
            .arrangement
            .as_ref()
            .map_or(rank, |a| a.members[rank]))
    }

    /// Rank `rank`'s coordinates along this mesh's axes.
    pub fn coords_of(&self, rank: usize) -> Result<Vec<usize>> {
        let a = self.arranged("Mesh::coords_of")?;
        self.check_rank("Mesh::coords_of", rank)?;
        Ok(coords(&a.sizes, rank))
    }

    /// The coordinates of this process's rank (one rank per process, as
    /// over MPI; a process driving several ranks uses [`Mesh::coords_of`]).
    pub fn coords(&self) -> Result<Vec<usize>> {
        match self.ranks() {
            [one] => self.coords_of(one.index()),
            many => Err(Error::invalid(
                "Mesh::coords",
                format!(
                    "this process drives {} ranks; ask for one with Mesh::coords_of(rank)",
                    many.len()
                ),
            )),
        }
    }

    /// The mesh the axes were given to (itself for that mesh or a mesh
    /// without axes): a sub-mesh's way back to the whole.
    pub fn root(&self) -> Mesh {
        self.inner
            .arrangement
            .as_ref()
            .and_then(|a| a.root.clone())
            .unwrap_or_else(|| self.clone())
    }

    /// The root ranks of this mesh's ranks, when it has axes.
    pub(crate) fn members(&self) -> Option<&[usize]> {
        self.inner
            .arrangement
            .as_ref()
            .map(|a| a.members.as_slice())
    }

    pub(super) fn arranged(&self, op: &'static str) -> Result<&Arrangement> {
        self.inner.arrangement.as_ref().ok_or_else(|| {
            Error::invalid(
                op,
                "this mesh has no named axes: build it with MeshBuilder::axes or Mesh::with_axes",
            )
        })
    }

    pub(super) fn axis_position(&self, op: &'static str, name: &str) -> Result<usize> {
        let a = self.arranged(op)?;
        a.names.iter().position(|n| n == name).ok_or_else(|| {
            Error::invalid(
                op,
                format!("no axis {name:?}; this mesh's axes are {:?}", a.names),
            )
        })
    }

    pub(super) fn check_rank(&self, op: &'static str, rank: usize) -> Result<()> {
        if rank >= self.size() {
            return Err(Error::OutOfRange {
                op,
                what: "rank",
                value: rank as i64,
                bound: self.size(),
            });
        }
        Ok(())
    }
}
