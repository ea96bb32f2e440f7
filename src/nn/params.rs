//! [`Params`]: something that lists trainable [`Parameter`]s by name (layers,
//! models, and collections of them), what optimisers step and checkpoints
//! save. Implement it with `#[derive(Params)]`.

use super::lora::Adaptable;
use super::parameter::Parameter;
use crate::element::DType;
use crate::error::Result;

/// Something with named parameters: layers, models, and any set of
/// parameters an optimiser should step (`vec![&mut a, &mut b]`, a slice of
/// `&mut Parameter`, an `Option` or `Vec` of layers).
///
/// Names are field paths joined with `.` (`h.0.attn.c_attn.weight`), in a
/// fixed order: they are checkpoint names. The trait is object safe, so
/// `&dyn Params` and `&mut dyn Params` work everywhere a model is expected.
///
/// Implement it with `#[derive(Params)]` on a struct with named fields: each
/// field, in declaration order, lists its parameters under its name, except
/// fields marked `#[params(skip)]` (settings, saved activations); a field
/// marked `#[params(rename = "x")]` lists them under `x`.
///
/// ```
/// use wgpu_tp::nn::{
///     ColumnParallelConfig, ColumnParallelLinear, InitRng, LayerNorm, NormConfig, Params,
/// };
///
/// #[derive(Params)]
/// struct Net {
///     norm: LayerNorm,
///     layers: Vec<ColumnParallelLinear>,
///     #[params(rename = "head")]
///     out: Option<ColumnParallelLinear>,
///     #[params(skip)]
///     steps: u64,
/// }
///
/// # fn main() -> wgpu_tp::Result<()> {
/// let mesh = wgpu_tp::Mesh::simulated(2)?;
/// let mut rng = InitRng::new(0);
/// let mut no_bias = ColumnParallelConfig::new(4, 4);
/// no_bias.bias = false;
/// let net = Net {
///     norm: LayerNorm::new(&mesh, NormConfig::new(4))?,
///     layers: vec![ColumnParallelLinear::new(&mesh, no_bias, &mut rng)?],
///     out: None,
///     steps: 0,
/// };
/// let names: Vec<String> = net.named_parameters().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["norm.weight", "norm.bias", "layers.0.weight"]);
/// # Ok(())
/// # }
/// ```
pub trait Params {
    /// Call `f` with every parameter and its name under `prefix` (an empty
    /// prefix gives the bare names: `weight`, `fc1.bias`), in a fixed order.
    fn visit_params<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Parameter));

    /// [`Params::visit_params`] with mutable access, in the same order.
    fn visit_params_mut<'a>(
        &'a mut self,
        prefix: &str,
        f: &mut dyn FnMut(String, &'a mut Parameter),
    );

    /// Parameters with their names (`"weight"`, `"fc1.bias"`, ...), in a fixed order.
    fn named_parameters(&self) -> Vec<(String, &Parameter)> {
        let mut all = Vec::new();
        self.visit_params("", &mut |name, p| all.push((name, p)));
        all
    }

    /// Mutable access in the same order as [`Params::named_parameters`].
    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Parameter)> {
        let mut all = Vec::new();
        self.visit_params_mut("", &mut |name, p| all.push((name, p)));
        all
    }

    /// Call `f` with every linear layer that can carry a LoRA adapter and
    /// its name under `prefix` (`model.layers.0.self_attn.q_proj`), in the
    /// parameters' order. `#[derive(Params)]` visits the fields (a struct
    /// marked `#[params(adaptable)]` is handed over itself); a hand-written
    /// impl without such layers keeps this default, which visits nothing.
    fn visit_adaptable_mut(&mut self, prefix: &str, f: &mut dyn FnMut(String, &mut dyn Adaptable)) {
        let _ = (prefix, f);
    }

    /// Keep every weight matrix (each parameter of two or more dims:
    /// projections, embeddings, heads) in `dtype`, norm weights and biases
    /// in f32: bf16 (any adapter) or f16 (`SHADER_F16`) for generation,
    /// half the memory and half the bytes a decoding token reads; f32 to
    /// train again; or a quantized type (`DType::Quant`, llama.cpp's
    /// blocks; such weights are frozen, and in a browser
    /// [`Params::store_weights_as_async`] quantizes). Stops at the first
    /// error (see [`Parameter::store_as`]).
    fn store_weights_as(&mut self, dtype: DType) -> Result<()> {
        let mut out = Ok(());
        self.visit_params_mut("", &mut |_, p| {
            // A quantized weight (from a GGUF file, or quantized as it was
            // loaded) keeps its blocks.
            if out.is_ok() && p.shape().len() >= 2 && p.value.dtype().quant().is_none() {
                out = p.store_as(dtype);
            }
        });
        out
    }

    /// [`Params::store_weights_as`] as a future, for a browser: quantizing
    /// reads each weight's f32 values back to the host to run llama.cpp's
    /// quantizer, which a page can only await (see
    /// [`Parameter::store_as_async`]). The same weights change, in the same
    /// order.
    fn store_weights_as_async(&mut self, dtype: DType) -> impl Future<Output = Result<()>>
    where
        Self: Sized,
    {
        async move {
            for (_, p) in self.named_parameters_mut() {
                // As `store_weights_as`: quantized weights keep their blocks.
                if p.shape().len() >= 2 && p.value.dtype().quant().is_none() {
                    p.store_as_async(dtype).await?;
                }
            }
            Ok(())
        }
    }

    /// Drop every gradient.
    fn zero_grad(&mut self) {
        self.visit_params_mut("", &mut |_, p| p.zero_grad());
    }
}

