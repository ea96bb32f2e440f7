//! [`QuantType`]: the block formats of llama.cpp's ggml that the crate reads,
//! keeps on the device and writes: their ggml type ids, block lengths and
//! block sizes in bytes (`ggml.c`'s `type_traits`).

/// A block-quantized weight format of ggml. A row of `K` weights is
/// `K / block_len()` blocks of `block_bytes()` bytes each, every block
/// holding its own scale (and minimum or sub-block scales); a weight is
/// dequantized from its block alone.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuantType {
    /// 32 weights: an f16 scale and 32 signed bytes (8.5 bits a weight).
    Q8_0,
    /// 32 weights: an f16 scale and 32 nibbles offset by 8 (4.5 bits).
    Q4_0,
    /// 32 weights: f16 scale and minimum, 32 nibbles (5 bits).
    Q4_1,
    /// 32 weights: an f16 scale, 32 five-bit values offset by 16 (5.5 bits).
    Q5_0,
    /// 32 weights: f16 scale and minimum, 32 five-bit values (6 bits).
    Q5_1,
    /// 256 weights: f16 super-scale and super-minimum, eight 6-bit
    /// sub-block scales and minima, 256 nibbles (4.5 bits).
    Q4K,
    /// 256 weights: as `Q4K` with a fifth bit per weight (5.5 bits).
    Q5K,
    /// 256 weights: an f16 super-scale, sixteen 8-bit sub-block scales and
    /// 256 six-bit values offset by 32 (6.5625 bits).
    Q6K,
}

impl QuantType {
    /// Every format, in ggml's type-id order.
    pub const ALL: [QuantType; 8] = [
        QuantType::Q4_0,
        QuantType::Q4_1,
        QuantType::Q5_0,
        QuantType::Q5_1,
        QuantType::Q8_0,
        QuantType::Q4K,
        QuantType::Q5K,
        QuantType::Q6K,
    ];

    /// ggml's type id (`enum ggml_type`), as GGUF tensor infos store it.
    pub fn ggml_id(self) -> u32 {
        match self {
            QuantType::Q4_0 => 2,
            QuantType::Q4_1 => 3,
            QuantType::Q5_0 => 6,
            QuantType::Q5_1 => 7,
            QuantType::Q8_0 => 8,
            QuantType::Q4K => 12,
            QuantType::Q5K => 13,
            QuantType::Q6K => 14,
        }
    }

    /// The format with ggml type id `id`, if the crate supports it.
    pub fn from_ggml_id(id: u32) -> Option<QuantType> {
        QuantType::ALL.into_iter().find(|q| q.ggml_id() == id)
    }

    /// Weights per block: 32, or 256 for the K-quants.
    pub fn block_len(self) -> usize {
        match self {
            QuantType::Q4K | QuantType::Q5K | QuantType::Q6K => 256,
            _ => 32,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            QuantType::Q4_0 => 18,
            QuantType::Q4_1 => 20,
            QuantType::Q5_0 => 22,
            QuantType::Q5_1 => 24,
            QuantType::Q8_0 => 34,
            QuantType::Q4K => 144,
            QuantType::Q5K => 176,
            QuantType::Q6K => 210,
        }
    }

    /// Blocks in a row of `k` weights: a last, partly used block holds a
    /// ragged tail (zeros past `k`; GGUF files never have one).
    pub fn blocks_per_row(self, k: usize) -> usize {
        k.div_ceil(self.block_len())
    }

    /// Bytes of `rows` rows of `k` weights.
    pub fn bytes_for(self, rows: usize, k: usize) -> usize {
        rows * self.blocks_per_row(k) * self.block_bytes()
    }

    /// The format llama.cpp's quantizer gives a row of `k` weights asked
    /// for this one: itself where `k` is whole blocks, else its fallback
    /// (Q4_K → Q5_0, Q5_K → Q5_1, Q6_K → Q8_0, `llama-quant.cpp`), and
    /// `None` where even 32 does not divide `k` (llama.cpp keeps F16 there;
    /// the crate keeps the value as it is).
    pub fn for_row(self, k: usize) -> Option<QuantType> {
        let q = match self {
            _ if k.is_multiple_of(self.block_len()) => self,
            QuantType::Q4K => QuantType::Q5_0,
            QuantType::Q5K => QuantType::Q5_1,
            QuantType::Q6K => QuantType::Q8_0,
            other => other,
        };
        k.is_multiple_of(q.block_len()).then_some(q)
    }

    /// llama.cpp's name of the type (`"Q4_K"`), as its tools print it.
    pub fn ggml_name(self) -> &'static str {
        match self {
            QuantType::Q4_0 => "Q4_0",
            QuantType::Q4_1 => "Q4_1",
            QuantType::Q5_0 => "Q5_0",
            QuantType::Q5_1 => "Q5_1",
            QuantType::Q8_0 => "Q8_0",
            QuantType::Q4K => "Q4_K",
            QuantType::Q5K => "Q5_K",
            QuantType::Q6K => "Q6_K",
        }
    }
}

impl std::fmt::Display for QuantType {
    /// Lower case, as `--weights` takes it: `q4_k`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.ggml_name().to_ascii_lowercase())
    }
}

impl std::str::FromStr for QuantType {
    type Err = String;

    /// `q8_0`, `Q4_K`, … (either case).
    fn from_str(s: &str) -> Result<Self, String> {
        QuantType::ALL
            .into_iter()
            .find(|q| q.ggml_name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let names: Vec<String> = QuantType::ALL.iter().map(|q| q.to_string()).collect();
                format!("unknown quantized type {s:?}: one of {}", names.join(", "))
            })
    }
}
