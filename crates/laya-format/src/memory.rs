//! The output memory (docs/format.md §3 step 4, `laya.memory.*`): a table of vectors looked up
//! by a hash of the last few tokens and added to the state the heads read. It gives a small
//! network a memory of which words follow which character sequences, at the cost of one row
//! per order per prediction. This module owns the hash, so that a trainer and a runtime pick
//! the same rows.

/// The largest order (tokens hashed together).
pub const MAX_ORDER: u32 = 8;

/// The largest bucket count.
pub const MAX_BUCKETS: u32 = 1 << 24;

/// The value that stands for a position before the start of the token stream (before `BOS`).
pub const MISSING: u32 = u32::MAX;

/// The memory of a model: `buckets` rows of `memory_embd.weight`, and the orders `n` whose
/// hashed last `n` tokens each pick one of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Memory {
    /// Rows of the table.
    pub buckets: u32,
    /// Strictly increasing, each in `1..=MAX_ORDER`.
    pub orders: Vec<u32>,
}

impl Memory {
    /// The row that order `tail.len()` picks for `tail`, the embedding rows of the last
    /// `tail.len()` tokens of the stream, oldest first ([`MISSING`] before its start; `BOS`
    /// is row 0 like codepoint 0).
    ///
    /// ```
    /// use laya_format::memory::{Memory, MISSING};
    /// let m = Memory { buckets: 1000, orders: vec![2, 3] };
    /// let a = m.row(&[17, 42]);
    /// assert!(a < 1000);
    /// assert_eq!(a, m.row(&[17, 42]));
    /// assert_ne!(m.row(&[MISSING, 17, 42]), m.row(&[5, 17, 42]));
    /// ```
    pub fn row(&self, tail: &[u32]) -> u32 {
        // FNV-1a over the values, seeded by the order, then a 64-bit finaliser so that the
        // low bits (the bucket) depend on every value.
        let mut h = 0xCBF2_9CE4_8422_2325u64 ^ (tail.len() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        for &v in tail {
            h = (h ^ u64::from(v)).wrapping_mul(0x0000_0100_0000_01B3);
        }
        h ^= h >> 33;
        h = h.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
        h ^= h >> 33;
        (h % u64::from(self.buckets.max(1))) as u32
    }

    /// The rows of every order for a stream whose embedding rows end with `last` (oldest
    /// first; shorter than the largest order when the stream is, with `BOS` first), into
    /// `out[..orders.len()]`.
    ///
    /// ```
    /// use laya_format::memory::{Memory, MISSING};
    /// let m = Memory { buckets: 64, orders: vec![1, 3] };
    /// let mut out = [0u32; 2];
    /// m.rows(&[0, 9], &mut out); // BOS, then one character
    /// assert_eq!(out, [m.row(&[9]), m.row(&[MISSING, 0, 9])]);
    /// ```
    pub fn rows(&self, last: &[u32], out: &mut [u32]) {
        let mut tail = [MISSING; MAX_ORDER as usize];
        for (o, &n) in out.iter_mut().zip(&self.orders) {
            // `check` bounds the orders; an unchecked one is cut rather than read past the end.
            let n = (n as usize).min(tail.len());
            let have = last.len().min(n);
            tail[..n - have].fill(MISSING);
            tail[n - have..n].copy_from_slice(&last[last.len() - have..]);
            *o = self.row(&tail[..n]);
        }
    }

    /// Whether the orders and bucket count are ones a file may hold; the reason if not.
    pub fn check(&self) -> Result<(), String> {
        if !(1..=MAX_BUCKETS).contains(&self.buckets) {
            return Err(format!("{} buckets is outside 1..={MAX_BUCKETS}", self.buckets));
        }
        if self.orders.is_empty() || self.orders.iter().any(|&n| !(1..=MAX_ORDER).contains(&n)) {
            return Err(format!("orders {:?}: one or more, each in 1..={MAX_ORDER}", self.orders));
        }
        if self.orders.windows(2).any(|w| w[0] >= w[1]) {
            return Err(format!("orders {:?} are not strictly increasing", self.orders));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_spread_over_the_buckets() {
        let m = Memory { buckets: 97, orders: vec![2] };
        let mut seen = [0u32; 97];
        for a in 0..100u32 {
            for b in 0..100u32 {
                seen[m.row(&[a, b]) as usize] += 1;
            }
        }
        // 10,000 keys in 97 buckets: about 103 each; a poor hash leaves some nearly empty.
        assert!(seen.iter().all(|&n| (60..160).contains(&n)), "{seen:?}");
    }

    #[test]
    fn orders_of_the_same_tokens_pick_different_rows() {
        let m = Memory { buckets: 1 << 20, orders: vec![1, 2] };
        assert_ne!(m.row(&[7]), m.row(&[MISSING, 7]));
    }

    #[test]
    fn bad_settings_are_refused_with_a_reason() {
        for (buckets, orders) in [(0, vec![2]), (16, vec![]), (16, vec![0]), (16, vec![3, 2]), (16, vec![9]), (MAX_BUCKETS + 1, vec![1])] {
            let e = Memory { buckets, orders }.check().unwrap_err();
            assert!(!e.is_empty());
        }
        assert!(Memory { buckets: 16, orders: vec![1, 2, 4] }.check().is_ok());
    }
}
