//! A decoder's parameters under the whole model's checkpoint names: the
//! skeleton's own under the family's [`Names`](super::Names), each block's
//! under `{layers}.{i}` for its layer `i` of the whole model (a pipeline
//! stage names its layers as the whole model does).

use super::model::Decoder;
use crate::nn::lora::Adaptable;
use crate::nn::parameter::Parameter;
use crate::nn::params::{Params, join_name};

impl Params for Decoder {
    fn visit_params<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Parameter)) {
        let n = self.spec.names;
        if let Some(e) = &self.embed {
            e.visit_params(&join_name(prefix, n.embed), f);
        }
        if let Some(p) = &self.positions {
            p.visit_params(&join_name(prefix, n.positions), f);
        }
        for (i, b) in self.range.clone().zip(&self.blocks) {
            b.visit_params(&join_name(prefix, &format!("{}.{i}", n.layers)), f);
        }
        if let Some(norm) = &self.norm {
            norm.visit_params(&join_name(prefix, n.norm), f);
        }
        if let Some(h) = &self.head {
            h.visit_params(&join_name(prefix, n.head), f);
        }
    }

    fn visit_params_mut<'a>(
        &'a mut self,
        prefix: &str,
        f: &mut dyn FnMut(String, &'a mut Parameter),
    ) {
        let n = self.spec.names;
        if let Some(e) = &mut self.embed {
            e.visit_params_mut(&join_name(prefix, n.embed), f);
        }
        if let Some(p) = &mut self.positions {
            p.visit_params_mut(&join_name(prefix, n.positions), f);
        }
        for (i, b) in self.range.clone().zip(&mut self.blocks) {
            b.visit_params_mut(&join_name(prefix, &format!("{}.{i}", n.layers)), f);
        }
        if let Some(norm) = &mut self.norm {
            norm.visit_params_mut(&join_name(prefix, n.norm), f);
        }
        if let Some(h) = &mut self.head {
            h.visit_params_mut(&join_name(prefix, n.head), f);
        }
    }

    fn visit_adaptable_mut(&mut self, prefix: &str, f: &mut dyn FnMut(String, &mut dyn Adaptable)) {
        let n = self.spec.names;
        for (i, b) in self.range.clone().zip(&mut self.blocks) {
            b.visit_adaptable_mut(&join_name(prefix, &format!("{}.{i}", n.layers)), f);
        }
        if let Some(h) = &mut self.head {
            h.visit_adaptable_mut(&join_name(prefix, n.head), f);
        }
    }
}
