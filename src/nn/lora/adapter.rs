//! [`Lora`]: one layer's adapter, `s · B·A·dropout(x)`, placed for the
//! layer's tensor-parallel split (docs/MATH.md §20):
//!
//! - column-parallel base (`W` rows split): `A` replicated, `B` split like
//!   `W`'s rows (stride and unit too); `x·Aᵀ` is replicated, its gradient a
//!   partial sum reduced with the base's input gradient; no extra
//!   communication forward.
//! - row-parallel base (`W` columns split): `A` split like `W`'s columns
//!   (like the input), `B` replicated; the `[tokens, r]` partial product is
//!   all-reduced (or reduce-scattered along tokens with sequence
//!   parallelism): `tokens × r` values, not the layer's width.
//! - key/value heads held by several ranks: `A` replicated, `B`'s rows held
//!   like `W`'s, their gradients summed over the holders.

use super::config::LoraConfig;
use crate::device::Mesh;
use crate::error::{Error, Result};
use crate::nn::dropout::{Dropout, DropoutConfig};
use crate::nn::held::Held;
use crate::nn::parameter::Parameter;
use crate::nn::params::{Params, join_name};
use crate::tensor::{DTensor, Holding, Mapping, MatmulOptions, Placement, RowReduce};

/// How the adapter is split over the ranks (module doc).
#[derive(Clone, Debug)]
pub(crate) enum LoraSplit {
    /// Over a column-parallel base's outputs, `(stride, unit)`.
    Column(usize, usize),
    /// Over a row-parallel base's inputs, `(stride, unit)`.
    Row(usize, usize),
    /// Rows held as a key/value projection's.
    Held(Holding),
}

/// One layer's LoRA adapter (module doc). Its parameters are named as
/// PEFT names them under the layer: `lora_A.weight`, `lora_B.weight`.
#[derive(Clone, Debug)]
pub struct Lora {
    /// `A` `[r, in]`.
    pub a: Parameter,
    /// `B` `[out, r]`, zero when made.
    pub b: Parameter,
    scaling: f32,
    dropout: Option<Dropout>,
    merged: bool,
    split: LoraSplit,
}

impl Params for Lora {
    fn visit_params<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Parameter)) {
        f(join_name(prefix, "lora_A.weight"), &self.a);
        f(join_name(prefix, "lora_B.weight"), &self.b);
    }

    fn visit_params_mut<'a>(
        &'a mut self,
        prefix: &str,
        f: &mut dyn FnMut(String, &'a mut Parameter),
    ) {
        f(join_name(prefix, "lora_A.weight"), &mut self.a);
        f(join_name(prefix, "lora_B.weight"), &mut self.b);
    }
}

impl Lora {
    /// An adapter for a base `[out, in]` split as `split`: `A` from the
    /// master `a` `[r, in]`, `B` zero.
    pub(crate) fn new(
        mesh: &Mesh,
        config: &LoraConfig,
        (inp, out): (usize, usize),
        split: LoraSplit,
        a: &[f32],
        layer: u32,
    ) -> Result<Lora> {
        const OP: &str = "Decoder::add_lora";
        config.check()?;
        let r = config.r;
        if r > inp.min(out) {
            return Err(Error::invalid(
                OP,
                format!(
                    "r = {r} is larger than the layer ({out} × {inp}): LoRA's rank is at most \
                     the smaller side"
                ),
            ));
        }
        if a.len() != r * inp {
            return Err(Error::invalid(OP, "internal: A has the wrong size"));
        }
        let zeros = vec![0.0; out * r];
        let (a, b) = match &split {
            LoraSplit::Column(stride, unit) => (
                Parameter::from_master(mesh, &[r, inp], a, Placement::Replicate, 1)?,
                Parameter::from_master_in_units(
                    mesh,
                    &[out, r],
                    &zeros,
                    Placement::Shard(0),
                    *stride,
                    *unit,
                )?,
            ),
            LoraSplit::Row(stride, unit) => (
                Parameter::from_master_in_units(
                    mesh,
                    &[r, inp],
                    a,
                    Placement::Shard(1),
                    *stride,
                    *unit,
                )?,
                Parameter::from_master(mesh, &[out, r], &zeros, Placement::Replicate, 1)?,
            ),
            LoraSplit::Held(rows) => {
                let h = Held {
                    holding: rows.clone(),
                    shape: vec![out, r],
                };
                (
                    Parameter::from_master(mesh, &[r, inp], a, Placement::Replicate, 1)?,
                    Parameter::held(h.upload(mesh, &zeros)?, rows.clone(), &[out, r]),
                )
            }
        };
        let dropout = (config.dropout > 0.0)
            .then(|| {
                let mut d = Dropout::new(DropoutConfig {
                    p: config.dropout,
                    seed: config.seed,
                    layer,
                })?;
                d.eval();
                Ok::<_, Error>(d)
            })
            .transpose()?;
        Ok(Lora {
            a,
            b,
            scaling: config.scaling(),
            dropout,
            merged: false,
            split,
        })
    }

