//! [`Pipeline::save_stage`]: one safetensors file per stage, loadable into
//! any layout with [`load_safetensors_dir`](crate::nn::load_safetensors_dir).

use std::path::{Path, PathBuf};

use safetensors::Dtype;

use super::{Pipeline, PipelineStage};
use crate::element::DType;
use crate::error::Result;
use crate::nn::checkpoint::serialize;

impl Pipeline {
    /// Save `stage`'s master parameters to `dir/stage-SSSSS-of-NNNNN.safetensors`
    /// (F32), under the whole model's names; a parameter a stage shares with
    /// an earlier one (the tied table on the last stage) is left to that
    /// stage's file. Every process calls it for every stage it drives (the
    /// masters are gathered over each stage's group); one rank writes each
    /// file: rank 0 of the first replica of the stage (coordinate 0 along
    /// every axis but the pipeline's and the stage group's own). Returns the
    /// file's path.
    pub fn save_stage(&self, stage: &dyn PipelineStage, dir: impl AsRef<Path>) -> Result<PathBuf> {
        let (s, n) = stage.stage();
        let later: Vec<String> = stage
            .shared_parameters()
            .into_iter()
            .filter(|(_, other)| *other < s)
            .map(|(name, _)| name)
            .collect();
        let params: Vec<_> = stage
            .named_parameters()
            .into_iter()
            .filter(|(name, _)| !later.contains(name))
            .collect();
        let bytes = serialize(params, DType::F32, Dtype::F32)?;
        let path = dir
            .as_ref()
            .join(format!("stage-{:05}-of-{n:05}.safetensors", s + 1));
        if self.writes_stage(stage)? {
            std::fs::write(&path, bytes)?;
        }
        Ok(path)
    }

    /// Whether this process writes `stage`'s file (see [`Pipeline::save_stage`]).
    fn writes_stage(&self, stage: &dyn PipelineStage) -> Result<bool> {
        let group = stage.stage_mesh();
        if group.ranks().first().map(|r| r.index()) != Some(0) {
            return Ok(false);
        }
        let root = group.root();
        let coords = root.coords_of(group.root_rank(0)?)?;
        let own: Vec<String> = group.axes().into_iter().map(|(a, _)| a).collect();
        Ok(root
            .axes()
            .iter()
            .zip(coords)
            .all(|((a, _), c)| c == 0 || *a == self.pipe.axis() || own.contains(a)))
    }
}
