//! Long-running mutation fuzzer for the laya-format readers.
//!
//! ```text
//! cargo run -p laya-format --release --example fuzz_reader -- [SECONDS] [SEED] [FILE.laya ...]
//! ```
//! Mutates the given model files (or two generated ones) for SECONDS (default 60) and prints how
//! many inputs were tried. Exits non-zero at the first input a reader mishandles.

use std::time::{Duration, Instant};

use laya_format::testing::{exercise_readers, mutate, random_model, SplitMix64, TinyConfig};
use laya_format::{write_model, GgmlType, GgufFile};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seconds: u64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(60);
    let seed: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(0x1a7a);
    let mut bases: Vec<Vec<u8>> = Vec::new();
    for path in args.iter().skip(2) {
        match std::fs::read(path) {
            Ok(b) => bases.push(b),
            Err(e) => {
                eprintln!("fuzz_reader: cannot read {path}: {e}");
                std::process::exit(2);
            }
        }
    }
    if bases.is_empty() {
        for ty in [GgmlType::Q4_0, GgmlType::F16] {
            let (meta, tensors) = random_model(&TinyConfig::small(), 11, ty);
            match write_model(&meta, &tensors) {
                Ok(b) => bases.push(b),
                Err(e) => {
                    eprintln!("fuzz_reader: cannot build a base model: {e}");
                    std::process::exit(2);
                }
            }
        }
    }
    let hot: Vec<usize> = bases.iter().map(|b| GgufFile::parse(b).map(|f| f.data_offset as usize).unwrap_or(b.len())).collect();

    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut rng = SplitMix64::new(seed);
    let (mut tried, mut loaded) = (0u64, 0u64);
    while Instant::now() < deadline {
        let i = tried as usize % bases.len();
        let bytes = mutate(&bases[i], &mut rng, hot[i]);
        match exercise_readers(&bytes) {
            Ok(true) => loaded += 1,
            Ok(false) => {}
            Err(e) => {
                eprintln!("fuzz_reader: input {tried} (seed {seed}): {e}");
                std::process::exit(1);
            }
        }
        tried += 1;
    }
    println!("fuzz_reader: {tried} mutated inputs tried in {seconds} s, {loaded} loaded after re-patching the checksum, no failures (seed {seed})");
}
