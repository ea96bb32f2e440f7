//! A [`Parameter`](super::Parameter) whose rows several ranks hold copies
//! of ([`Holding`]: grouped-query attention's key/value projections): the
//! value is the expanded tensor, the master the logical one, and
//! checkpoints, `master()` and `load_master` see only the logical tensor.

use crate::device::Mesh;
use crate::error::Result;
use crate::tensor::{DTensor, Holding};

/// The logical shape of a held parameter and which of its rows each rank
/// holds (in rows of dim 0).
#[derive(Clone, Debug)]
pub(crate) struct Held {
    pub(crate) holding: Holding,
    pub(crate) shape: Vec<usize>,
}

impl Held {
    /// Elements per row of dim 0.
    fn row(&self) -> usize {
        self.shape.iter().skip(1).product()
    }

    /// The logical master from the expanded tensor's host values (rank
    /// order): each row from its first holder.
    pub(crate) fn to_master(&self, expanded: &[f32]) -> Vec<f32> {
        let row = self.row();
        let mut out = Vec::with_capacity(self.holding.total * row);
        for i in self.holding.first_holders() {
            out.extend_from_slice(&expanded[i * row..(i + 1) * row]);
        }
        out
    }

    /// The expanded tensor's host values from a logical master.
    pub(crate) fn expand(&self, master: &[f32]) -> Vec<f32> {
        let row = self.row();
        let mut out = Vec::with_capacity(self.holding.expanded() * row);
        for j in self.holding.logical_rows() {
            out.extend_from_slice(&master[j * row..(j + 1) * row]);
        }
        out
    }

    /// The expanded tensor of a logical master on `mesh`.
    pub(crate) fn upload(&self, mesh: &Mesh, master: &[f32]) -> Result<DTensor> {
        let mut shape = self.shape.clone();
        shape[0] = self.holding.expanded();
        let data = self.expand(master);
        DTensor::from_host_in_units(
            mesh,
            &shape,
            &data,
            crate::tensor::Placement::Shard(0),
            self.holding.per,
        )
    }
}
