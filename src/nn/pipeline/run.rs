//! [`Pipeline::forward_backward`]: every stage this process drives, run
//! through its 1F1B schedule. A unit of work runs once its input is here:
//! in one process the stage before (forward) or after (backward) of the same
//! pipeline must have run it, so the stages advance in turn; over MPI the
//! neighbour is another process and the receive waits for it.

use std::collections::VecDeque;

use super::{Pipeline, PipelineStage, Work};
use crate::device::Mesh;
use crate::error::{Error, Result};
use crate::tensor::DTensor;

const OP: &str = "Pipeline::forward_backward";

/// One local stage's progress through its schedule.
struct Track {
    stage: usize,
    line: Mesh,
    work: Vec<Work>,
    next: usize,
    forwards: usize,
    backwards: usize,
    /// What each forward left for its backward (a token, or the scaled loss).
    held: VecDeque<DTensor>,
    losses: Vec<DTensor>,
}

impl Pipeline {
    /// One step's forward and backward over micro-batches.
    ///
    /// `stages` are the stages this process drives (one per pipeline in a
    /// multi-process mesh; in one process every stage of every data-parallel
    /// replica), `batches[i]` the `(ids, targets)` of `stages[i]`'s replica,
    /// whole sequences of `seq` tokens (its first stage reads the ids, its
    /// last the targets). The rows split into [`Pipeline::micro_batches`]
    /// equal micro-batches. Returns, per stage, the mean loss over the
    /// micro-batches of its replica (the last stage computes it and sends it
    /// to the others, so every process knows it). Gradients add to
    /// what the parameters hold, so zero them between steps; after an error
    /// midway, zero them and run the step again (in one process; over MPI
    /// a failed step's messages may still be in flight: end the processes).
    pub fn forward_backward(
        &self,
        stages: &mut [&mut dyn PipelineStage],
        batches: &[(&[i32], &[i32])],
        seq: usize,
    ) -> Result<Vec<f32>> {
        let mut tracks = self.check(stages, batches, seq)?;
        // What a step that failed midway left queued must not be received now.
        self.pipe.discard_queued();
        // The shared parameters' gradients so far, set aside: only this
        // step's are summed between the stages, then added to them.
        let before = take_shared(stages);
        let total: usize = tracks.iter().map(|t| t.work.len()).sum();
        let mut done = 0;
        while done < total {
            let mut moved = false;
            for i in 0..tracks.len() {
                while let Some(&w) = tracks[i].work.get(tracks[i].next) {
                    if !self.ready(&tracks, i, w) {
                        break;
                    }
                    self.run(&mut tracks[i], &*stages[i], batches[i], seq, w)?;
                    (tracks[i].next, done, moved) = (tracks[i].next + 1, done + 1, true);
                }
            }
            if !moved {
                return Err(Error::invalid(
                    OP,
                    "the stages given cannot proceed: give every stage of each pipeline this process drives",
                ));
            }
        }
        self.sum_shared(stages)?;
        restore_shared(stages, before)?;
        let last = self.stages() - 1;
        let mut losses = vec![0.0f32; tracks.len()];
        for (i, t) in tracks.iter().enumerate().filter(|(_, t)| t.stage == last) {
            let mut sum = 0.0;
            for l in &t.losses {
                sum += l.to_host()?[0];
            }
            losses[i] = sum / self.micro_batches as f32;
            for other in 0..last {
                self.pipe
                    .send_values(stages[i].stage_mesh(), &losses[i..=i], other)?;
            }
        }
        for (i, _) in tracks.iter().enumerate().filter(|(_, t)| t.stage < last) {
            losses[i] = self.pipe.recv_values(stages[i].stage_mesh(), last, 1)?[0];
        }
        self.pipe.wait()?;
        Ok(losses)
    }

    /// Check everything before anything runs; the stages' tracks.
    fn check(
        &self,
        stages: &[&mut dyn PipelineStage],
        batches: &[(&[i32], &[i32])],
        seq: usize,
    ) -> Result<Vec<Track>> {
        if stages.len() != batches.len() || stages.is_empty() {
            return Err(Error::invalid(
                OP,
                format!(
                    "give one batch per stage: {} stages, {} batches",
                    stages.len(),
                    batches.len()
                ),
            ));
        }
        let m = self.micro_batches;
        stages
            .iter()
            .zip(batches)
            .map(|(s, (ids, targets))| {
                let mesh = s.stage_mesh();
                let stage = self.pipe.stage_of(mesh)?;
                if s.stage() != (stage, self.stages()) {
                    return Err(Error::invalid(
                        OP,
                        format!(
                            "a stage built as {:?} (stage, stages) sits at stage {stage} of {}",
                            s.stage(),
                            self.stages()
                        ),
                    ));
                }
                if ids.len() != targets.len() {
                    return Err(Error::shape(OP, [ids.len()], [targets.len()]));
                }
                let rows = ids.len().checked_div(seq).unwrap_or(0);
                if seq == 0 || rows * seq != ids.len() || rows == 0 || rows % m != 0 {
                    return Err(Error::invalid(
                        OP,
                        format!(
                            "a replica's {} tokens are not whole sequences of {seq} in {m} equal \
                             micro-batches: use a global batch of sequences that is a multiple of \
                             data-parallel size × {m} micro-batches",
                            ids.len()
                        ),
                    ));
                }
                let first = mesh.ranks().first().map_or(0, |r| r.index());
                Ok(Track {
                    stage,
                    line: self.pipe.line_of(mesh, first)?.0,
                    work: self.schedule(stage),
                    next: 0,
                    forwards: 0,
                    backwards: 0,
                    held: VecDeque::new(),
                    losses: Vec::new(),
                })
            })
            .collect()
    }

