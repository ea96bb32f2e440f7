//! [`Pipe`]: a tensor crossing from one pipeline stage to another, as an
//! operation on the tape.
//!
//! A mesh with a pipeline axis (`"pp"`) holds one stage per coordinate
//! along it; each stage's model lives on a group of the other axes (its
//! tensor-parallel group), and the groups of all stages have the same size.
//! Shard `j` of an activation on stage `s` goes to rank `j` of stage `t`'s
//! group, the member of the same pipeline group (the ranks that differ
//! only along the axis): one [`send`](crate::comm::send) per shard,
//! counted on that pipeline group.
//!
//! [`Pipe::send`] returns a one-element token recorded on the tape; its
//! backward (`token.backward()`) *receives* the activation's gradient from
//! stage `t` and carries on through stage `s`. [`Pipe::recv`] makes the
//! received activation a source of stage `t`'s tape; its backward *sends*
//! the gradient back. So each stage runs its own forward and backward, in
//! any order a schedule picks (1F1B), in one process or over MPI.

use crate::comm::{self, Channel};
use crate::device::{LocalTensor, Mesh, download_many};
use crate::element::DType;
use crate::error::{Error, Result};
use crate::tensor::{
    DTensor, Placement, grad_placement, local_shape, placed, record, record_source,
};

/// Passes activations and their gradients between the stages of one axis
/// of a mesh (see the module doc). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Pipe {
    root: Mesh,
    axis: String,
    stages: usize,
    /// The axis's groups this process drives, held so that each keeps its
    /// queues and counts between steps.
    groups: Vec<Mesh>,
}

impl Pipe {
    /// Stages along axis `axis` of `mesh` (or of the mesh it was taken from).
    pub fn new(mesh: &Mesh, axis: &str) -> Result<Pipe> {
        let root = mesh.root();
        Ok(Pipe {
            stages: root.axis_size(axis)?,
            groups: root.axis_groups(axis)?,
            axis: axis.to_string(),
            root,
        })
    }

    /// The number of stages (the axis's size).
    pub fn stages(&self) -> usize {
        self.stages
    }

    /// The axis's name.
    pub fn axis(&self) -> &str {
        &self.axis
    }

    /// The stage a group of the other axes belongs to (its coordinate along
    /// the axis); an error for a mesh not taken from this one, or spanning
    /// the axis.
    pub fn stage_of(&self, group: &Mesh) -> Result<usize> {
        const OP: &str = "Pipe::stage_of";
        if !group.root().same_as(&self.root) {
            return Err(Error::invalid(
                OP,
                "the mesh is not taken from the pipeline's mesh: build each stage on one of its Mesh::sub_groups",
            ));
        }
        if group.axes().iter().any(|(a, _)| *a == self.axis) {
            return Err(Error::invalid(
                OP,
                format!(
                    "a stage's mesh spans the {:?} axis itself: build it on a group without it",
                    self.axis
                ),
            ));
        }
        let first = group.ranks().first().map_or(0, |r| r.index());
        self.place(OP, group, first).map(|(_, stage)| stage)
    }

    /// The pipeline group of `group`'s rank `r`, and that rank's stage.
    fn place(&self, op: &'static str, group: &Mesh, r: usize) -> Result<(Mesh, usize)> {
        let root_rank = group.root_rank(r)?;
        let line = self.root.group_of(&[self.axis.as_str()], root_rank)?;
        let stage = line
            .members()
            .and_then(|m| m.iter().position(|&x| x == root_rank))
            .ok_or_else(|| Error::invalid(op, "the rank is not on the pipeline axis"))?;
        Ok((line, stage))
    }

    fn check_stage(&self, op: &'static str, what: &'static str, s: usize) -> Result<()> {
        if s >= self.stages {
            return Err(Error::OutOfRange {
                op,
                what,
                value: s as i64,
                bound: self.stages,
            });
        }
        Ok(())
    }

