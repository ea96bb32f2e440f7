//! LoRA adapters (Hu et al. 2021; PEFT's `LoraConfig`) on any model of the
//! crate, on any mesh: `y = base(x) + s · B·A·dropout(x)` on the targeted
//! linear layers, the base frozen (f32, bf16 or quantized: QLoRA), and
//! PEFT's `adapter_config.json` + `adapter_model.safetensors` read and
//! written. How an adapter is split over the ranks, and what it
//! communicates, is docs/MATH.md §20.
//!
//! Files: `config.rs` ([`LoraConfig`]), `target.rs` ([`Adaptable`], what
//! a linear layer implements), `adapter.rs` ([`Lora`]: one layer's
//! parameters and products), `model.rs` (adding, merging and removing on a
//! [`Decoder`](crate::nn::Decoder)), `peft.rs` (PEFT's files).

mod adapter;
mod config;
mod model;
#[cfg(not(target_arch = "wasm32"))]
mod peft;
mod target;

pub use adapter::Lora;
pub(crate) use adapter::{LoraSplit, adaptable, set_merged};
pub use config::LoraConfig;
pub use target::Adaptable;