    /// Whether `w` of stage `i` has its input: the neighbour of the same
    /// pipeline has produced it, or lives in another process.
    fn ready(&self, tracks: &[Track], i: usize, w: Work) -> bool {
        let t = &tracks[i];
        let (neighbour, n) = match w {
            Work::Forward(n) if t.stage > 0 => (t.stage - 1, n),
            Work::Backward(n) if t.stage + 1 < self.stages() => (t.stage + 1, n),
            _ => return true,
        };
        let peer = tracks
            .iter()
            .find(|o| o.stage == neighbour && o.line.same_as(&t.line));
        match (peer, w) {
            (None, _) => true,
            (Some(o), Work::Forward(_)) => o.forwards > n,
            (Some(o), Work::Backward(_)) => o.backwards > n,
        }
    }

    fn run(
        &self,
        t: &mut Track,
        stage: &dyn PipelineStage,
        (ids, targets): (&[i32], &[i32]),
        seq: usize,
        w: Work,
    ) -> Result<()> {
        let last = t.stage + 1 == self.stages();
        match w {
            Work::Forward(n) => {
                let per = ids.len() / self.micro_batches;
                let span = n * per..(n + 1) * per;
                let input = match t.stage {
                    0 => None,
                    s => {
                        let (shape, placement) = stage.boundary(per);
                        Some(
                            self.pipe
                                .recv(stage.stage_mesh(), s - 1, &shape, placement)?,
                        )
                    }
                };
                let out =
                    stage.forward_stage(input.as_ref(), &ids[span.clone()], &targets[span], seq)?;
                let want = stage.boundary(per);
                if !last && (out.shape() != want.0.as_slice() || out.placement() != want.1) {
                    return Err(Error::invalid(
                        OP,
                        format!(
                            "stage {} gave {:?} placed {:?}, its boundary() says {:?} placed {:?}",
                            t.stage,
                            out.shape(),
                            out.placement(),
                            want.0,
                            want.1
                        ),
                    ));
                }
                if last {
                    t.held
                        .push_back(out.scale(1.0 / self.micro_batches as f32)?);
                    t.losses.push(out.detach());
                } else {
                    t.held.push_back(self.pipe.send(&out, t.stage + 1)?);
                }
                t.forwards += 1;
            }
            Work::Backward(_) => {
                let held = t
                    .held
                    .pop_front()
                    .ok_or_else(|| Error::invalid(OP, "a backward came before its forward"))?;
                held.backward()?;
                t.backwards += 1;
            }
        }
        Ok(())
    }

    /// Sum the gradients of parameters two stages share: every stage sends
    /// its own first, then adds the other's.
    fn sum_shared(&self, stages: &mut [&mut dyn PipelineStage]) -> Result<()> {
        let pipe = &self.pipe;
        for phase in 0..2 {
            for s in stages.iter_mut() {
                let shared = s.shared_parameters();
                if shared.is_empty() {
                    continue;
                }
                for (name, p) in s.named_parameters_mut() {
                    let Some(&(_, other)) = shared.iter().find(|(n, _)| *n == name) else {
                        continue;
                    };
                    // Frozen on both stages (a LoRA base, quantized blocks):
                    // nothing to sum.
                    if p.is_frozen() || p.value.dtype().quant().is_some() {
                        continue;
                    }
                    let g = p.grad().ok_or_else(|| {
                        Error::invalid(OP, format!("the shared parameter {name:?} got no gradient"))
                    })?;
                    match phase {
                        0 => pipe.share(&g, other)?,
                        _ => p.set_grad(Some(pipe.add_shared(&g, other)?))?,
                    }
                }
            }
        }
        Ok(())
    }
}

/// Each stage's shared parameters' gradients, taken out (`None` where a
/// parameter has none yet).
fn take_shared(stages: &mut [&mut dyn PipelineStage]) -> Vec<Vec<Option<DTensor>>> {
    stages
        .iter_mut()
        .map(|s| {
            let shared = s.shared_parameters();
            s.named_parameters_mut()
                .into_iter()
                .filter(|(n, _)| shared.iter().any(|(m, _)| m == n))
                .map(|(_, p)| {
                    let g = p.grad();
                    // Dropping a gradient cannot fail.
                    let _ = p.set_grad(None);
                    g
                })
                .collect()
        })
        .collect()
}

/// Add the gradients [`take_shared`] set aside back to this step's.
fn restore_shared(
    stages: &mut [&mut dyn PipelineStage],
    before: Vec<Vec<Option<DTensor>>>,
) -> Result<()> {
    for (s, old) in stages.iter_mut().zip(before) {
        let shared = s.shared_parameters();
        let params = s
            .named_parameters_mut()
            .into_iter()
            .filter(|(n, _)| shared.iter().any(|(m, _)| m == n));
        for ((_, p), old) in params.zip(old) {
            if let (Some(old), Some(new)) = (old, p.grad()) {
                p.set_grad(Some(old.add(&new)?))?;
            }
        }
    }
    Ok(())
}
