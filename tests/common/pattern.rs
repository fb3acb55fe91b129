//! The deterministic test pattern streamed bodies are made of, and a
//! checksum to compare streams by. Self-contained (std and `bytes` only), so
//! `benches/tools/soak_driver.rs` includes it too (`#[path]`).

/// A fast, position-dependent checksum of a byte stream (FNV-1a over 64-bit
/// little-endian words, then the length), fed in arbitrary pieces.
#[derive(Debug, Clone)]
pub struct Checksum {
    h: u64,
    /// Bytes fed so far (the echo upstream adds to it directly for the
    /// bodies it only counts).
    pub(crate) len: u64,
    pending: [u8; 8],
    npending: usize,
}

impl Default for Checksum {
    fn default() -> Self {
        Self::new()
    }
}

impl Checksum {
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    pub fn new() -> Self {
        Checksum {
            h: 0xcbf2_9ce4_8422_2325,
            len: 0,
            pending: [0; 8],
            npending: 0,
        }
    }

    fn word(&mut self, w: u64) {
        self.h = (self.h ^ w).wrapping_mul(Self::PRIME);
    }

    pub fn update(&mut self, mut data: &[u8]) {
        self.len += data.len() as u64;
        if self.npending > 0 {
            let take = (8 - self.npending).min(data.len());
            self.pending[self.npending..self.npending + take].copy_from_slice(&data[..take]);
            self.npending += take;
            data = &data[take..];
            if self.npending < 8 {
                return;
            }
            let w = u64::from_le_bytes(self.pending);
            self.word(w);
            self.npending = 0;
        }
        let mut words = data.chunks_exact(8);
        for w in &mut words {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            self.word(u64::from_le_bytes(b));
        }
        let rest = words.remainder();
        self.pending[..rest.len()].copy_from_slice(rest);
        self.npending = rest.len();
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The hex digest (the state is not consumed).
    pub fn hex(&self) -> String {
        let mut c = self.clone();
        if c.npending > 0 {
            let mut b = [0u8; 8];
            b[..c.npending].copy_from_slice(&c.pending[..c.npending]);
            c.word(u64::from_le_bytes(b));
        }
        let len = c.len;
        c.word(len);
        format!("{:016x}", c.h)
    }
}

/// The deterministic test pattern: byte `p` of any streamed payload is
/// `pattern_block()[p % PATTERN_LEN]`.
pub const PATTERN_LEN: usize = 64 * 1024;

/// One block of pseudo-random bytes (xorshift, fixed seed), shared.
pub fn pattern_block() -> bytes::Bytes {
    static BLOCK: std::sync::OnceLock<bytes::Bytes> = std::sync::OnceLock::new();
    BLOCK
        .get_or_init(|| {
            let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
            let mut v = Vec::with_capacity(PATTERN_LEN);
            while v.len() < PATTERN_LEN {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                v.extend_from_slice(&x.to_le_bytes());
            }
            v.truncate(PATTERN_LEN);
            bytes::Bytes::from(v)
        })
        .clone()
}

/// The checksum of the first `n` bytes of the pattern.
pub fn pattern_checksum(n: u64) -> String {
    let block = pattern_block();
    let mut c = Checksum::new();
    let mut left = n;
    while left > 0 {
        let take = left.min(PATTERN_LEN as u64) as usize;
        c.update(&block[..take]);
        left -= take as u64;
    }
    c.hex()
}

/// Checks that `data` equals the pattern starting at stream offset `offset`.
pub fn matches_pattern(offset: u64, data: &[u8]) -> bool {
    let block = pattern_block();
    let mut pos = (offset % PATTERN_LEN as u64) as usize;
    let mut data = data;
    while !data.is_empty() {
        let take = (PATTERN_LEN - pos).min(data.len());
        if data[..take] != block[pos..pos + take] {
            return false;
        }
        data = &data[take..];
        pos = 0;
    }
    true
}
