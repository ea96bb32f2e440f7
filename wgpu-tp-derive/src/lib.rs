//! `#[derive(Params)]` for [wgpu-tp](https://crates.io/crates/wgpu-tp): a
//! struct lists its parameters by field name, nested structs joining names
//! with `.` (`h.0.attn.c_attn.weight`). Use it through `wgpu_tp::nn::Params`,
//! which names both the trait and this derive.
#![deny(missing_docs)]

use proc_macro::TokenStream;
use proc_macro2::TokenStream as TokenStream2;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Error, Fields, Ident, LitStr, Type, parse_macro_input};

/// Implements `wgpu_tp::nn::Params` for a struct with named fields: each
/// field, in declaration order, lists its own parameters under
/// `prefix.field` (the bare field name under an empty prefix).
///
/// Field attributes:
/// - `#[params(skip)]`: not a parameter holder (settings, saved activations,
///   state); every field that is not skipped must implement `Params`;
/// - `#[params(rename = "name")]`: list the field under `name` instead;
/// - `#[params(flatten)]`: list the field's parameters under the struct's
///   own prefix (a layer's adapter: `q_proj.lora_A.weight`).
///
/// Struct attribute: `#[params(adaptable)]` makes
/// `Params::visit_adaptable_mut` hand the struct itself (which must
/// implement `wgpu_tp::nn::Adaptable`: a linear layer) to the visitor
/// instead of visiting its fields.
///
/// Enums, unions and tuple structs are refused: their parameters have no
/// field names to be listed under; implement `Params` by hand for them.
#[proc_macro_derive(Params, attributes(params))]
pub fn derive_params(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand(&input)
        .unwrap_or_else(Error::into_compile_error)
        .into()
}

/// A field that holds parameters: how to reach it and its name.
struct Listed {
    member: Ident,
    /// `None`: flattened, listed under the struct's own prefix.
    name: Option<String>,
    ty: Type,
}

/// What `#[params(...)]` says about one field.
#[derive(Default)]
struct FieldAttrs {
    skip: bool,
    flatten: bool,
    rename: Option<LitStr>,
}

fn field_attrs(field: &syn::Field) -> syn::Result<FieldAttrs> {
    let mut out = FieldAttrs::default();
    for attr in field.attrs.iter().filter(|a| a.path().is_ident("params")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("skip") {
                if out.skip {
                    return Err(meta.error("`skip` given twice"));
                }
                out.skip = true;
            } else if meta.path.is_ident("flatten") {
                if out.flatten {
                    return Err(meta.error("`flatten` given twice"));
                }
                out.flatten = true;
            } else if meta.path.is_ident("rename") {
                let name: LitStr = meta.value()?.parse()?;
                if name.value().is_empty() {
                    return Err(Error::new_spanned(
                        &name,
                        "a parameter name cannot be empty",
                    ));
                }
                if out.rename.replace(name).is_some() {
                    return Err(meta.error("`rename` given twice"));
                }
            } else {
                return Err(meta.error(
                    "unknown `params` attribute: expected `skip`, `flatten` or `rename = \"name\"`",
                ));
            }
            Ok(())
        })?;
    }
    if let (true, Some(name)) = (out.skip, &out.rename) {
        return Err(Error::new_spanned(
            name,
            "a skipped field lists no parameters, so it cannot be renamed",
        ));
    }
    if let (true, Some(name)) = (out.flatten, &out.rename) {
        return Err(Error::new_spanned(
            name,
            "a flattened field is listed under the struct's prefix, so it cannot be renamed",
        ));
    }
    Ok(out)
}

/// Whether the struct carries `#[params(adaptable)]` (the only struct
/// attribute), or the errors of the others.
fn adaptable(input: &DeriveInput) -> syn::Result<bool> {
    let mut found = false;
    let mut errors: Option<Error> = None;
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("params")) {
        let parsed = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("adaptable") {
                found = true;
                Ok(())
            } else {
                Err(meta.error(
                    "`#[params(...)]` goes on fields, not on the struct (except `adaptable`)",
                ))
            }
        });
        if let Err(e) = parsed {
            push_error(&mut errors, e);
        }
    }
    match errors {
        Some(e) => Err(e),
        None => Ok(found),
    }
}

