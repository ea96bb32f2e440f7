//! RoPE settings as `config.json` spells them, read ([`RopeConfig::from_hf`])
//! and written ([`RopeScaling::to_hf`]) for every family.

use serde_json::{Map, Value};

use super::hf_config::bad;
use super::rope::{RopeConfig, RopeScaling};
use crate::error::Result;

fn num(obj: &Map<String, Value>, key: &str, file: &str) -> Result<Option<f64>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| bad(file, format!("rope {key} is {v}, expected a number"))),
    }
}

impl RopeConfig {
    /// The RoPE settings of a `config.json` object, as hub files spell them
    /// (`rope_theta` beside `rope_scaling`, whose kind is `type` or
    /// `rope_type`) and as transformers 5 writes them (`rope_parameters` with
    /// `rope_theta` inside), for heads `head_dim` wide and a context of
    /// `max_pos`. A `partial_rotary_factor` below 1 is taken where the
    /// family lays its heads out for it (`partial`), else refused; a
    /// variant this crate cannot compute is an error naming it.
    pub(crate) fn from_hf(
        top: &Map<String, Value>,
        head_dim: usize,
        max_pos: usize,
        partial: bool,
        file: &str,
    ) -> Result<RopeConfig> {
        let params = top
            .get("rope_parameters")
            .filter(|v| !v.is_null())
            .or(top.get("rope_scaling"))
            .filter(|v| !v.is_null());
        let empty = Map::new();
        let obj = match params {
            None => &empty,
            Some(Value::Object(o)) => o,
            Some(v) => {
                return Err(bad(
                    file,
                    format!("rope_parameters / rope_scaling is {v}, expected an object"),
                ));
            }
        };
        let theta = num(obj, "rope_theta", file)?
            .or(num(top, "rope_theta", file)?)
            .unwrap_or(10000.0);
        let kind = obj
            .get("rope_type")
            .or(obj.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("default");
        let prf =
            num(obj, "partial_rotary_factor", file)?.or(num(top, "partial_rotary_factor", file)?);
        let rotary_dim = match prf {
            None => head_dim,
            Some(1.0) => head_dim,
            Some(f) if !partial => {
                return Err(bad(
                    file,
                    format!(
                        "partial_rotary_factor {f} is not supported for this family: every head \
                         is rotated whole"
                    ),
                ));
            }
            Some(f) => {
                let r = (head_dim as f64 * f) as usize;
                let fits = f > 0.0
                    && f <= 1.0
                    && r != 0
                    && r.is_multiple_of(2)
                    && (head_dim - r).is_multiple_of(2);
                if !fits {
                    return Err(bad(
                        file,
                        format!(
                            "partial_rotary_factor {f} of head_dim {head_dim} rotates {r} \
                             dimensions; it must be an even number, with an even rest"
                        ),
                    ));
                }
                r
            }
        };
        let factor = |required: bool| -> Result<Option<f64>> {
            let f = num(obj, "factor", file)?;
            if required && f.is_none() {
                return Err(bad(file, format!("rope type {kind:?} needs a factor")));
            }
            Ok(f)
        };
        let original = || -> Result<usize> {
            let key = "original_max_position_embeddings";
            let v = num(obj, key, file)?.or(num(top, key, file)?);
            Ok(v.map_or(max_pos, |v| v as usize))
        };
        let factors = |key: &str| -> Result<Vec<f64>> {
            let list = obj.get(key).and_then(Value::as_array).ok_or_else(|| {
                bad(
                    file,
                    format!("rope type {kind:?} needs {key}, a list of numbers"),
                )
            })?;
            let got: Option<Vec<f64>> = list.iter().map(Value::as_f64).collect();
            match got {
                Some(v) if v.len() == rotary_dim / 2 && v.iter().all(|x| *x > 0.0) => Ok(v),
                _ => Err(bad(
                    file,
                    format!(
                        "rope {key} must be {} positive numbers (rotated width {rotary_dim} / 2)",
                        rotary_dim / 2
                    ),
                )),
            }
        };
        let scaling = match kind {
            "default" => RopeScaling::Default,
            "linear" => RopeScaling::Linear {
                factor: factor(true)?.unwrap_or(1.0),
            },
            "dynamic" => RopeScaling::Dynamic {
                factor: factor(true)?.unwrap_or(1.0),
            },
            "llama3" => RopeScaling::Llama3 {
                factor: factor(true)?.unwrap_or(1.0),
                low_freq_factor: num(obj, "low_freq_factor", file)?.unwrap_or(1.0),
                high_freq_factor: num(obj, "high_freq_factor", file)?.unwrap_or(4.0),
                original_max_position_embeddings: original()?,
            },
            "yarn" => RopeScaling::Yarn {
                factor: factor(false)?,
                original_max_position_embeddings: original()?,
                attention_factor: num(obj, "attention_factor", file)?,
                beta_fast: num(obj, "beta_fast", file)?,
                beta_slow: num(obj, "beta_slow", file)?,
                mscale: num(obj, "mscale", file)?,
                mscale_all_dim: num(obj, "mscale_all_dim", file)?,
                truncate: obj.get("truncate").and_then(Value::as_bool).unwrap_or(true),
            },
            "longrope" | "su" => RopeScaling::LongRope {
                short_factor: factors("short_factor")?,
                long_factor: factors("long_factor")?,
                factor: factor(false)?,
                attention_factor: num(obj, "attention_factor", file)?,
                original_max_position_embeddings: original()?,
            },
            other => {
                return Err(bad(
                    file,
                    format!(
                        "rope type {other:?} is not supported (default, linear, dynamic, llama3, \
                         yarn and longrope are)"
                    ),
                ));
            }
        };
        Ok(RopeConfig {
            theta,
            head_dim,
            rotary_dim,
            scaling,
            max_position_embeddings: max_pos,
        })
    }
}

impl RopeScaling {
    /// `rope_scaling` as hub files spell it (`rope_type` and the older
    /// `type`); `None` for the default.
    pub(crate) fn to_hf(&self) -> Option<Value> {
        let s = self;
        let mut m = Map::new();
        let kind = match s {
            RopeScaling::Default => return None,
            RopeScaling::Linear { factor } => {
                m.insert("factor".into(), (*factor).into());
                "linear"
            }
            RopeScaling::Dynamic { factor } => {
                m.insert("factor".into(), (*factor).into());
                "dynamic"
            }
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => {
                m.insert("factor".into(), (*factor).into());
                m.insert("low_freq_factor".into(), (*low_freq_factor).into());
                m.insert("high_freq_factor".into(), (*high_freq_factor).into());
                m.insert(
                    "original_max_position_embeddings".into(),
                    (*original_max_position_embeddings).into(),
                );
                "llama3"
            }
            RopeScaling::Yarn {
                factor,
                original_max_position_embeddings,
                attention_factor,
                beta_fast,
                beta_slow,
                mscale,
                mscale_all_dim,
                truncate,
            } => {
                let opt = [
                    ("factor", factor),
                    ("attention_factor", attention_factor),
                    ("beta_fast", beta_fast),
                    ("beta_slow", beta_slow),
                    ("mscale", mscale),
                    ("mscale_all_dim", mscale_all_dim),
                ];
                for (k, v) in opt {
                    if let Some(v) = v {
                        m.insert(k.into(), (*v).into());
                    }
                }
                m.insert(
                    "original_max_position_embeddings".into(),
                    (*original_max_position_embeddings).into(),
                );
                if !truncate {
                    m.insert("truncate".into(), false.into());
                }
                "yarn"
            }
            RopeScaling::LongRope {
                short_factor,
                long_factor,
                factor,
                attention_factor,
                original_max_position_embeddings,
            } => {
                m.insert("short_factor".into(), short_factor.clone().into());
                m.insert("long_factor".into(), long_factor.clone().into());
                for (k, v) in [("factor", factor), ("attention_factor", attention_factor)] {
                    if let Some(v) = v {
                        m.insert(k.into(), (*v).into());
                    }
                }
                m.insert(
                    "original_max_position_embeddings".into(),
                    (*original_max_position_embeddings).into(),
                );
                "longrope"
            }
        };
        m.insert("rope_type".into(), kind.into());
        m.insert("type".into(), kind.into());
        Some(Value::Object(m))
    }
}
