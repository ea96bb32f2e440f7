//! [`LoraConfig`]: which layers get adapters and how big they are (PEFT's
//! `LoraConfig`, the fields its `adapter_config.json` carries).

use crate::error::{Error, Result};

/// Settings of LoRA adapters: `y = base(x) + s · B·A·dropout(x)` on every
/// linear layer named in `target_modules`, with `A` `[r, in]`, `B`
/// `[out, r]` starting at zero and `s = alpha / r` (`alpha / √r` with
/// `use_rslora`).
#[derive(Clone, Debug, PartialEq)]
pub struct LoraConfig {
    /// The adapters' rank (`r` ≥ 1, at most the layer's smaller side).
    pub r: usize,
    /// The scale's numerator (PEFT's `lora_alpha`).
    pub alpha: f32,
    /// Dropout on the adapter's input while training (PEFT's `lora_dropout`).
    pub dropout: f32,
    /// Layers to adapt by their checkpoint names' last part (`q_proj`,
    /// `down_proj`, GPT-2's `c_attn`), or a whole dotted name's suffix
    /// (`self_attn.q_proj`): PEFT's matching.
    pub target_modules: Vec<String>,
    /// Scale by `alpha / √r` (rank-stabilised LoRA) instead of `alpha / r`.
    pub use_rslora: bool,
    /// Seed of `A`'s initial values (the same at every world size).
    pub seed: u64,
}

impl LoraConfig {
    /// Rank `r`, `alpha`, the given targets; no dropout, plain scaling, seed 0.
    pub fn new(r: usize, alpha: f32, target_modules: &[&str]) -> Self {
        LoraConfig {
            r,
            alpha,
            dropout: 0.0,
            target_modules: target_modules.iter().map(|s| s.to_string()).collect(),
            use_rslora: false,
            seed: 0,
        }
    }

    /// The factor the adapter's product is multiplied by.
    pub fn scaling(&self) -> f32 {
        if self.use_rslora {
            self.alpha / (self.r as f32).sqrt()
        } else {
            self.alpha / self.r as f32
        }
    }

    /// Whether the layer named `name` (a full dotted name) is a target.
    pub fn targets(&self, name: &str) -> bool {
        self.target_modules
            .iter()
            .any(|t| name == t || name.ends_with(&format!(".{t}")))
    }

    /// `r`, `alpha`, `dropout` and the targets are usable.
    pub(crate) fn check(&self) -> Result<()> {
        const OP: &str = "LoraConfig";
        if self.r == 0 {
            return Err(Error::invalid(OP, "r must be at least 1"));
        }
        if !self.alpha.is_finite() {
            return Err(Error::invalid(OP, "alpha must be finite"));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(Error::invalid(
                OP,
                format!("dropout {} must lie in [0, 1)", self.dropout),
            ));
        }
        if self.target_modules.is_empty() {
            return Err(Error::invalid(
                OP,
                "name at least one target module (e.g. q_proj, v_proj)",
            ));
        }
        Ok(())
    }
}
