//! `kernels::transpose` (the pack kernel the GEMM uses to bring transposed and
//! ragged operands into one layout): exact against a host transpose on ragged
//! and empty shapes, and its shape errors.

use crate::util::{Rng, mesh};
use wgpu_tp::kernels;

#[test]
fn transpose_matches_host_on_ragged_shapes() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("transpose");
    for (rows, cols) in [
        (1, 1),
        (7, 13),
        (13, 7),
        (17, 4),
        (4, 17),
        (0, 5),
        (5, 0),
        (300, 3),
    ] {
        let x = rng.vec(rows * cols);
        let t = kernels::transpose(&r.upload(&[rows, cols], &x).unwrap()).unwrap();
        assert_eq!(t.shape(), &[cols, rows]);
        let want: Vec<f32> = (0..cols * rows)
            .map(|i| x[(i % rows) * cols + i / rows])
            .collect();
        // A copy: bit-exact, and every element written (outputs are poisoned).
        assert_eq!(t.to_vec().unwrap(), want, "transpose of [{rows}, {cols}]");
    }
    let x3 = r.upload(&[2, 2, 2], &[0.0; 8]).unwrap();
    assert!(
        kernels::transpose(&x3).is_err(),
        "3-D input must be refused"
    );
}
