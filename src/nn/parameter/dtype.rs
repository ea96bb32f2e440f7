//! The dtype a [`Parameter`] is kept in: f32 to train, bf16 or f16 for
//! generation (half the memory and the bytes a decoding token reads), and
//! how products read it.

use super::Parameter;
use crate::element::DType;
use crate::error::{Error, Result};
use crate::tensor::DTensor;

impl Parameter {
    /// The value as a product with `activations` reads it: as kept where it
    /// is a bf16 or f16 weight beside f32 activations (the kernels read it
    /// as stored), else cast to the activations' dtype (f32 masters for f16
    /// activations). Recorded on the tape like the value.
    pub fn operand_for(&self, activations: DType) -> Result<DTensor> {
        let narrow = matches!(
            self.value.dtype(),
            DType::BF16 | DType::F16 | DType::Quant(_)
        );
        if activations == DType::F32 && narrow {
            return Ok(self.value.clone());
        }
        self.value.cast(activations)
    }

    /// Keep the value in `dtype`: bf16 (or f16 on adapters with
    /// `SHADER_F16`) halves a weight's memory and the bytes a decoding token
    /// reads, for generation; f32 (exact from either) to train again.
    /// Rounds to nearest, ties to even; the gradient is dropped. A
    /// quantized dtype quantizes a 2-D weight as llama.cpp does (see
    /// [`QuantType::for_row`](crate::quant::QuantType::for_row)); the
    /// weight is then frozen (no gradient, optimisers skip it) and stays
    /// quantized (in a browser use [`Parameter::store_as_async`]).
    /// Optimisers refuse other parameters not kept in f32, and
    /// layers with `Overlap::Ring` multiply f32 weights only. On error
    /// nothing changes.
    pub fn store_as(&mut self, dtype: DType) -> Result<()> {
        if self.value.dtype() == dtype {
            return Ok(());
        }
        if dtype == DType::I32 {
            return Err(Error::invalid(
                "Parameter::store_as",
                "parameters are kept in f32, bf16, f16 or a quantized type, not i32",
            ));
        }
        if let DType::Quant(q) = dtype {
            return self.quantize(q);
        }
        if self.value.dtype().quant().is_some() {
            return Err(Error::invalid(
                "Parameter::store_as",
                format!(
                    "a {} weight stays quantized (its f32 values are lost): load the model \
                     again to keep it in {dtype}",
                    self.value.dtype()
                ),
            ));
        }
        let value = self.value.detach().cast(dtype)?;
        self.value = self.track(value);
        self.slot.set(None);
        Ok(())
    }

    /// [`Parameter::store_as`] as a future. Quantizing reads the f32 master
    /// back to the host, which a browser can only await (there
    /// `store_as` to a quantized dtype is an
    /// [`Error::WouldBlock`](crate::Error::WouldBlock)); the other dtypes
    /// convert on the device and need no wait.
    pub async fn store_as_async(&mut self, dtype: DType) -> Result<()> {
        match dtype {
            DType::Quant(q) if self.value.dtype() != dtype => self.quantize_async(q).await,
            _ => self.store_as(dtype),
        }
    }
}
