//! The element types of a GEMM pipeline ([`Precision`]) and the sources
//! composed from them, interned once per process: the tiled kernel here,
//! the register kernels in `register.rs`.

use crate::element::DType;
pub(crate) use crate::kernels::interned::interned;

/// Element types of one GEMM pipeline: of A and B (`input`) and of C
/// (`output`); f32 or f16. Arithmetic is f32 in every case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Precision {
    input: DType,
    output: DType,
}

impl Precision {
    /// Every pair the kernels are built for.
    pub(crate) const ALL: [Precision; 4] = [
        Precision::new(DType::F32, DType::F32),
        Precision::new(DType::F16, DType::F16),
        Precision::new(DType::F16, DType::F32),
        Precision::new(DType::F32, DType::F16),
    ];

    pub(super) const fn new(input: DType, output: DType) -> Self {
        Precision { input, output }
    }

    /// The element type of A and B.
    pub(crate) fn input(self) -> DType {
        self.input
    }

    /// `enable f16;` where needed and the `AIn` / `COut` aliases, composed in
    /// front of the shared header.
    pub(crate) fn prelude(self) -> String {
        let f16 = self.input == DType::F16 || self.output == DType::F16;
        format!(
            "{}alias AIn = {};\nalias COut = {};\n",
            if f16 { "enable f16;\n" } else { "" },
            self.input,
            self.output
        )
    }

    /// The pipeline family: one per pair, so the cache keeps them apart.
    pub(crate) fn family(self) -> &'static str {
        match (self.input, self.output) {
            (DType::F16, DType::F16) => "gemm_f16",
            (DType::F16, _) => "gemm_f16_to_f32",
            (_, DType::F16) => "gemm_f32_to_f16",
            _ => "gemm",
        }
    }

    /// The workgroup-memory kernel for real GPUs (a 64×64 tile of C per
    /// workgroup) in this precision, composed once per process.
    pub(crate) fn tiled_source(self) -> &'static str {
        interned(&format!("tiled {self:?}"), || {
            self.prelude()
                + include_str!("../../../shaders/gemm_header.wgsl")
                + include_str!("../../../shaders/gemm_tiled.wgsl")
        })
    }
}

impl Precision {
    /// The cooperative-matrix kernel (f16 operands only; a 128×128 tile of
    /// C per workgroup), composed once per process.
    pub(crate) fn coop_source(self) -> &'static str {
        interned(&format!("coop {self:?}"), || {
            "enable wgpu_cooperative_matrix;\n".to_string()
                + &self.prelude()
                + include_str!("../../../shaders/gemm_header.wgsl")
                + include_str!("../../../shaders/gemm_coop.wgsl")
        })
    }
}