    /// Send `x` (on a stage's group, f32) to the same ranks of stage `to`,
    /// which receives it with [`Pipe::recv`]. Returns a one-element token:
    /// when `x` is tracked, `token.backward()` receives `x`'s gradient from
    /// stage `to` and runs this stage's backward with it.
    pub fn send(&self, x: &DTensor, to: usize) -> Result<DTensor> {
        const OP: &str = "Pipe::send";
        self.check_stage(OP, "stage", to)?;
        self.check_f32(OP, x.dtype())?;
        let from = self.stage_of(x.mesh())?;
        if from == to {
            return Err(Error::invalid(OP, "a stage cannot send to itself"));
        }
        let pipe = self.clone();
        record(OP, &[x], || {
            for s in x.shards() {
                let (line, stage) = self.place(OP, x.mesh(), s.rank_index())?;
                comm::send(&line, stage, to, Channel::Activation, s)?;
            }
            let token = DTensor::from_host(x.mesh(), &[1], &[0.0], Placement::Replicate)?;
            let (mesh, shape) = (x.mesh().clone(), x.shape().to_vec());
            let placement = grad_placement(x.placement());
            Ok((token, move |_: &DTensor| {
                let g = pipe.take(&mesh, &shape, to, Channel::Gradient, placement)?;
                Ok(vec![Some(g)])
            }))
        })
    }

    /// Receive on `group` (a group of stage `t`) the tensor of `shape`,
    /// `placement` (f32) that stage `from` sent with [`Pipe::send`]. In grad
    /// mode the result is tracked, and backward through it sends its
    /// gradient back to stage `from`.
    pub fn recv(
        &self,
        group: &Mesh,
        from: usize,
        shape: &[usize],
        placement: Placement,
    ) -> Result<DTensor> {
        const OP: &str = "Pipe::recv";
        self.check_stage(OP, "stage", from)?;
        if self.stage_of(group)? == from {
            return Err(Error::invalid(OP, "a stage cannot receive from itself"));
        }
        let x = self.take(group, shape, from, Channel::Activation, placement)?;
        let pipe = self.clone();
        Ok(record_source(OP, x, move |dy: &DTensor| {
            let g = placed(dy, placement)?;
            let g = if g.dtype() == DType::F32 {
                g
            } else {
                g.cast(DType::F32)?
            };
            for s in g.shards() {
                let (line, stage) = pipe.place(OP, g.mesh(), s.rank_index())?;
                comm::send(&line, stage, from, Channel::Gradient, s)?;
            }
            Ok(())
        }))
    }

    /// Receive, on each rank of `mesh`, its shard of a tensor of `shape`
    /// placed `placement` from stage `from` on `channel`.
    fn take(
        &self,
        mesh: &Mesh,
        shape: &[usize],
        from: usize,
        channel: Channel,
        placement: Placement,
    ) -> Result<DTensor> {
        let shards = mesh
            .ranks()
            .iter()
            .map(|r| {
                let (line, stage) = self.place("Pipe::recv", mesh, r.index())?;
                let shape = local_shape(shape, placement, mesh.size(), r.index());
                let t: LocalTensor = comm::recv(&line, from, stage, channel, &shape, DType::F32)?;
                Ok(t.retagged(r.index()))
            })
            .collect::<Result<Vec<_>>>()?;
        DTensor::from_shards(mesh, shards, shape, placement)
    }

    fn check_f32(&self, op: &'static str, dtype: DType) -> Result<()> {
        if dtype != DType::F32 {
            return Err(Error::invalid(
                op,
                format!("stages pass f32 tensors, this one is {dtype}: cast it first"),
            ));
        }
        Ok(())
    }

    /// Wait until every message this process sent between stages has left
    /// (over MPI; at once in one process). Call it at the end of a step.
    pub fn wait(&self) -> Result<()> {
        self.groups.iter().try_for_each(comm::wait_sends)
    }

    /// Forget what stages of this process sent each other and did not
    /// receive (a step that failed midway); how many tensors that was.
    pub fn discard_queued(&self) -> usize {
        self.groups.iter().map(comm::discard_queued).sum()
    }

    /// Each pipeline group this process drives (one per rank of a stage's
    /// group), for counting what the axis moved.
    pub fn groups(&self) -> &[Mesh] {
        &self.groups
    }

    /// Stage `from` of the pipeline group of `group`'s rank `r`, with the
    /// group: where a parameter shared between stages is exchanged.
    pub(crate) fn line_of(&self, group: &Mesh, r: usize) -> Result<(Mesh, usize)> {
        self.place("Pipe", group, r)
    }
}

