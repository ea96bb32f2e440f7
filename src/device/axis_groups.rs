//! The groups of a mesh with named axes ([`Mesh::axis`], [`Mesh::sub`],
//! [`Mesh::group_of`]): made on first use, kept by the root while anything
//! holds them (see `axes.rs`).

use std::sync::{Arc, Mutex, PoisonError};

use super::axes::AxisGroup;
use super::mesh::{Arrangement, Mesh, MeshInner};
use super::rank::Rank;
use crate::error::{Error, Result};

impl Mesh {
    /// The sub-mesh of this process's group along axis `name` (its
    /// tensor-parallel group for `"tp"`). A process driving ranks of several
    /// such groups (simulated ranks) uses [`Mesh::axis_groups`].
    pub fn axis(&self, name: &str) -> Result<Mesh> {
        self.sub(&[name])
    }

    /// Every group along axis `name` that has a rank in this process, in
    /// order of the other axes' coordinates (row-major).
    pub fn axis_groups(&self, name: &str) -> Result<Vec<Mesh>> {
        self.sub_groups(&[name])
    }

    /// The sub-mesh of this process's group along several axes (e.g. a
    /// pipeline stage's `["dp", "tp"]`); see [`Mesh::axis`].
    pub fn sub(&self, names: &[&str]) -> Result<Mesh> {
        let mut groups = self.sub_groups(names)?;
        if groups.len() == 1 {
            return Ok(groups.remove(0));
        }
        Err(Error::invalid(
            "Mesh::sub",
            format!(
                "this process drives ranks of {} groups along {names:?}; pick one with \
                 Mesh::sub_groups / axis_groups, or Mesh::group_of(names, rank)",
                groups.len()
            ),
        ))
    }

    /// Every group along the axes `names` that has a rank in this process.
    pub fn sub_groups(&self, names: &[&str]) -> Result<Vec<Mesh>> {
        let mut out: Vec<Mesh> = Vec::new();
        for r in self.ranks() {
            let g = self.group_of(names, r.index())?;
            if !out.iter().any(|m| m.same_as(&g)) {
                out.push(g);
            }
        }
        Ok(out)
    }

    /// The group along the axes `names` that holds this mesh's rank `rank`.
    pub fn group_of(&self, names: &[&str], rank: usize) -> Result<Mesh> {
        const OP: &str = "Mesh::group_of";
        let a = self.arranged(OP)?;
        self.check_rank(OP, rank)?;
        let root = a.root.as_ref().unwrap_or(self);
        let ra = root.arranged(OP)?;
        let mut mask = 0u32;
        for name in names {
            self.axis_position(OP, name)?;
            let d = ra.names.iter().position(|n| n == name).unwrap_or(0);
            mask |= 1 << d;
        }
        if names.is_empty() {
            return Err(Error::invalid(OP, "name at least one axis"));
        }
        group(root, ra, mask, a.members[rank])
    }

    /// Rank `rank`'s group along each of this mesh's axes: its size, the
    /// rank's index in it and its ranks (as root ranks), as
    /// `parallel_group_info()` of ml.models.parallel reports them.
    pub fn parallel_group_info(&self, rank: usize) -> Result<Vec<AxisGroup>> {
        let a = self.arranged("Mesh::parallel_group_info")?;
        let c = self.coords_of(rank)?;
        a.names
            .iter()
            .zip(&a.sizes)
            .zip(c)
            .map(|((name, &size), index)| {
                let g = self.group_of(&[name], rank)?;
                Ok(AxisGroup {
                    axis: name.clone(),
                    size,
                    index,
                    peers: g.arranged("Mesh::parallel_group_info")?.members.clone(),
                })
            })
            .collect()
    }
}

/// The root's group along the axes in `mask` holding root rank `g`: made
/// once and shared while held (the whole root when `mask` spans every axis).
fn group(root: &Mesh, ra: &Arrangement, mask: u32, g: usize) -> Result<Mesh> {
    if mask.count_ones() as usize == ra.names.len() {
        return Ok(root.clone());
    }
    let (id, members) = ra.group(mask, g);
    let mut subs = ra.subs.lock().unwrap_or_else(PoisonError::into_inner);
    subs.retain(|(_, w)| w.strong_count() > 0);
    if let Some(inner) = subs
        .iter()
        .find(|(k, _)| *k == (mask, id))
        .and_then(|(_, w)| w.upgrade())
    {
        return Ok(Mesh { inner });
    }
    let ranks: Vec<Rank> = members
        .iter()
        .enumerate()
        .filter_map(|(pos, &m)| {
            root.local_position(m).map(|i| Rank {
                index: pos,
                device: root.ranks()[i].device().clone(),
            })
        })
        .collect();
    let i = &root.inner;
    let inner = Arc::new(MeshInner {
        ranks,
        world: members.len(),
        layout: i.layout,
        #[cfg(feature = "mpi")]
        process: i.process.clone(),
        extensions: Default::default(),
        arrangement: Some(Arrangement {
            names: Arrangement::pick(&ra.names, mask, true),
            sizes: Arrangement::pick(&ra.sizes, mask, true),
            members,
            root: Some(root.clone()),
            subs: Mutex::default(),
        }),
        instance: i.instance.clone(),
    });
    subs.push(((mask, id), Arc::downgrade(&inner)));
    Ok(Mesh { inner })
}
