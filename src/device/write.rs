//! Host values written over a tensor in place ([`LocalTensor::write_f32`]):
//! checkpoint loading fills a parameter's own buffers, so loading needs no
//! second copy of the model on the device.

use super::tensor::LocalTensor;
use crate::element::DType;
use crate::error::{Error, Result};

impl LocalTensor {
    /// Overwrite the values in place with `data` (f32, [`LocalTensor::len`]
    /// values): pending recorded work that may read the old values is
    /// submitted first, and operands derived from them are dropped. A buffer
    /// shared with another rank is refused (the write would change both).
    pub(crate) fn write_f32(&self, op: &'static str, data: &[f32]) -> Result<()> {
        if data.len() != self.len() {
            return Err(Error::DataLength {
                op,
                shape: self.shape().into(),
                expected: self.len(),
                got: data.len(),
            });
        }
        self.write_f32_at(op, 0, data)
    }

    /// Overwrite the values from element `offset` on with `data` in place,
    /// as [`LocalTensor::write_f32`] does for the whole tensor.
    pub(crate) fn write_f32_at(&self, op: &'static str, offset: usize, data: &[f32]) -> Result<()> {
        self.write_at(op, offset, data, false)
    }

    /// [`LocalTensor::write_f32_at`] into a buffer that every rank's shard
    /// of one replicated value aliases (the caller checked): every rank is
    /// to get `data` there, so the one write is each rank's.
    pub(crate) fn write_f32_at_every_rank(
        &self,
        op: &'static str,
        offset: usize,
        data: &[f32],
    ) -> Result<()> {
        self.write_at(op, offset, data, true)
    }

    fn write_at(
        &self,
        op: &'static str,
        offset: usize,
        data: &[f32],
        every_rank: bool,
    ) -> Result<()> {
        self.expect_dtype(op, DType::F32)?;
        if offset
            .checked_add(data.len())
            .is_none_or(|end| end > self.len())
        {
            return Err(Error::invalid(
                op,
                format!(
                    "{} values at {offset} do not fit a tensor of {}",
                    data.len(),
                    self.len()
                ),
            ));
        }
        if self.is_shared_across_ranks() && !every_rank {
            return Err(Error::invalid(
                op,
                "the tensor's buffer is shared with another rank; write a deep_copy instead",
            ));
        }
        self.device().check()?;
        // `write_buffer` lands at the start of the next submit: submit what
        // is recorded now, so reads of the old values come before it.
        self.device().flush();
        // Each block's share of [offset, offset + len), at its own offset.
        let mut first = 0;
        for b in self.blocks() {
            let (lo, hi) = (
                offset.max(first),
                (offset + data.len()).min(first + b.len()),
            );
            if lo < hi {
                let part = &data[lo - offset..hi - offset];
                let buf = b.buffer(op)?;
                let at = ((lo - first) * 4) as u64;
                b.device()
                    .queue
                    .write_buffer(buf, at, bytemuck::cast_slice(part));
            }
            first += b.len();
        }
        self.bump_version();
        Ok(())
    }
}