    /// The factor `B·A` is multiplied by.
    pub fn scaling(&self) -> f32 {
        self.scaling
    }

    /// The rank `r`.
    pub fn rank(&self) -> usize {
        self.a.shape()[0]
    }

    /// Whether the adapter is folded into the base weight.
    pub fn is_merged(&self) -> bool {
        self.merged
    }

    /// Training mode (dropout on, masks keyed by `step`) or evaluation.
    pub(crate) fn set_mode(&mut self, training: bool, step: u64) {
        if let Some(d) = &mut self.dropout {
            d.set_mode(training, step);
        }
    }

    fn dropped(&self, x: &DTensor) -> Result<DTensor> {
        match &self.dropout {
            Some(d) => d.forward(x),
            None => Ok(x.clone()),
        }
    }

    /// `s·(x·Aᵀ)·Bᵀ` for a column-parallel or held base, `xg` its mapped
    /// (replicated) input: placed like the base's output, in xg's dtype.
    pub(crate) fn column_delta(&self, xg: &DTensor) -> Result<DTensor> {
        let x = self.dropped(xg)?;
        let t = x.linear(
            &self.a.operand_for(x.dtype())?,
            None,
            MatmulOptions::default(),
        )?;
        let t = t.scale(self.scaling)?;
        let b = match &self.split {
            LoraSplit::Held(rows) => self.b.value.share_replicas(rows)?,
            _ => self.b.value.clone(),
        };
        let b = if b.dtype() == t.dtype() {
            b
        } else {
            b.cast(t.dtype())?
        };
        t.linear(&b, None, MatmulOptions::default())
    }

    /// `s·(x_r·A_rᵀ summed)·Bᵀ` for a row-parallel base, `x` its
    /// `Shard(1)` input: the `[tokens, r]` partial sums reduced as the
    /// base's are (`Replicate`, or `Shard(0)` along tokens), in x's dtype.
    pub(crate) fn row_delta(&self, x: &DTensor, reduce: RowReduce) -> Result<DTensor> {
        let xd = self.dropped(x)?;
        let opts = MatmulOptions {
            transpose_w: true,
            out_dtype: Some(crate::element::DType::F32),
        };
        let a = self.a.operand_for(xd.dtype())?;
        let t = xd.matmul_with(&a, opts)?;
        let t = match reduce {
            RowReduce::AllReduce => Mapping::ReduceFromParallel.forward(&t)?,
            RowReduce::ReduceScatter | RowReduce::Ring => {
                Mapping::ReduceScatterToParallel(0).forward(&t)?
            }
        };
        let t = t.scale(self.scaling)?;
        let y = t.linear(&self.b.value, None, MatmulOptions::default())?;
        y.cast(x.dtype())
    }

    /// `W ± s·B·A` on the host for a base whose master weight is `w`.
    pub(crate) fn fold(&self, w: &mut [f32], sign: f32) -> Result<()> {
        let (a, b) = (self.a.master()?, self.b.master()?);
        let r = self.rank();
        let inp = a.len() / r;
        let s = f64::from(self.scaling * sign);
        for (o, row) in w.chunks_mut(inp).enumerate() {
            let bo = &b[o * r..(o + 1) * r];
            for (i, v) in row.iter_mut().enumerate() {
                let d: f64 = (0..r)
                    .map(|k| f64::from(bo[k]) * f64::from(a[k * inp + i]))
                    .sum();
                *v = (f64::from(*v) + s * d) as f32;
            }
        }
        Ok(())
    }

