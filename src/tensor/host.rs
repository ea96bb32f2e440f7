//! Moving a [`DTensor`]'s logical value between the host and its shards:
//! uploading host data under a placement (`from_host*`) and assembling it
//! back (`to_host*`), without counting as communication. In a multi-process
//! mesh every process uploads its own slices of the (same) host data, and
//! `to_host` gives every process the whole value.

use super::aliased::made_once;
use super::dtensor::DTensor;
use super::placement::{Placement, local_shape_in_units};
use crate::device::{LocalTensor, Mesh, Rank, block_on, download_many_async};
use crate::element::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::shard::{host_narrow, outer_dim_inner, split_range_in_units};

impl DTensor {
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
                DType::BF16 => {
                    let v: Vec<half::bf16> = d.iter().map(|&x| half::bf16::from_f32(x)).collect();
                    r.upload_bf16(s, &v)
                }
                DType::Quant(q) => Err(Error::invalid(
                    OP,
                    format!("{q} weights are made by quantizing (Parameter::store_as)"),
                )),
            }
        };
        // Ranks on one device read one buffer of a whole value (`aliased.rs`).
        if matches!(
            placement,
            Placement::Replicate | Placement::Partial(ReduceOp::Max)
        ) && let Some(shards) = made_once(mesh, |r| upload(r, shape, data))?
        {
            return Ok(DTensor::new(mesh, shards, shape.to_vec(), placement, unit));
        }
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
    /// is exact). Waits for the devices (in a browser, use
    /// [`DTensor::to_host_async`]).
    pub fn to_host(&self) -> Result<Vec<f32>> {
        block_on("DTensor::to_host", self.to_host_async())
    }

    /// [`DTensor::to_host`] as a future: only the final copy to the host
    /// waits, resolved by the map callbacks.
    pub async fn to_host_async(&self) -> Result<Vec<f32>> {
        if let dtype @ (DType::F16 | DType::BF16) = self.dtype() {
            let wide = Box::pin(self.cast(DType::F32)?.to_host_async()).await?;
            return Ok(match self.placement() {
                // Summed on the host in f32, then rounded once, as
                // `redistribute(Replicate)` would.
                Placement::Partial(ReduceOp::Sum) if self.mesh().size() > 1 => wide
                    .iter()
                    .map(|&v| match dtype {
                        DType::F16 => half::f16::from_f32(v).to_f32(),
                        _ => half::bf16::from_f32(v).to_f32(),
                    })
                    .collect(),
                _ => wide,
            });
        }
        if self.dtype().quant().is_none() {
            self.shards()[0].expect_dtype("DTensor::to_host", DType::F32)?;
        }
        let bytes = self.host_words().await?;
        Ok(bytes.into_iter().map(f32::from_bits).collect())
    }

    /// Read the logical tensor back to the host (i32).
    pub fn to_host_i32(&self) -> Result<Vec<i32>> {
        block_on("DTensor::to_host_i32", self.to_host_i32_async())
    }

    /// [`DTensor::to_host_i32`] as a future.
    pub async fn to_host_i32_async(&self) -> Result<Vec<i32>> {
        self.shards()[0].expect_dtype("DTensor::to_host_i32", DType::I32)?;
        let words = self.host_words().await?;
        Ok(words.into_iter().map(|w| w as i32).collect())
    }

    /// Assemble the logical value on the host, without counting as communication.
    async fn host_words(&self) -> Result<Vec<u32>> {
        let p = self.mesh().size();
        let refs: Vec<&LocalTensor> = match self.placement() {
            Placement::Replicate => vec![&self.shards()[0]],
            _ => self.shards().iter().collect(),
        };
        let mut words: Vec<Vec<u32>> = if self.dtype().quant().is_some() {
            // Dequantized shard by shard on the host, as ggml does.
            let mut words = Vec::with_capacity(refs.len());
            for t in refs {
                words.push(
                    t.to_vec_async()
                        .await?
                        .iter()
                        .map(|v| v.to_bits())
                        .collect(),
                );
            }
            words
        } else {
            let raw = download_many_async(&refs).await?;
            raw.iter()
                .map(|b| bytemuck::pod_collect_to_vec(b))
                .collect()
        };
        if self.mesh().is_multi_process() && self.placement() != Placement::Replicate {
            // Each process holds its own shard: every process gets them all.
            let mine = words.pop().unwrap_or_default();
            words = crate::comm::gather_words(self.mesh(), mine)?;
        }
        let dtype = self.dtype();
        Ok(match self.placement() {
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
                let (outer, total, inner) = outer_dim_inner(self.shape(), d);
                let sizes: Vec<usize> = (0..p)
                    .map(|r| split_range_in_units(total, p, r, self.shard_unit()).len())
                    .collect();
                let mut out = Vec::with_capacity(self.shape().iter().product());
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