/// The fields to visit, in declaration order, or every error found at once.
fn listed_fields(input: &DeriveInput) -> syn::Result<Vec<Listed>> {
    const HOW: &str = "implement `wgpu_tp::nn::Params` by hand instead";
    let fields = match &input.data {
        Data::Struct(s) => match &s.fields {
            Fields::Named(named) => &named.named,
            Fields::Unit => return Ok(Vec::new()),
            Fields::Unnamed(_) => {
                return Err(Error::new_spanned(
                    &input.ident,
                    format!(
                        "#[derive(Params)] needs named fields: a tuple struct's fields have no names to list parameters under; name the fields, or {HOW} (e.g. delegating to `self.0`)"
                    ),
                ));
            }
        },
        Data::Enum(e) => {
            return Err(Error::new(
                e.enum_token.span(),
                format!(
                    "#[derive(Params)] works on structs with named fields, not enums: the parameters would depend on the variant; {HOW}"
                ),
            ));
        }
        Data::Union(u) => {
            return Err(Error::new(
                u.union_token.span(),
                format!("#[derive(Params)] works on structs with named fields, not unions; {HOW}"),
            ));
        }
    };
    let mut errors: Option<Error> = adaptable(input).err();
    let mut listed = Vec::new();
    for field in fields {
        let member = field.ident.clone().expect("named fields have names");
        match field_attrs(field) {
            Ok(FieldAttrs { skip: true, .. }) => {}
            Ok(FieldAttrs { flatten: true, .. }) => {
                let ty = field.ty.clone();
                listed.push(Listed {
                    member,
                    name: None,
                    ty,
                });
            }
            Ok(FieldAttrs { rename, .. }) => {
                let name = Some(rename.map_or_else(|| unraw(&member), |n| n.value()));
                let ty = field.ty.clone();
                listed.push(Listed { member, name, ty });
            }
            Err(e) => push_error(&mut errors, e),
        }
    }
    match errors {
        Some(e) => Err(e),
        None => Ok(listed),
    }
}

fn push_error(errors: &mut Option<Error>, e: Error) {
    match errors {
        Some(all) => all.combine(e),
        None => *errors = Some(e),
    }
}

/// A field's name as written, without a raw identifier's `r#`.
fn unraw(ident: &Ident) -> String {
    let s = ident.to_string();
    s.strip_prefix("r#").map(str::to_string).unwrap_or(s)
}

/// The `impl Params` for `input`, or the errors to report instead.
fn expand(input: &DeriveInput) -> syn::Result<TokenStream2> {
    let listed = listed_fields(input)?;
    let is_adaptable = adaptable(input)?;
    let ident = &input.ident;
    let mut generics = input.generics.clone();
    // A generic struct's fields need `Params` only for the arguments it is
    // used with; a plain struct gets no bounds, so a field that lacks
    // `Params` is reported at the field.
    if generics.type_params().next().is_some() {
        let where_clause = generics.make_where_clause();
        for Listed { ty, .. } in &listed {
            where_clause
                .predicates
                .push(syn::parse_quote!(#ty: ::wgpu_tp::nn::Params));
        }
    }
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    let visit = |mutable: bool| -> Vec<TokenStream2> {
        listed
            .iter()
            .map(|Listed { member, name, ty }| {
                let (call, borrow) = if mutable {
                    (quote!(visit_params_mut), quote!(&mut))
                } else {
                    (quote!(visit_params), quote!(&))
                };
                let under = match name {
                    Some(name) => quote!(&::wgpu_tp::nn::join_name(prefix, #name)),
                    None => quote!(prefix),
                };
                quote_spanned! {ty.span()=>
                    ::wgpu_tp::nn::Params::#call(#borrow self.#member, #under, f);
                }
            })
            .collect()
    };
    let (visits, visits_mut) = (visit(false), visit(true));
    let adapt = if is_adaptable {
        quote!(f(::std::string::String::from(prefix), self);)
    } else if listed.is_empty() {
        quote!(let _ = (prefix, f);)
    } else {
        let calls = listed.iter().map(|Listed { member, name, ty }| {
            let under = match name {
                Some(name) => quote!(&::wgpu_tp::nn::join_name(prefix, #name)),
                None => quote!(prefix),
            };
            quote_spanned! {ty.span()=>
                ::wgpu_tp::nn::Params::visit_adaptable_mut(&mut self.#member, #under, f);
            }
        });
        quote!(#(#calls)*)
    };
    let unused = listed.is_empty().then(|| quote!(let _ = (prefix, f);));
    Ok(quote! {
        #[automatically_derived]
        impl #impl_generics ::wgpu_tp::nn::Params for #ident #ty_generics #where_clause {
            fn visit_params<'__params>(
                &'__params self,
                prefix: &::core::primitive::str,
                f: &mut dyn ::core::ops::FnMut(
                    ::std::string::String,
                    &'__params ::wgpu_tp::nn::Parameter,
                ),
            ) {
                #unused
                #(#visits)*
            }

            fn visit_params_mut<'__params>(
                &'__params mut self,
                prefix: &::core::primitive::str,
                f: &mut dyn ::core::ops::FnMut(
                    ::std::string::String,
                    &'__params mut ::wgpu_tp::nn::Parameter,
                ),
            ) {
                #unused
                #(#visits_mut)*
            }

            fn visit_adaptable_mut(
                &mut self,
                prefix: &::core::primitive::str,
                f: &mut dyn ::core::ops::FnMut(
                    ::std::string::String,
                    &mut dyn ::wgpu_tp::nn::Adaptable,
                ),
            ) {
                #adapt
            }
        }
    })
}

#[cfg(test)]
mod tests;