    /// Mark merged or not (after the caller folded the weight).
    pub(crate) fn set_merged(&mut self, merged: bool) {
        self.merged = merged;
    }
}

/// Fold or unfold `lora` into `weight` (the layer's base), checking the
/// state first; nothing changes on error.
pub(crate) fn set_merged(
    weight: &mut Parameter,
    lora: Option<&mut Lora>,
    merged: bool,
) -> Result<()> {
    const OP: &str = "Decoder::merge_lora";
    let Some(lora) = lora else {
        return Err(Error::invalid(OP, "the layer has no adapter"));
    };
    if lora.merged == merged {
        return Err(Error::invalid(
            OP,
            if merged {
                "the adapter is merged already"
            } else {
                "the adapter is not merged"
            },
        ));
    }
    if weight.value.dtype().quant().is_some() {
        return Err(Error::invalid(
            OP,
            format!(
                "a {} base cannot take the adapter in (its blocks would be requantized): \
                 keep the adapter separate, or load the base in f32 or bf16 to merge",
                weight.value.dtype()
            ),
        ));
    }
    let mut w = weight.master()?;
    lora.fold(&mut w, if merged { 1.0 } else { -1.0 })?;
    weight.load_master(&w)?;
    lora.set_merged(merged);
    Ok(())
}

/// `impl Adaptable` for a linear layer with `weight`, `lora` and `config`
/// fields: `$split` gives the adapter's [`LoraSplit`], `$features` the
/// base's `(in, out)`.
macro_rules! adaptable {
    ($ty:ident, $split:expr, $features:expr) => {
        impl $ty {
            /// The adapter, when it is on (present and not merged).
            pub(crate) fn active_lora(&self) -> Option<&$crate::nn::lora::Lora> {
                self.lora.as_ref().filter(|l| !l.is_merged())
            }

            /// The layer's adapter, if it has one.
            pub fn lora(&self) -> Option<&$crate::nn::lora::Lora> {
                self.lora.as_ref()
            }
        }

        impl $crate::nn::lora::Adaptable for $ty {
            fn features(&self) -> (usize, usize) {
                let f: fn(&$ty) -> (usize, usize) = $features;
                f(self)
            }

            fn attach_lora(
                &mut self,
                config: &$crate::nn::lora::LoraConfig,
                a: &[f32],
                layer: u32,
            ) -> $crate::error::Result<()> {
                if self.lora.is_some() {
                    return Err($crate::error::Error::invalid(
                        "Decoder::add_lora",
                        "the layer has an adapter already (remove_lora first)",
                    ));
                }
                let split: fn(&$ty) -> $crate::nn::lora::LoraSplit = $split;
                let lora = $crate::nn::lora::Lora::new(
                    self.weight.value.mesh(),
                    config,
                    self.features(),
                    split(self),
                    a,
                    layer,
                )?;
                self.lora = Some(lora);
                Ok(())
            }

            fn remove_lora(&mut self) -> bool {
                self.lora.take().is_some()
            }

            fn lora_parameters(
                &mut self,
            ) -> Option<(
                &mut $crate::nn::parameter::Parameter,
                &mut $crate::nn::parameter::Parameter,
            )> {
                self.lora.as_mut().map(|l| (&mut l.a, &mut l.b))
            }

            fn lora_merged(&self) -> Option<bool> {
                self.lora.as_ref().map(|l| l.is_merged())
            }

            fn set_lora_merged(&mut self, merged: bool) -> $crate::error::Result<()> {
                $crate::nn::lora::set_merged(&mut self.weight, self.lora.as_mut(), merged)
            }

            fn set_lora_mode(&mut self, training: bool, step: u64) {
                if let Some(l) = &mut self.lora {
                    l.set_mode(training, step);
                }
            }
        }
    };
}
pub(crate) use adaptable;
