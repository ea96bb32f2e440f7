//! The checks of quantized data given to the crate, apart from
//! [`QuantType`] itself (which the dtypes and errors name).

use super::types::QuantType;
use crate::error::{Error, Result};

impl QuantType {
    /// The `[rows, K]` of a 2-D weight `shape` held as `blocks` of this
    /// format, or an error for `op` saying what is wrong.
    pub fn check_weight(
        self,
        op: &'static str,
        shape: &[usize],
        blocks: &[u8],
    ) -> Result<(usize, usize)> {
        let &[rows, k] = shape else {
            return Err(Error::shape(op, "a 2-D weight [rows, K]", shape));
        };
        let want = rows.checked_mul(self.bytes_for(1, k));
        if want != Some(blocks.len()) {
            return Err(Error::invalid(
                op,
                format!(
                    "a {self} weight [{rows}, {k}] is {} bytes of blocks, got {}",
                    want.map_or("too many".to_string(), |w| w.to_string()),
                    blocks.len()
                ),
            ));
        }
        Ok((rows, k))
    }
}
