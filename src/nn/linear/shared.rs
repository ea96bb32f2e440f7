//! What the column and row layers share: [`Overlap`], checking inputs,
//! checking and sharding master weights, and (as a macro, since both layers
//! have them field for field) `new` and the master accessors.

use crate::device::Mesh;
use crate::element::DType;
use crate::error::{Error, Result};
use crate::nn::init::{Init, InitRng};
use crate::nn::parameter::{Parameter, check_master};
use crate::shard::{split_range, split_range_in_units};
use crate::tensor::{DTensor, Placement};

/// How a sequence-parallel layer runs its token all-gather / reduce-scatter.
///
/// Only meaningful with `sequence_parallel`; a layer built with
/// [`Overlap::Ring`] but without it is a construction error.
///
/// Honest expectations: on one controller "overlap" means the layer starts
/// step s's transfer, records every rank's GEMM for step s, then completes
/// the transfer. With separate real GPUs and the host-staged transport the
/// device → host → device copies then run while the GEMMs execute. On CPU
/// adapters (lavapipe, llvmpipe) the devices are the host's own cores, and
/// each ring step costs a device round-trip, so the ring is slower than one
/// collective; on a shared-device mesh a ring step moves no bytes (the next
/// rank gets the same buffer), so there is nothing to overlap and the ring
/// only costs its extra, smaller dispatches. `benches/overlap.rs` measures it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Overlap {
    /// One collective per gather / reduce-scatter (the default).
    #[default]
    None,
    /// `P − 1` ring steps ([`Collective::SendRecv`](crate::comm::Collective::SendRecv)), each overlapped
    /// with the GEMM on the chunk already present; no all-gather or
    /// reduce-scatter collective is issued.
    Ring,
}

/// The input is `[tokens, features]`, f32 or f16 (f16 only without the ring).
pub(super) fn check_input(
    op: &'static str,
    x: &DTensor,
    features: usize,
    ring: bool,
) -> Result<()> {
    if x.shape().len() != 2 || x.shape()[1] != features {
        return Err(Error::shape(op, format!("[tokens, {features}]"), x.shape()));
    }
    match x.dtype() {
        DType::F32 => Ok(()),
        DType::F16 if !ring => Ok(()),
        DType::F16 => Err(Error::invalid(
            op,
            "Overlap::Ring moves f32 chunks; run f16 inputs with Overlap::None",
        )),
        got => Err(Error::DTypeMismatch {
            op,
            expected: DType::F32,
            got,
        }),
    }
}

/// Where a layer's weights come from.
pub(crate) enum Weights<'a> {
    /// A master weight `[out, in]` and optional bias `[out]` on the host.
    Master(&'a [f32], Option<&'a [f32]>),
    /// The weight drawn on the devices by `Init` under the next key of the
    /// generator; the bias (if any) zero.
    Random(Init, &'a mut InitRng),
}

/// Check a master weight `[out, in]` and optional bias `[out]` and shard
/// them, or draw them on the devices: the weight with `stride` and shard
/// `unit`, a sharded bias likewise, a replicated bias whole.
pub(crate) fn shard_master(
    op: &'static str,
    mesh: &Mesh,
    [out, inp]: [usize; 2],
    (weights, want_bias): (Weights<'_>, bool),
    (weight_placement, bias_placement): (Placement, Placement),
    (stride, unit): (usize, usize),
) -> Result<(Parameter, Option<Parameter>)> {
    let (bias_stride, bias_unit) = if bias_placement == Placement::Replicate {
        (1, 1)
    } else {
        (stride, unit)
    };
    let (weight, bias) = match weights {
        Weights::Master(weight, bias) => (weight, bias),
        Weights::Random(init, rng) => {
            let weight =
                init.parameter(mesh, &[out, inp], rng, weight_placement, (stride, unit))?;
            let bias = want_bias
                .then(|| {
                    // Zeros use no key: a throwaway generator leaves `rng` as it was.
                    let units = (bias_stride, bias_unit);
                    Init::Zeros.parameter(mesh, &[out], &mut InitRng::new(0), bias_placement, units)
                })
                .transpose()?;
            return Ok((weight, bias));
        }
    };
    check_master(op, "weight", weight.len(), out * inp)?;
    if bias.is_some() != want_bias {
        return Err(Error::invalid(
            op,
            "give a bias exactly when config.bias is true",
        ));
    }
    if let Some(b) = bias {
        check_master(op, "bias", b.len(), out)?;
    }
    let weight =
        Parameter::from_master_in_units(mesh, &[out, inp], weight, weight_placement, stride, unit)?;
    let bias = bias
        .map(|b| {
            Parameter::from_master_in_units(mesh, &[out], b, bias_placement, bias_stride, bias_unit)
        })
        .transpose()?;
    Ok((weight, bias))
}

/// Whether splitting `n` in units of `stride × unit` gives every rank what
/// the plain uneven split does: the mappings that slice a replicated tensor
/// (`gather_output`'s backward, a row layer's scatter) only know the plain one.
pub(super) fn split_is_plain(mesh: &Mesh, n: usize, stride: usize, unit: usize) -> bool {
    let p = mesh.size();
    (0..p).all(|r| split_range_in_units(n, p, r, stride * unit) == split_range(n, p, r))
}

/// `Overlap::Ring` only makes sense on the sequence-parallel gather / reduce-scatter.
pub(super) fn check_overlap(
    op: &'static str,
    sequence_parallel: bool,
    overlap: Overlap,
) -> Result<()> {
    if overlap == Overlap::Ring && !sequence_parallel {
        return Err(Error::invalid(
            op,
            "overlap: Overlap::Ring needs sequence_parallel = true (the ring runs the \
             sequence-parallel gather / reduce-scatter)",
        ));
    }
    Ok(())
}

/// What both linear layers share: `new`, the settings and master accessors.
macro_rules! linear_common {
    ($ty:ident, $cfg:ident) => {
        impl $ty {
            /// The settings.
            pub fn config(&self) -> &$cfg {
                &self.config
            }

            /// Whether the sequence-parallel gather / reduce-scatter run as ring steps.
            fn ring(&self) -> bool {
                self.config.sequence_parallel && self.config.overlap == Overlap::Ring
            }

            /// A layer initialised from `rng`: each rank draws its shard of
            /// the weight on its device (`Init::parameter`); the bias starts
            /// at zero.
            pub fn new(mesh: &Mesh, config: $cfg, rng: &mut InitRng) -> Result<Self> {
                let init = config.init;
                Self::build(mesh, config, Weights::Random(init, rng))
            }

            /// A layer holding the given master weight `[out, in]` and bias
            /// `[out]` (sliced for each rank as `new` splits it).
            pub fn from_master(
                mesh: &Mesh,
                config: $cfg,
                weight: &[f32],
                bias: Option<&[f32]>,
            ) -> Result<Self> {
                Self::build(mesh, config, Weights::Master(weight, bias))
            }

            /// The full weight `[out, in]` on the host.
            pub fn master_weight(&self) -> Result<Vec<f32>> {
                self.weight.master()
            }

            /// The full bias `[out]` on the host.
            pub fn master_bias(&self) -> Result<Option<Vec<f32>>> {
                self.bias.as_ref().map(Parameter::master).transpose()
            }
        }
    };
}
pub(super) use linear_common;
