//! [`Adaptable`]: a linear layer that can carry a LoRA adapter, reached by
//! name through [`Params::visit_adaptable_mut`](crate::nn::Params::visit_adaptable_mut).

use super::config::LoraConfig;
use crate::error::Result;

/// A linear layer that can carry a LoRA adapter (column-, row-parallel and
/// key/value-head layers). Models reach theirs by checkpoint name through
/// [`Params::visit_adaptable_mut`](crate::nn::Params::visit_adaptable_mut);
/// [`Decoder::add_lora`](crate::nn::Decoder::add_lora) is what users call.
pub trait Adaptable {
    /// `(in_features, out_features)` of the base weight.
    fn features(&self) -> (usize, usize);

    /// Give the layer a fresh adapter: `A` `[r, in]` from `a` (row-major
    /// master values), `B` zero; `name` keys its dropout masks. An error if
    /// it has one already or `r` does not fit the layer.
    fn attach_lora(&mut self, config: &LoraConfig, a: &[f32], layer: u32) -> Result<()>;

    /// Drop the adapter (unmerged); whether there was one.
    fn remove_lora(&mut self) -> bool;

    /// The adapter's parameters `(A, B)`, if the layer has one.
    fn lora_parameters(&mut self)
    -> Option<(&mut crate::nn::Parameter, &mut crate::nn::Parameter)>;

    /// Whether the adapter is folded into the base weight (`None`: no adapter).
    fn lora_merged(&self) -> Option<bool>;

    /// Fold the adapter into the base weight (`W += s·B·A`) or take it out
    /// again; the adapter's forward is off while merged. An error for a
    /// quantized base, or when already in that state.
    fn set_lora_merged(&mut self, merged: bool) -> Result<()>;

    /// Training mode (adapter dropout on, masks keyed by `step`) or evaluation.
    fn set_lora_mode(&mut self, training: bool, step: u64);
}
