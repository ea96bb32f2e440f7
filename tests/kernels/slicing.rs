//! The slicing kernels `kernels::narrow` and `kernels::concat` on one rank:
//! a round trip along every dim of a 3-D tensor with an empty piece, agreement
//! with the host `tensor::host_narrow`, and out-of-range arguments; long
//! contiguous runs (copied run by run) and short ones agree with the host.

use crate::util::mesh;
use wgpu_tp::kernels;

#[test]
fn layout_kernels_narrow_and_concat() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let shape = [3usize, 5, 7];
    let data: Vec<f32> = (0..105).map(|v| v as f32).collect();
    let x = r.upload(&shape, &data).unwrap();
    for dim in 0..3 {
        let d = shape[dim];
        let a = kernels::narrow(&x, dim, 0, 2).unwrap();
        let b = kernels::narrow(&x, dim, 2, d - 2).unwrap();
        let e = kernels::narrow(&x, dim, 1, 0).unwrap();
        assert_eq!(a.shape()[dim], 2);
        let whole = kernels::concat(&[&a, &e, &b], dim).unwrap();
        assert_eq!(
            whole.to_vec().unwrap(),
            data,
            "narrow+concat round trip on dim {dim}"
        );
        let want: Vec<f32> = wgpu_tp::tensor::host_narrow(&data, &shape, dim, 2..d);
        assert_eq!(b.to_vec().unwrap(), want);
    }
    assert!(kernels::narrow(&x, 3, 0, 1).is_err());
    assert!(kernels::narrow(&x, 1, 4, 2).is_err());
}

/// Runs of 4096 words or more are copied run by run (buffer copies), the
/// rest by the block-copy kernel (`copy_fold`): both give the host slices,
/// on ragged shapes, for narrow and concat along the last and a middle
/// dimension.
#[test]
fn long_runs_narrow_and_concat_like_the_host() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = crate::util::Rng::fresh("slicing_long_runs");
    for shape in [[3usize, 7, 4099], [5, 8200, 1], [2, 13, 700]] {
        let n: usize = shape.iter().product();
        let data = rng.vec(n);
        let x = r.upload(&shape, &data).unwrap();
        for dim in [1, 2] {
            let d = shape[dim];
            let (s, len) = (d / 3, d - d / 3 - 1);
            let got = kernels::narrow(&x, dim, s, len).unwrap();
            let want = wgpu_tp::tensor::host_narrow(&data, &shape, dim, s..s + len);
            assert!(got.to_vec().unwrap() == want, "narrow {shape:?} dim {dim}");
            let head = kernels::narrow(&x, dim, 0, s).unwrap();
            let tail = kernels::narrow(&x, dim, s, d - s).unwrap();
            let whole = kernels::concat(&[&head, &tail], dim).unwrap();
            assert!(
                whole.to_vec().unwrap() == data,
                "concat {shape:?} dim {dim}"
            );
        }
    }
}
