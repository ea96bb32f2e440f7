//! [`KvHeadLinear`]: the key or value projection of grouped-query attention
//! whose query heads are split over ranks: `y = x Wᵀ + b` with `W`
//! `[kv_heads·head_dim, in]`, where every rank holds the key/value heads
//! its own query heads read ([`Holding::kv_heads`]): several heads on one
//! rank when there are more key/value heads than ranks, one head on every
//! rank that needs it when there are fewer. The output is the held
//! (expanded) tensor `[tokens, P·M·head_dim]`, `Shard(1)` in units of
//! `M·head_dim`, which [`DTensor::gqa_attention`] reads. Forward
//! communicates nothing; backward sums each head's weight and bias gradient
//! over the ranks that hold it ([`DTensor::share_replicas`], one all-reduce
//! of `[kv_heads·head_dim, in]`), so the copies stay bit-identical, and the
//! input's gradient is a partial sum reduced by the caller's mapping.

use crate::device::Mesh;
use crate::element::DType;
use crate::error::{Error, Result};
use crate::kernels::random::{Sections, random};
use crate::nn::Params;
use crate::nn::held::Held;
use crate::nn::init::{Init, InitRng};
use crate::nn::lora::{Lora, LoraSplit, adaptable};
use crate::nn::parameter::{Parameter, check_master};
use crate::tensor::{DTensor, Holding, MatmulOptions, Placement};

/// Settings of a [`KvHeadLinear`].
#[derive(Clone, Debug)]
pub struct KvHeadConfig {
    /// Input features.
    pub in_features: usize,
    /// Query heads (split over ranks as a column-parallel layer in whole heads).
    pub heads: usize,
    /// Key/value heads (dividing `heads`).
    pub kv_heads: usize,
    /// Width of each head.
    pub head_dim: usize,
    /// Whether the layer has a bias.
    pub bias: bool,
    /// Weight initialiser (the bias starts at zero).
    pub init: Init,
}

impl KvHeadConfig {
    /// Defaults: no bias, N(0, 0.02²).
    pub fn new(in_features: usize, heads: usize, kv_heads: usize, head_dim: usize) -> Self {
        KvHeadConfig {
            in_features,
            heads,
            kv_heads,
            head_dim,
            bias: false,
            init: Init::default(),
        }
    }
}

/// A key or value projection holding on each rank the heads its query heads read.
#[derive(Clone, Debug, Params)]
#[params(adaptable)]
pub struct KvHeadLinear {
    /// `[kv_heads·head_dim, in]` logically (checkpoints, `master()`); each
    /// rank holds its heads' rows.
    pub weight: Parameter,
    /// `[kv_heads·head_dim]` logically, held like the weight.
    pub bias: Option<Parameter>,
    /// A LoRA adapter ([`Decoder::add_lora`](crate::nn::Decoder::add_lora)).
    #[params(flatten)]
    lora: Option<Lora>,
    #[params(skip)]
    config: KvHeadConfig,
    #[params(skip)]
    rows: Holding,
}

impl KvHeadLinear {
    /// A layer whose ranks draw their heads' rows of the weight on their
    /// devices (the same values at every world size); the bias starts at zero.
    pub fn new(mesh: &Mesh, config: KvHeadConfig, rng: &mut InitRng) -> Result<Self> {
        let rows = Self::rows(mesh, &config)?;
        let out = rows.total;
        let shape = [out, config.in_features];
        let weight = held_random(mesh, config.init, rng.next_u64(), &shape, &rows)?;
        let bias = config
            .bias
            .then(|| held_random(mesh, Init::Zeros, 0, &[out], &rows))
            .transpose()?;
        Ok(KvHeadLinear {
            weight,
            bias,
            lora: None,
            config,
            rows,
        })
    }

    /// A layer holding the given master weight `[kv_heads·head_dim, in]`
    /// and bias `[kv_heads·head_dim]`.
    pub fn from_master(
        mesh: &Mesh,
        config: KvHeadConfig,
        weight: &[f32],
        bias: Option<&[f32]>,
    ) -> Result<Self> {
        const OP: &str = "KvHeadLinear::from_master";
        let rows = Self::rows(mesh, &config)?;
        let out = rows.total;
        check_master(OP, "weight", weight.len(), out * config.in_features)?;
        if bias.is_some() != config.bias {
            return Err(Error::invalid(
                OP,
                "give a bias exactly when config.bias is true",
            ));
        }
        let held = |shape: &[usize], master: &[f32]| -> Result<Parameter> {
            check_master(OP, "bias", master.len(), shape.iter().product())?;
            let h = Held {
                holding: rows.clone(),
                shape: shape.to_vec(),
            };
            Ok(Parameter::held(
                h.upload(mesh, master)?,
                rows.clone(),
                shape,
            ))
        };
        let weight = held(&[out, config.in_features], weight)?;
        let bias = bias.map(|b| held(&[out], b)).transpose()?;
        Ok(KvHeadLinear {
            weight,
            bias,
            lora: None,
            config,
            rows,
        })
    }

