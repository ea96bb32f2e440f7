//! [`Module`]: a layer's forward pass, as candle and burn name it.

use crate::error::Result;
use crate::tensor::DTensor;

/// A layer with one input and one output; models with other signatures
/// (token ids in, a loss out, a cache alongside) have inherent forward methods.
///
/// Listing a layer's parameters is [`Params`](super::Params), not this trait.
pub trait Module {
    /// The layer applied to `x`.
    fn forward(&self, x: &DTensor) -> Result<DTensor>;
}

/// The single-input layers, through their inherent `forward`.
macro_rules! module_is_forward {
    ($($layer:ty),*) => {$(
        impl Module for $layer {
            fn forward(&self, x: &DTensor) -> Result<DTensor> {
                <$layer>::forward(self, x)
            }
        }
    )*};
}

module_is_forward!(
    super::ColumnParallelLinear,
    super::RowParallelLinear,
    super::LayerNorm,
    super::RMSNorm,
    super::Dropout,
    super::ParallelMlp
);