impl Pipe {
    /// Send `t` (an f32 tensor on a stage's group, such as a gradient) to
    /// the same ranks of stage `to`, which adds it with [`Pipe::add_shared`]:
    /// how two stages holding one parameter (a tied embedding) sum its
    /// gradient. Not recorded on the tape.
    pub fn share(&self, t: &DTensor, to: usize) -> Result<()> {
        const OP: &str = "Pipe::share";
        self.check_stage(OP, "stage", to)?;
        self.check_f32(OP, t.dtype())?;
        for s in t.shards() {
            let (line, stage) = self.place(OP, t.mesh(), s.rank_index())?;
            comm::send(&line, stage, to, Channel::Tied, s)?;
        }
        Ok(())
    }

    /// `t` plus the tensor stage `from` [shared](Pipe::share), the lower
    /// stage's term first, so both stages end with the same bits.
    pub fn add_shared(&self, t: &DTensor, from: usize) -> Result<DTensor> {
        const OP: &str = "Pipe::add_shared";
        self.check_stage(OP, "stage", from)?;
        let me = self.stage_of(t.mesh())?;
        let other = self.take(t.mesh(), t.shape(), from, Channel::Tied, t.placement())?;
        let t = t.detach();
        if from < me {
            other.add(&t)
        } else {
            t.add(&other)
        }
    }
}

impl Pipe {
    /// Send token ids from every rank of `group` (a stage's) to the same
    /// ranks of stage `to` (generation: the last stage's choice).
    pub fn send_ids(&self, group: &Mesh, ids: &[i32], to: usize) -> Result<()> {
        self.send_words(
            group,
            Channel::Ids,
            (DType::I32, bytemuck::cast_slice(ids)),
            to,
        )
    }

    /// Receive on `group` the `n` token ids stage `from` sent with
    /// [`Pipe::send_ids`]; an error if its ranks received different ids.
    pub fn recv_ids(&self, group: &Mesh, from: usize, n: usize) -> Result<Vec<i32>> {
        let words = self.recv_words(group, Channel::Ids, (DType::I32, n), from)?;
        Ok(bytemuck::cast_slice(&words).to_vec())
    }

    /// Send f32 `values` (a loss) from every rank of `group` to the same
    /// ranks of stage `to`.
    pub fn send_values(&self, group: &Mesh, values: &[f32], to: usize) -> Result<()> {
        let words = bytemuck::cast_slice(values);
        self.send_words(group, Channel::Loss, (DType::F32, words), to)
    }

    /// Receive on `group` the `n` values stage `from` sent with
    /// [`Pipe::send_values`].
    pub fn recv_values(&self, group: &Mesh, from: usize, n: usize) -> Result<Vec<f32>> {
        let words = self.recv_words(group, Channel::Loss, (DType::F32, n), from)?;
        Ok(bytemuck::cast_slice(&words).to_vec())
    }

    fn send_words(
        &self,
        group: &Mesh,
        channel: Channel,
        (dtype, words): (DType, &[u32]),
        to: usize,
    ) -> Result<()> {
        const OP: &str = "Pipe::send";
        self.check_stage(OP, "stage", to)?;
        let bytes: &[u8] = bytemuck::cast_slice(words);
        for r in group.ranks() {
            let (line, stage) = self.place(OP, group, r.index())?;
            let t = r.upload_bytes(OP, &[words.len()], dtype, bytes)?;
            comm::send(&line, stage, to, channel, &t)?;
        }
        Ok(())
    }

    /// What every rank of `group` received; an error if they differ.
    fn recv_words(
        &self,
        group: &Mesh,
        channel: Channel,
        (dtype, n): (DType, usize),
        from: usize,
    ) -> Result<Vec<u32>> {
        const OP: &str = "Pipe::recv";
        self.check_stage(OP, "stage", from)?;
        let mut got: Option<Vec<u32>> = None;
        for r in group.ranks() {
            let (line, stage) = self.place(OP, group, r.index())?;
            let t = comm::recv(&line, from, stage, channel, &[n], dtype)?;
            let words: Vec<u32> = bytemuck::pod_collect_to_vec(&download_many(&[&t])?[0]);
            match &got {
                Some(g) if *g != words => {
                    return Err(Error::invalid(
                        OP,
                        "the ranks of a stage received different values",
                    ));
                }
                _ => got = Some(words),
            }
        }
        got.ok_or_else(|| Error::invalid(OP, "the group has no rank in this process"))
    }
}
