//! The expansion as tokens: which fields are visited, under which names, in
//! which order, and the errors refused inputs get (what `compile_error!`
//! would report). Whether the expansion compiles and lists the right
//! parameters is tested in the main crate (`tests/nn/params.rs`).

use super::expand;
use syn::{DeriveInput, parse_quote};

fn expanded(input: DeriveInput) -> String {
    expand(&input).expect("expands").to_string()
}

fn error(input: DeriveInput) -> String {
    match expand(&input) {
        Ok(t) => panic!("expected an error, got {t}"),
        Err(e) => e
            .into_iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join(" | "),
    }
}

/// The names joined onto the prefix, in the order they appear.
fn names(out: &str) -> Vec<String> {
    out.split("join_name (prefix , \"")
        .skip(1)
        .map(|s| s.split('"').next().unwrap().to_string())
        .collect()
}

#[test]
fn fields_in_declaration_order_skipped_and_renamed() {
    let out = expanded(parse_quote! {
        struct Net {
            wte: Embedding,
            #[params(skip)]
            config: Config,
            #[params(rename = "ln_f")]
            norm: LayerNorm,
            h: Vec<Block>,
            r#type: Option<Linear>,
        }
    });
    // Each name three times: in `visit_params`, `visit_params_mut` and
    // `visit_adaptable_mut`.
    let want = ["wte", "ln_f", "h", "type"];
    let got = names(&out);
    assert_eq!(got[..4], want, "{out}");
    assert_eq!(got[4..8], want, "{out}");
    assert_eq!(got[8..], want, "{out}");
    assert!(!out.contains("config"), "{out}");
    assert!(out.contains("& mut self . norm"), "{out}");
    assert!(!out.contains("where"), "no bounds on a plain struct: {out}");
}

#[test]
fn generic_structs_bound_their_listed_fields() {
    let out = expanded(parse_quote! {
        struct Stack<L> {
            layers: Vec<L>,
            #[params(skip)]
            marker: PhantomData<L>,
        }
    });
    assert!(
        out.contains("Vec < L > : :: wgpu_tp :: nn :: Params"),
        "{out}"
    );
    assert!(!out.contains("PhantomData < L > :"), "{out}");
}

#[test]
fn structs_without_parameters_list_nothing() {
    for input in [
        parse_quote!(
            struct Unit;
        ),
        parse_quote!(
            struct Settings {
                #[params(skip)]
                p: f32,
            }
        ),
    ] {
        let out = expanded(input);
        assert!(
            names(&out).is_empty() && out.contains("let _ = (prefix , f)"),
            "{out}"
        );
    }
}

#[test]
fn enums_unions_and_tuple_structs_are_refused() {
    let e = error(parse_quote!(
        enum Either {
            A(Linear),
            B(Linear),
        }
    ));
    assert!(e.contains("not enums"), "{e}");
    let e = error(parse_quote!(
        union U {
            a: u32,
        }
    ));
    assert!(e.contains("not unions"), "{e}");
    let e = error(parse_quote!(
        struct Wrapper(Table);
    ));
    assert!(
        e.contains("needs named fields") && e.contains("self.0"),
        "{e}"
    );
}

#[test]
fn bad_attributes_are_all_reported() {
    let e = error(parse_quote! {
        #[params(skip)]
        struct Net {
            #[params(frozen)]
            a: Linear,
            #[params(skip, rename = "b2")]
            b: Linear,
            #[params(rename = "")]
            c: Linear,
            #[params(rename = "x", rename = "y")]
            d: Linear,
        }
    });
    for want in [
        "goes on fields",
        "unknown `params` attribute",
        "cannot be renamed",
        "cannot be empty",
        "`rename` given twice",
    ] {
        assert!(e.contains(want), "{want:?} missing from {e}");
    }
}

#[test]
fn flattened_fields_use_the_prefix_and_adaptable_structs_hand_themselves_over() {
    let out = expanded(parse_quote! {
        #[params(adaptable)]
        struct Linear {
            weight: Parameter,
            #[params(flatten)]
            lora: Option<Lora>,
        }
    });
    assert_eq!(names(&out), ["weight", "weight"], "{out}");
    assert!(
        out.contains("visit_params (& self . lora , prefix , f)"),
        "{out}"
    );
    assert!(
        out.contains("f (:: std :: string :: String :: from (prefix) , self)"),
        "{out}"
    );
    let plain = expanded(parse_quote! {
        struct Block {
            attn: Attention,
        }
    });
    assert!(
        plain.contains("visit_adaptable_mut (& mut self . attn"),
        "{plain}"
    );
    let e = error(parse_quote! {
        #[params(frozen)]
        struct Net {
            #[params(flatten, rename = "x")]
            a: Linear,
        }
    });
    assert!(e.contains("except `adaptable`"), "{e}");
    assert!(e.contains("cannot be renamed"), "{e}");
}
