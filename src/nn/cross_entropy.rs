//! Vocab-parallel softmax cross-entropy (Megatron's `vocab_parallel_cross_entropy`).
//!
//! Logits `z` `[tokens, vocab]` are `Shard(1)`; targets are replicated host ids.
//! Per row, with three all-reduces of O(tokens) size and never a gather of
//! the logits:
//! 1. `m = all-reduce-max(max_j z_rj)`
//! 2. `pred = all-reduce-sum(z[t − start_r])` (0 on ranks that do not own t)
//! 3. `S = all-reduce-sum(Σ_j exp(z_j − m))`
//! 4. `loss = ln S + m − pred`; with label smoothing α one more
//!    all-reduce-sum of `Σ_j z_j` gives `(1 − α)·loss + α·(ln S + m − Σz/K)`
//!    with K the *global* (unpadded) vocab.
//!
//! Backward needs no communication: `dz = g·(softmax − (1−α)·onehot − α/K)`.
//! Columns at or past `valid_vocab` (vocab padded to a multiple of P) are
//! masked out, so padding never changes the loss.

use crate::device::LocalTensor;
use crate::element::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::kernels::{self, CrossEntropyOptions, VocabShard};
use crate::shard::split_range_in_units;
use crate::tensor::{DTensor, Placement};

/// How per-row losses are combined.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Reduction {
    /// One loss per row, `[tokens]`.
    None,
    /// Sum over rows, `[1]`.
    Sum,
    /// Mean over rows not ignored, `[1]`.
    #[default]
    Mean,
}

/// Settings of [`VocabParallelCrossEntropy`].
#[derive(Clone, Debug, Default)]
pub struct CrossEntropyConfig {
    /// Rows with this target contribute no loss and no gradient, and are not counted in the mean.
    pub ignore_index: Option<i32>,
    /// How per-row losses are combined.
    pub reduction: Reduction,
    /// Label smoothing α over the global vocab.
    pub label_smoothing: f32,
    /// Number of real vocab entries when the logits' vocab is padded (default: all columns).
    pub valid_vocab: Option<usize>,
}

struct Saved {
    /// The logits, widened to f32.
    logits: DTensor,
    /// The logits' own dtype: their gradient comes back in it.
    dtype: DType,
    targets: Vec<LocalTensor>,
    max: Vec<LocalTensor>,
    sum_exp: Vec<LocalTensor>,
    counted: usize,
    valid_vocab: usize,
}

/// Softmax cross-entropy over vocab-sharded logits.
pub struct VocabParallelCrossEntropy {
    config: CrossEntropyConfig,
    saved: Option<Saved>,
}

impl std::fmt::Debug for VocabParallelCrossEntropy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VocabParallelCrossEntropy")
            .field("config", &self.config)
            .finish()
    }
}

/// All-reduce per-rank row statistics (skipped, not counted, on one rank).
fn all_reduce_rows(
    like: &DTensor,
    parts: Vec<LocalTensor>,
    op: ReduceOp,
) -> Result<Vec<LocalTensor>> {
    if like.mesh().size() == 1 {
        return Ok(parts);
    }
    let shape = parts[0].shape().to_vec();
    like.with_shards(parts, shape, Placement::Partial(op))
        .redistribute(Placement::Replicate)
        .map(|d| d.shards().to_vec())
}

impl VocabParallelCrossEntropy {
    /// A loss with these settings.
    pub fn new(config: CrossEntropyConfig) -> Result<Self> {
        if !(0.0..=1.0).contains(&config.label_smoothing) {
            return Err(Error::invalid(
                "VocabParallelCrossEntropy::new",
                format!(
                    "label_smoothing must be in [0, 1], got {}",
                    config.label_smoothing
                ),
            ));
        }
        Ok(VocabParallelCrossEntropy {
            config,
            saved: None,
        })
    }

    /// The settings.
    pub fn config(&self) -> &CrossEntropyConfig {
        &self.config
    }