    /// The rows each rank holds, checked against the config.
    fn rows(mesh: &Mesh, c: &KvHeadConfig) -> Result<Holding> {
        if c.in_features == 0 || c.head_dim == 0 {
            return Err(Error::invalid(
                "KvHeadLinear::new",
                format!(
                    "in_features {} and head_dim {} must be at least 1",
                    c.in_features, c.head_dim
                ),
            ));
        }
        Ok(Holding::kv_heads(c.heads, c.kv_heads, mesh.size())?.scaled(c.head_dim))
    }

    /// The settings.
    pub fn config(&self) -> &KvHeadConfig {
        &self.config
    }

    /// Which heads each rank holds (in heads).
    pub fn holding(&self) -> Holding {
        let d = self.config.head_dim;
        Holding {
            total: self.rows.total / d,
            per: self.rows.per / d,
            starts: self.rows.starts.iter().map(|s| s / d).collect(),
        }
    }

    /// For each rank, the first rank holding the same rows (itself where
    /// none before it does): their copies are equal (kept so by
    /// [`DTensor::share_replicas`]), so are their products of one
    /// replicated input, which [`DTensor::linears`] then makes once on a
    /// shared device.
    pub(crate) fn copy_sources(&self) -> Vec<usize> {
        let s = &self.rows.starts;
        (0..s.len())
            .map(|r| (0..r).find(|&q| s[q] == s[r]).unwrap_or(r))
            .collect()
    }

    /// `xg` `[tokens, in]` (`Replicate`: after the caller's
    /// [`Mapping::CopyToParallel`](crate::tensor::Mapping::CopyToParallel)
    /// or sequence-parallel gather) → the held `[tokens, P·M·head_dim]`,
    /// `Shard(1)` in units of `M·head_dim`, in xg's dtype. Recorded on the tape.
    pub fn forward_mapped(&self, xg: &DTensor) -> Result<DTensor> {
        let (w, b) = self.mapped_operands(xg)?;
        let y = xg.linear(&w, b.as_ref(), MatmulOptions::default())?;
        self.adapted(xg, y)
    }

    /// `y` (this layer's product of the mapped input `xg`) plus the
    /// adapter's, where one is on.
    pub(crate) fn adapted(&self, xg: &DTensor, y: DTensor) -> Result<DTensor> {
        match self.active_lora() {
            Some(lora) => y.add(&lora.column_delta(xg)?),
            None => Ok(y),
        }
    }

    /// The held weight and bias [`Self::forward_mapped`] multiplies `xg`
    /// by (`xg.linear(w, bias)`), after its checks of `xg`: for
    /// [`DTensor::linears`], several layers of one input together.
    pub(crate) fn mapped_operands(&self, xg: &DTensor) -> Result<(DTensor, Option<DTensor>)> {
        const OP: &str = "KvHeadLinear::forward_mapped";
        if xg.shape().len() != 2 || xg.shape()[1] != self.config.in_features {
            let want = format!("[tokens, {}]", self.config.in_features);
            return Err(Error::shape(OP, want, xg.shape()));
        }
        let w = self.weight.value.share_replicas(&self.rows)?;
        // A weight kept in bf16 / f16 is read as stored by f32 activations.
        let narrow = matches!(w.dtype(), DType::BF16 | DType::F16 | DType::Quant(_));
        let w = if narrow && xg.dtype() == DType::F32 {
            w
        } else {
            w.cast(xg.dtype())?
        };
        let b = match &self.bias {
            Some(b) => Some(b.value.share_replicas(&self.rows)?),
            None => None,
        };
        Ok((w, b))
    }

    /// The full weight `[kv_heads·head_dim, in]` on the host.
    pub fn master_weight(&self) -> Result<Vec<f32>> {
        self.weight.master()
    }
}

adaptable!(KvHeadLinear, |l| LoraSplit::Held(l.rows.clone()), |l| (
    l.config.in_features,
    l.rows.total
));

/// A held parameter of logical `shape` drawn on the devices under `key`:
/// each rank draws its rows' logical indices, so copies are equal.
fn held_random(
    mesh: &Mesh,
    init: Init,
    key: u64,
    shape: &[usize],
    rows: &Holding,
) -> Result<Parameter> {
    let fan_in = shape.iter().skip(1).product::<usize>();
    let draw = init.draw(shape[0], fan_in);
    let mut local = shape.to_vec();
    local[0] = rows.per;
    let shards = mesh
        .ranks()
        .iter()
        .map(|r| {
            let sections = Sections {
                dim: 0,
                per: rows.per,
                section: rows.total,
                first: rows.starts[r.index()],
                total: rows.total,
            };
            random(r, &local, draw, key, sections)
        })
        .collect::<Result<Vec<_>>>()?;
    let mut expanded = shape.to_vec();
    expanded[0] = rows.expanded();
    let value =
        DTensor::from_shards_in_units(mesh, shards, &expanded, Placement::Shard(0), rows.per)?;
    Ok(Parameter::held(value, rows.clone(), shape))
}
