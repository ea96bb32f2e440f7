//! On a shared-device mesh a replicated value uploads as one buffer every
//! rank's shard aliases, and the element-wise ops, the row adds and the
//! norms on such operands run once for all ranks when nothing records them
//! (inference): against the same ops on a buffer per rank, the same bits on
//! every rank, 1/P of the dispatches. Recorded (training), they run per rank.

use crate::util::{Rng, mesh_env};
use wgpu_tp::kernels::Activation;
use wgpu_tp::{DTensor, LocalTensor, Mesh, MeshBuilder, Placement};

/// The same value with its own buffer on every rank.
fn unaliased(t: &DTensor) -> DTensor {
    let shards: Vec<LocalTensor> = t.shards().iter().map(|s| s.deep_copy().unwrap()).collect();
    DTensor::from_shards(t.mesh(), shards, t.shape(), t.placement()).unwrap()
}

/// LayerNorm, the row-parallel epilogue (bias and residual), a residual add
/// and GELU on `[t, dim]`; each rank's result and the kernels dispatched.
fn block(mesh: &Mesh, ops: &[DTensor; 5]) -> (Vec<Vec<f32>>, u64) {
    let [x, g, b, bias, res] = ops;
    mesh.synchronize().unwrap();
    mesh.start_trace().unwrap();
    let y = x.layer_norm(g, Some(b), 1e-5).unwrap();
    let z = y.add_row_add(bias, res).unwrap();
    let w = z.add(res).unwrap().activation(Activation::Gelu).unwrap();
    mesh.synchronize().unwrap();
    let trace = mesh.stop_trace().unwrap();
    let calls = trace.top_kernels(usize::MAX).iter().map(|k| k.calls).sum();
    let per_rank = w.shards().iter().map(|s| s.to_vec().unwrap()).collect();
    (per_rank, calls)
}

#[test]
fn replicated_ops_run_once_on_a_shared_device_p2_3_4_8() {
    mesh_env();
    let mut rng = Rng::fresh("aliased_ops");
    let (t, dim) = (7, 13);
    for p in [2, 3, 4, 8] {
        // A private mesh: a trace counts every kernel on the device.
        let mesh = MeshBuilder::new().ranks(p).shared_device().build().unwrap();
        let up = |shape: &[usize], v: &[f32]| {
            DTensor::from_host(&mesh, shape, v, Placement::Replicate).unwrap()
        };
        let ops = [
            up(&[t, dim], &rng.vec(t * dim)),
            up(&[dim], &rng.vec(dim)),
            up(&[dim], &rng.vec(dim)),
            up(&[dim], &rng.vec(dim)),
            up(&[t, dim], &rng.vec(t * dim)),
        ];
        let (once, once_calls) = block(&mesh, &ops);
        let (each, each_calls) = block(&mesh, &ops.each_ref().map(unaliased));
        assert!(once_calls > 0, "P = {p}: nothing traced");
        assert_eq!(each_calls, p as u64 * once_calls, "P = {p}: dispatches");
        let mut taped = ops.clone();
        taped[1] = taped[1].requires_grad();
        let (recorded, recorded_calls) = block(&mesh, &taped);
        assert_eq!(
            recorded_calls, each_calls,
            "P = {p}: recorded ops run per rank"
        );
        assert_eq!(recorded, each, "P = {p}: recorded values");
        for r in 0..p {
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&once[r]), bits(&each[r]), "P = {p}, rank {r}");
        }
    }
}
