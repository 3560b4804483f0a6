//! Mutation fuzzing of the readers: whatever the bytes, parsing returns Ok or Err, never panics,
//! never reads out of bounds and never allocates from an absurd count.
//!
//! `LAYA_FUZZ_CASES` raises the proptest case count (default 2000). The long run:
//! `cargo test -p laya-format --release --test fuzz -- --ignored fuzz_long --nocapture`
//! with `LAYA_FUZZ_SECONDS` (default 60) or `LAYA_FUZZ_CASES` bounding it.

mod common;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use laya_format::testing::{exercise_readers, mutate, SplitMix64};
use laya_format::{GgmlType, GgufFile};
use proptest::prelude::*;

/// Small valid files (F16 and Q4_0 keep them small) and the length of their header + tables.
fn bases() -> &'static [(Vec<u8>, usize)] {
    static BASES: OnceLock<Vec<(Vec<u8>, usize)>> = OnceLock::new();
    BASES.get_or_init(|| {
        [GgmlType::Q4_0, GgmlType::F16]
            .into_iter()
            .map(|ty| {
                let (_, _, bytes) = common::small(ty);
                let hot = GgufFile::parse(&bytes).unwrap().data_offset as usize;
                (bytes, hot)
            })
            .collect()
    })
}

fn cases() -> u32 {
    std::env::var("LAYA_FUZZ_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(2000)
}

#[test]
fn base_files_load() {
    for (bytes, _) in bases() {
        assert_eq!(exercise_readers(bytes), Ok(true));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn mutated_files_never_panic(which in 0usize..2, seed in any::<u64>()) {
        let (base, hot) = &bases()[which];
        let mut rng = SplitMix64::new(seed);
        let bytes = mutate(base, &mut rng, *hot);
        prop_assert_eq!(exercise_readers(&bytes).err(), None);
    }

    #[test]
    fn arbitrary_bytes_after_a_valid_magic_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..512)) {
        let mut bytes = b"GGUF\x03\0\0\0".to_vec();
        bytes.extend(tail);
        prop_assert_eq!(exercise_readers(&bytes).err(), None);
    }
}

#[test]
#[ignore = "long fuzz run; see the module comment"]
fn fuzz_long() {
    let seconds: u64 = std::env::var("LAYA_FUZZ_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(60);
    let max_cases: u64 = std::env::var("LAYA_FUZZ_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(u64::MAX);
    let seed: u64 = std::env::var("LAYA_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x1a7a);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut rng = SplitMix64::new(seed);
    let (mut tried, mut loaded) = (0u64, 0u64);
    while tried < max_cases && Instant::now() < deadline {
        let (base, hot) = &bases()[(tried % 2) as usize];
        let bytes = mutate(base, &mut rng, *hot);
        match exercise_readers(&bytes) {
            Ok(true) => loaded += 1,
            Ok(false) => {}
            Err(e) => panic!("input {tried} (seed {seed}): {e}"),
        }
        tried += 1;
    }
    println!("fuzz_long: {tried} mutated inputs tried ({loaded} still loaded after re-patching the checksum), seed {seed}");
}