    /// Logits `[tokens, vocab]` (`Shard(1)`) and host targets → the loss,
    /// `Replicate`: `[tokens]` for [`Reduction::None`], else `[1]`, in f32.
    /// f16 logits are widened: the softmax and its sums run in f32, and
    /// backward returns their gradient in f16.
    pub fn forward(&mut self, logits: &DTensor, targets: &[i32]) -> Result<DTensor> {
        const OP: &str = "VocabParallelCrossEntropy::forward";
        let mesh = logits.mesh();
        let p = mesh.size();
        if logits.shape().len() != 2 || logits.shape()[0] != targets.len() {
            return Err(Error::shape(
                OP,
                format!("[{}, vocab]", targets.len()),
                logits.shape(),
            ));
        }
        if p > 1 && logits.placement() != Placement::Shard(1) {
            return Err(Error::invalid(
                OP,
                format!(
                    "logits must be placed Shard(1), got {:?}",
                    logits.placement()
                ),
            ));
        }
        let vocab = logits.shape()[1];
        let valid_vocab = self.config.valid_vocab.unwrap_or(vocab);
        if valid_vocab > vocab || valid_vocab == 0 {
            return Err(Error::invalid(
                OP,
                format!("valid_vocab {valid_vocab} must be in 1..={vocab}"),
            ));
        }
        let mut counted = 0;
        for &t in targets {
            if Some(t) == self.config.ignore_index {
                continue;
            }
            if t < 0 || t as usize >= valid_vocab {
                return Err(Error::OutOfRange {
                    op: OP,
                    what: "target",
                    value: t as i64,
                    bound: valid_vocab,
                });
            }
            counted += 1;
        }
        let opts = CrossEntropyOptions {
            ignore_index: self.config.ignore_index,
            label_smoothing: self.config.label_smoothing,
        };
        let dtype = logits.dtype();
        let logits = &logits.cast(DType::F32)?;
        let shard = |r: usize| VocabShard {
            start: split_range_in_units(vocab, p, r, logits.shard_unit()).start,
            valid_vocab,
        };
        let z = logits.shards();
        let tgt = mesh
            .ranks()
            .iter()
            .map(|r| r.upload_i32(&[targets.len()], targets))
            .collect::<Result<Vec<_>>>()?;
        let each =
            |f: &dyn Fn(usize) -> Result<LocalTensor>| (0..p).map(f).collect::<Result<Vec<_>>>();
        let max = all_reduce_rows(
            logits,
            each(&|r| kernels::row_max(&z[r], shard(r)))?,
            ReduceOp::Max,
        )?;
        let pred = all_reduce_rows(
            logits,
            each(&|r| kernels::target_logit(&z[r], &tgt[r], shard(r)))?,
            ReduceOp::Sum,
        )?;
        let sum_exp = all_reduce_rows(
            logits,
            each(&|r| kernels::row_sum_exp(&z[r], &max[r], shard(r)))?,
            ReduceOp::Sum,
        )?;
        let sum_z = if opts.label_smoothing > 0.0 {
            Some(all_reduce_rows(
                logits,
                each(&|r| kernels::row_sum(&z[r], shard(r)))?,
                ReduceOp::Sum,
            )?)
        } else {
            None
        };
        let loss = each(&|r| {
            kernels::ce_loss(
                &max[r],
                &sum_exp[r],
                &pred[r],
                sum_z.as_ref().map(|s| &s[r]),
                &tgt[r],
                valid_vocab,
                &opts,
            )
        })?;
        let (loss, shape) = match self.config.reduction {
            Reduction::None => (loss, vec![targets.len()]),
            red => {
                let scale = if red == Reduction::Mean {
                    1.0 / counted.max(1) as f32
                } else {
                    1.0
                };
                let reduced = loss
                    .iter()
                    .map(|l| {
                        let s = kernels::sum_rows(&l.reshape(&[targets.len(), 1])?)?;
                        if scale == 1.0 {
                            Ok(s)
                        } else {
                            kernels::scale(&s, scale)
                        }
                    })
                    .collect::<Result<Vec<_>>>()?;
                (reduced, vec![1])
            }
        };
        self.saved = Some(Saved {
            logits: logits.clone(),
            dtype,
            targets: tgt,
            max,
            sum_exp,
            counted,
            valid_vocab,
        });
        Ok(logits.with_shards(loss, shape, Placement::Replicate))
    }

    /// Gradient of the logits (`Shard(1)`), given the gradient of the loss
    /// (`None` means 1, as for a scalar loss that is the objective).
    pub fn backward(&mut self, dloss: Option<&DTensor>) -> Result<DTensor> {
        const OP: &str = "VocabParallelCrossEntropy::backward";
        let saved = self
            .saved
            .take()
            .ok_or_else(|| Error::invalid(OP, "call forward before backward"))?;
        match self.backward_inner(&saved, dloss) {
            Ok(d) => Ok(d),
            Err(e) => {
                self.saved = Some(saved);
                Err(e)
            }
        }
    }

    fn backward_inner(&self, s: &Saved, dloss: Option<&DTensor>) -> Result<DTensor> {
        const OP: &str = "VocabParallelCrossEntropy::backward";
        let logits = &s.logits;
        let mesh = logits.mesh();
        let p = mesh.size();
        let (t, vocab) = (logits.shape()[0], logits.shape()[1]);
        let per_row = match self.config.reduction {
            Reduction::Mean => 1.0 / s.counted.max(1) as f32,
            _ => 1.0,
        };
        let row_scale: Vec<LocalTensor> = match (dloss, self.config.reduction) {
            (None, _) => {
                let ones = vec![per_row; t];
                mesh.ranks()
                    .iter()
                    .map(|r| r.upload(&[t], &ones))
                    .collect::<Result<_>>()?
            }
            (Some(d), Reduction::None) => {
                if d.shape() != [t] {
                    return Err(Error::shape(OP, [t], d.shape()));
                }
                d.shards().to_vec()
            }
            (Some(d), _) => {
                if d.shape() != [1] {
                    return Err(Error::shape(OP, [1], d.shape()));
                }
                // Broadcast the scalar gradient to every row: zeros[t,1] + g.
                d.shards()
                    .iter()
                    .map(|g| {
                        let z = g.rank().zeros(&[t, 1], DType::F32)?;
                        let b = kernels::add_row(&z, g)?;
                        kernels::scale(&b.reshape(&[t])?, per_row)
                    })
                    .collect::<Result<_>>()?
            }
        };
        let opts = CrossEntropyOptions {
            ignore_index: self.config.ignore_index,
            label_smoothing: self.config.label_smoothing,
        };
        let grads = (0..p)
            .map(|r| {
                kernels::ce_grad(
                    &logits.shards()[r],
                    &s.max[r],
                    &s.sum_exp[r],
                    &s.targets[r],
                    &row_scale[r],
                    VocabShard {
                        start: split_range_in_units(vocab, p, r, logits.shard_unit()).start,
                        valid_vocab: s.valid_vocab,
                    },
                    &opts,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        logits
            .with_shards(grads, logits.shape().to_vec(), logits.placement())
            .cast(s.dtype)
    }
}
