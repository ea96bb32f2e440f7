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
        self.expect_dtype(op, DType::F32)?;
        if data.len() != self.len() {
            return Err(Error::DataLength {
                op,
                shape: self.shape().into(),
                expected: self.len(),
                got: data.len(),
            });
        }
        if self.is_shared_across_ranks() {
            return Err(Error::invalid(
                op,
                "the tensor's buffer is shared with another rank; write a deep_copy instead",
            ));
        }
        self.device().check()?;
        // `write_buffer` lands at the start of the next submit: submit what
        // is recorded now, so reads of the old values come before it.
        self.device().flush();
        let mut at = 0;
        for b in self.blocks() {
            let part = &data[at..at + b.len()];
            at += part.len();
            if !part.is_empty() {
                let buf = b.buffer(op)?;
                b.device()
                    .queue
                    .write_buffer(buf, 0, bytemuck::cast_slice(part));
            }
        }
        self.bump_version();
        Ok(())
    }
}
