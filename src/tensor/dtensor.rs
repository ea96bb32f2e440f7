//! [`DTensor`]: one logical tensor held as one shard per rank of a mesh, with a
//! [`Placement`] saying how the shards make up the logical value, and
//! [`DTensor::redistribute`] (in `redistribute.rs`) to move between
//! placements with collectives.

use crate::device::{LocalTensor, Mesh, Rank, download_many};
use crate::element::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::shard::{host_narrow, outer_dim_inner, split_range_in_units};

/// How the shards of a [`DTensor`] make up its logical value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Placement {
    /// Every rank holds the whole tensor.
    Replicate,
    /// Rank r holds the r-th slice along this dimension (first ranks take one more).
    Shard(usize),
    /// Every rank holds a full-shape tensor; the element-wise op over ranks is the value.
    Partial(ReduceOp),
}

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
}

/// The shape rank `r` of `p` holds for a tensor of `shape` placed `placement`.
pub fn local_shape(shape: &[usize], placement: Placement, p: usize, r: usize) -> Vec<usize> {
    local_shape_in_units(shape, placement, p, r, 1)
}

/// [`local_shape`] when a `Shard(d)` dim is split in whole units of `unit`.
pub fn local_shape_in_units(
    shape: &[usize],
    placement: Placement,
    p: usize,
    r: usize,
    unit: usize,
) -> Vec<usize> {
    let mut s = shape.to_vec();
    if let Placement::Shard(d) = placement {
        s[d] = split_range_in_units(shape[d], p, r, unit).len();
    }
    s
}

impl DTensor {
    pub(super) fn check_placement(
        op: &'static str,
        shape: &[usize],
        placement: Placement,
    ) -> Result<()> {
        Self::check_units(op, shape, placement, 1)
    }