/// `name` under `prefix`: `prefix.name`, or `name` alone under an empty
/// prefix. The names `#[derive(Params)]` and the collections' impls give.
pub fn join_name(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

/// A parameter is named by its prefix alone.
impl Params for Parameter {
    fn visit_params<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Parameter)) {
        f(prefix.to_string(), self);
    }

    fn visit_params_mut<'a>(
        &'a mut self,
        prefix: &str,
        f: &mut dyn FnMut(String, &'a mut Parameter),
    ) {
        f(prefix.to_string(), self);
    }
}

/// The parameters of the value if there is one (an optional bias), none otherwise.
impl<T: Params> Params for Option<T> {
    fn visit_params<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Parameter)) {
        if let Some(t) = self {
            t.visit_params(prefix, f);
        }
    }

    fn visit_params_mut<'a>(
        &'a mut self,
        prefix: &str,
        f: &mut dyn FnMut(String, &'a mut Parameter),
    ) {
        if let Some(t) = self {
            t.visit_params_mut(prefix, f);
        }
    }

    fn visit_adaptable_mut(&mut self, prefix: &str, f: &mut dyn FnMut(String, &mut dyn Adaptable)) {
        if let Some(t) = self {
            t.visit_adaptable_mut(prefix, f);
        }
    }
}

/// Entries by index: `prefix.0`, `prefix.1`, ... (PyTorch's `ModuleList` names).
impl<T: Params> Params for [T] {
    fn visit_params<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Parameter)) {
        for (i, t) in self.iter().enumerate() {
            t.visit_params(&join_name(prefix, &i.to_string()), f);
        }
    }

    fn visit_params_mut<'a>(
        &'a mut self,
        prefix: &str,
        f: &mut dyn FnMut(String, &'a mut Parameter),
    ) {
        for (i, t) in self.iter_mut().enumerate() {
            t.visit_params_mut(&join_name(prefix, &i.to_string()), f);
        }
    }

    fn visit_adaptable_mut(&mut self, prefix: &str, f: &mut dyn FnMut(String, &mut dyn Adaptable)) {
        for (i, t) in self.iter_mut().enumerate() {
            t.visit_adaptable_mut(&join_name(prefix, &i.to_string()), f);
        }
    }
}

/// Entries by index, as for slices.
impl<T: Params, const N: usize> Params for [T; N] {
    fn visit_params<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Parameter)) {
        self.as_slice().visit_params(prefix, f);
    }

    fn visit_params_mut<'a>(
        &'a mut self,
        prefix: &str,
        f: &mut dyn FnMut(String, &'a mut Parameter),
    ) {
        self.as_mut_slice().visit_params_mut(prefix, f);
    }

    fn visit_adaptable_mut(&mut self, prefix: &str, f: &mut dyn FnMut(String, &mut dyn Adaptable)) {
        self.as_mut_slice().visit_adaptable_mut(prefix, f);
    }
}

/// Entries by index, as for slices (`h.0`, `h.1`, ... for a model's blocks).
impl<T: Params> Params for Vec<T> {
    fn visit_params<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Parameter)) {
        self.as_slice().visit_params(prefix, f);
    }

    fn visit_params_mut<'a>(
        &'a mut self,
        prefix: &str,
        f: &mut dyn FnMut(String, &'a mut Parameter),
    ) {
        self.as_mut_slice().visit_params_mut(prefix, f);
    }

    fn visit_adaptable_mut(&mut self, prefix: &str, f: &mut dyn FnMut(String, &mut dyn Adaptable)) {
        self.as_mut_slice().visit_adaptable_mut(prefix, f);
    }
}

/// The boxed value's parameters, under the same names.
impl<T: Params + ?Sized> Params for Box<T> {
    fn visit_params<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Parameter)) {
        (**self).visit_params(prefix, f);
    }

    fn visit_params_mut<'a>(
        &'a mut self,
        prefix: &str,
        f: &mut dyn FnMut(String, &'a mut Parameter),
    ) {
        (**self).visit_params_mut(prefix, f);
    }

    fn visit_adaptable_mut(&mut self, prefix: &str, f: &mut dyn FnMut(String, &mut dyn Adaptable)) {
        (**self).visit_adaptable_mut(prefix, f);
    }
}

/// The borrowed value's parameters, under the same names: a set of borrowed
/// parameters or layers (`vec![&mut a, &mut b]`) is one [`Params`], so one
/// optimiser steps any of them.
///
/// A caveat of this impl: on an `x: &mut Model`, `x.named_parameters()`
/// resolves to this impl and borrows the reference `x` itself, so the list
/// cannot outlive `x` (or a temporary `&mut`); call it on `&*x` instead.
impl<T: Params + ?Sized> Params for &mut T {
    fn visit_params<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Parameter)) {
        (**self).visit_params(prefix, f);
    }

    fn visit_params_mut<'a>(
        &'a mut self,
        prefix: &str,
        f: &mut dyn FnMut(String, &'a mut Parameter),
    ) {
        (**self).visit_params_mut(prefix, f);
    }

    fn visit_adaptable_mut(&mut self, prefix: &str, f: &mut dyn FnMut(String, &mut dyn Adaptable)) {
        (**self).visit_adaptable_mut(prefix, f);
    }
}
