//! The slicing kernels `kernels::narrow` and `kernels::concat` on one rank:
//! a round trip along every dim of a 3-D tensor with an empty piece, agreement
//! with the host `tensor::host_narrow`, and out-of-range arguments.

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
