//! LoRA on a whole model or a pipeline stage: [`Decoder::add_lora`] finds
//! the target layers by their checkpoint names, freezes every other
//! parameter and attaches adapters; [`Decoder::merge`] /
//! [`Decoder::unmerge`] fold them into the base weights and out again.

use super::config::LoraConfig;
use crate::error::{Error, Result};
use crate::nn::Params;
use crate::nn::decoder::Decoder;
use crate::nn::init::InitRng;

/// A stable 64-bit hash of `name` (FNV-1a): `A`'s draw depends on the
/// layer, not on the world size or the visiting order.
fn name_key(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// PEFT's initial `A` for `in` inputs: kaiming-uniform with `a = √5`,
/// i.e. U(−1/√in, 1/√in).
fn initial_a(seed: u64, name: &str, r: usize, inp: usize) -> Vec<f32> {
    let mut rng = InitRng::new(seed ^ name_key(name));
    let bound = 1.0 / (inp as f64).sqrt();
    (0..r * inp)
        .map(|_| ((2.0 * rng.next_f64() - 1.0) * bound) as f32)
        .collect()
}

impl Decoder {
    /// Add LoRA adapters (`config`) to every linear layer whose checkpoint
    /// name ends in one of `config.target_modules`, and freeze every other
    /// parameter (no gradient, no optimiser state): PEFT's
    /// `get_peft_model`. Adapter parameters are listed by [`Params`] under
    /// PEFT's names (`model.layers.0.self_attn.q_proj.lora_A.weight`).
    /// Works on any mesh and pipeline stage, with an f32, bf16 or quantized
    /// base (QLoRA). Errors, changing nothing, for an unknown target, an
    /// `r` larger than a layer, or a model that has adapters already.
    pub fn add_lora(&mut self, config: &LoraConfig) -> Result<()> {
        const OP: &str = "Decoder::add_lora";
        config.check()?;
        if self.lora.is_some() {
            return Err(Error::invalid(
                OP,
                "the model has adapters already: remove_lora() first",
            ));
        }
        let mut targets: Vec<(String, (usize, usize))> = Vec::new();
        let mut all: Vec<String> = Vec::new();
        self.visit_adaptable_mut("", &mut |name, layer| {
            if config.targets(&name) {
                targets.push((name.clone(), layer.features()));
            }
            let last = name.rsplit('.').next().unwrap_or(&name).to_string();
            if !all.contains(&last) {
                all.push(last);
            }
        });
        for t in &config.target_modules {
            let hit = targets
                .iter()
                .any(|(n, _)| n == t || n.ends_with(&format!(".{t}")));
            // A pipeline stage may hold none of a target's layers; a whole
            // model must hold each.
            if !hit && self.stage.1 == 1 {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "the model has no linear layer named {t:?}; its layers are {}",
                        all.join(", ")
                    ),
                ));
            }
        }
        for (name, (inp, out)) in &targets {
            if config.r > (*inp).min(*out) {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "r = {} is larger than {name} ({out} × {inp}): LoRA's rank is at most \
                         the layer's smaller side",
                        config.r
                    ),
                ));
            }
        }
        let mut result = Ok(());
        let mut index = 0u32;
        self.visit_adaptable_mut("", &mut |name, layer| {
            if result.is_err() || !config.targets(&name) {
                return;
            }
            let (inp, _) = layer.features();
            let a = initial_a(config.seed, &name, config.r, inp);
            index += 1;
            // Layer ids past the decoder's own dropouts (which use 0..).
            result = layer.attach_lora(config, &a, 1 << 20 | index);
        });
        if let Err(e) = result {
            self.visit_adaptable_mut("", &mut |_, layer| {
                layer.remove_lora();
            });
            return Err(e);
        }
        self.visit_params_mut("", &mut |_, p| p.freeze());
        self.visit_adaptable_mut("", &mut |_, layer| {
            if let Some((a, b)) = layer.lora_parameters() {
                a.unfreeze();
                b.unfreeze();
            }
        });
        self.lora = Some(config.clone());
        Ok(())
    }

    /// The adapters' settings, if the model has adapters.
    pub fn lora_config(&self) -> Option<&LoraConfig> {
        self.lora.as_ref()
    }

    /// Drop every adapter (merged ones stay in the base weights: PEFT's
    /// `merge_and_unload` after [`Decoder::merge`]) and make every
    /// parameter trainable again. Whether there were adapters.
    pub fn remove_lora(&mut self) -> bool {
        let mut any = false;
        self.visit_adaptable_mut("", &mut |_, layer| any |= layer.remove_lora());
        self.visit_params_mut("", &mut |_, p| p.unfreeze());
        self.lora = None;
        any
    }

    /// Fold every adapter into its base weight (`W += s·B·A`): the model
    /// then computes the same without the adapters' products, and
    /// [`Decoder::save_pretrained`] writes the merged model. An error,
    /// changing nothing, without adapters, when merged already, or for a
    /// quantized base.
    pub fn merge(&mut self) -> Result<()> {
        self.set_merged(true)
    }

    /// Take the adapters out of the base weights again (`W −= s·B·A`):
    /// the inverse of [`Decoder::merge`], up to rounding.
    pub fn unmerge(&mut self) -> Result<()> {
        self.set_merged(false)
    }

    fn set_merged(&mut self, merged: bool) -> Result<()> {
        const OP: &str = "Decoder::merge";
        if self.lora.is_none() {
            return Err(Error::invalid(
                OP,
                "the model has no adapters (add_lora or load_adapter)",
            ));
        }
        let mut state = Ok(());
        self.visit_adaptable_mut("", &mut |name, layer| {
            if state.is_ok() && layer.lora_merged() == Some(merged) {
                state = Err(Error::invalid(
                    OP,
                    format!(
                        "{name}'s adapter is {} already",
                        if merged { "merged" } else { "unmerged" }
                    ),
                ));
            }
        });
        state?;
        let mut result = Ok(());
        self.visit_adaptable_mut("", &mut |name, layer| {
            if result.is_ok() && layer.lora_merged().is_some() {
                result = layer
                    .set_lora_merged(merged)
                    .map_err(|e| Error::invalid(OP, format!("{name}: {e}")));
            }
        });
        result
    }
}