    fn check_units(
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

    /// Build from host f32 data of the logical `shape`: `Replicate` uploads it to
    /// every rank, `Shard(d)` uploads each rank's slice, `Partial(Sum)` puts it
    /// on rank 0 and zeros elsewhere, `Partial(Max)` puts it on every rank.
    pub fn from_host(
        mesh: &Mesh,
        shape: &[usize],
        data: &[f32],
        placement: Placement,
    ) -> Result<DTensor> {
        Self::from_host_any(mesh, shape, data, (placement, 1), DType::F32)
    }

    /// Like [`DTensor::from_host`], with a `Shard(d)` dim split in whole
    /// units of `unit` elements (the first ranks take one more unit).
    pub fn from_host_in_units(
        mesh: &Mesh,
        shape: &[usize],
        data: &[f32],
        placement: Placement,
        unit: usize,
    ) -> Result<DTensor> {
        Self::from_host_any(mesh, shape, data, (placement, unit), DType::F32)
    }

    /// Like [`DTensor::from_host`] for i32 data (token ids, targets).
    pub fn from_host_i32(
        mesh: &Mesh,
        shape: &[usize],
        data: &[i32],
        placement: Placement,
    ) -> Result<DTensor> {
        let bits: Vec<f32> = data.iter().map(|v| f32::from_bits(*v as u32)).collect();
        Self::from_host_any(mesh, shape, &bits, (placement, 1), DType::I32)
    }

    fn from_host_any(
        mesh: &Mesh,
        shape: &[usize],
        data: &[f32],
        (placement, unit): (Placement, usize),
        dtype: DType,
    ) -> Result<DTensor> {
        const OP: &str = "DTensor::from_host";
        let n: usize = shape.iter().product();
        if data.len() != n {
            return Err(Error::DataLength {
                op: OP,
                shape: shape.into(),
                expected: n,
                got: data.len(),
            });
        }
        Self::check_units(OP, shape, placement, unit)?;
        let p = mesh.size();
        let upload = |r: &Rank, s: &[usize], d: &[f32]| -> Result<LocalTensor> {
            match dtype {
                DType::F32 => r.upload(s, d),
                DType::I32 => {
                    let v: Vec<i32> = d.iter().map(|x| x.to_bits() as i32).collect();
                    r.upload_i32(s, &v)
                }
                DType::F16 => {
                    let v: Vec<half::f16> = d.iter().map(|&x| half::f16::from_f32(x)).collect();
                    r.upload_f16(s, &v)
                }
            }
        };
        let shards = mesh
            .ranks()
            .iter()
            .map(|r| match placement {
                Placement::Replicate | Placement::Partial(ReduceOp::Max) => upload(r, shape, data),
                Placement::Partial(ReduceOp::Sum) => {
                    if r.index() == 0 {
                        upload(r, shape, data)
                    } else {
                        r.zeros(shape, dtype)
                    }
                }
                Placement::Shard(d) => {
                    let range = split_range_in_units(shape[d], p, r.index(), unit);
                    let part = host_narrow(data, shape, d, range);
                    let local = local_shape_in_units(shape, placement, p, r.index(), unit);
                    upload(r, &local, &part)
                }
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(DTensor::new(mesh, shards, shape.to_vec(), placement, unit))
    }

    /// Wrap existing shards (one per mesh rank, in rank order) after checking
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
        let p = mesh.size();
        if shards.len() != p {
            return Err(Error::invalid(
                OP,
                format!("expected {p} shards (one per rank), got {}", shards.len()),
            ));
        }
        let dtype = shards[0].dtype();
        for (r, s) in shards.iter().enumerate() {
            let rank = mesh.rank(r)?;
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

    fn new(
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

    /// One shard per rank, in rank order.
    pub fn shards(&self) -> &[LocalTensor] {
        &self.shards
    }

    /// Rank `r`'s shard.
    pub fn local(&self, r: usize) -> Result<&LocalTensor> {
        self.shards.get(r).ok_or(Error::OutOfRange {
            op: "DTensor::local",
            what: "rank",
            value: r as i64,
            bound: self.shards.len(),
        })
    }

    /// Build from host f32 data like [`DTensor::from_host`], stored as f16
    /// (each value rounded to nearest; needs `SHADER_F16`).
    pub fn from_host_f16(
        mesh: &Mesh,
        shape: &[usize],
        data: &[f32],
        placement: Placement,
    ) -> Result<DTensor> {
        Self::from_host_any(mesh, shape, data, (placement, 1), DType::F16)
    }

    /// Read the logical tensor back to the host (f32; f16 is widened, which
    /// is exact). Waits for the devices.
    pub fn to_host(&self) -> Result<Vec<f32>> {
        if self.dtype() == DType::F16 {
            let wide = self.cast(DType::F32)?.to_host()?;
            return Ok(match self.placement() {
                // Summed on the host in f32, then rounded once, as
                // `redistribute(Replicate)` would.
                Placement::Partial(ReduceOp::Sum) if self.mesh().size() > 1 => wide
                    .iter()
                    .map(|&v| half::f16::from_f32(v).to_f32())
                    .collect(),
                _ => wide,
            });
        }
        self.shards[0].expect_dtype("DTensor::to_host", DType::F32)?;
        let bytes = self.host_words()?;
        Ok(bytes.into_iter().map(f32::from_bits).collect())
    }

    /// Read the logical tensor back to the host (i32).
    pub fn to_host_i32(&self) -> Result<Vec<i32>> {
        self.shards[0].expect_dtype("DTensor::to_host_i32", DType::I32)?;
        Ok(self.host_words()?.into_iter().map(|w| w as i32).collect())
    }

    /// Assemble the logical value on the host, without counting as communication.
    fn host_words(&self) -> Result<Vec<u32>> {
        let p = self.mesh.size();
        let refs: Vec<&LocalTensor> = match self.placement {
            Placement::Replicate => vec![&self.shards[0]],
            _ => self.shards.iter().collect(),
        };
        let raw = download_many(&refs)?;
        let words: Vec<Vec<u32>> = raw
            .iter()
            .map(|b| bytemuck::pod_collect_to_vec(b))
            .collect();
        let dtype = self.dtype();
        Ok(match self.placement {
            Placement::Replicate => words.into_iter().next().unwrap_or_default(),
            Placement::Partial(op) => {
                let mut acc = words[0].clone();
                for w in &words[1..] {
                    for (a, b) in acc.iter_mut().zip(w) {
                        *a = op.combine_words(dtype, *a, *b);
                    }
                }
                acc
            }
            Placement::Shard(d) => {
                let (outer, total, inner) = outer_dim_inner(&self.shape, d);
                let sizes: Vec<usize> = (0..p)
                    .map(|r| split_range_in_units(total, p, r, self.unit).len())
                    .collect();
                let mut out = Vec::with_capacity(self.shape.iter().product());
                for o in 0..outer {
                    for (r, w) in words.iter().enumerate() {
                        let len = sizes[r] * inner;
                        out.extend_from_slice(&w[o * len..(o + 1) * len]);
                    }
                }
                out
            }
        })
    }
}
