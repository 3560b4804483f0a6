//! The user file (docs/personalisation.md): a fuzzed reader that never panics, damaged files
//! set aside with a reason, mode 0600, and concurrent writers that never leave a torn file.

use std::path::PathBuf;

use laya_runtime::{User, UserFileError, UserModel};
use proptest::prelude::*;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("laya-user-file-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn sample() -> UserModel {
    let mut u = UserModel::with_settings(500.0, 1000);
    for line in [["今天", "我们", "讨论"], ["光标", "的", "默认"], ["hello", "world", "again"]] {
        u.learn_words(line);
    }
    u.learn_words(["今天", "我们"]);
    u.block("坏词");
    u
}

#[test]
fn round_trip_keeps_counts_pairs_blocklist_and_settings() {
    let u = sample();
    let back = UserModel::from_bytes(&u.to_bytes()).unwrap();
    assert_eq!(back.words(), u.words());
    assert_eq!(back.pair_list(), u.pair_list());
    assert_eq!(back.blocklist().collect::<Vec<_>>(), ["坏词"]);
    assert_eq!((back.half_life(), back.capacity(), back.clock()), (500.0, 1000, u.clock()));
    // Same history, same bytes.
    assert_eq!(back.to_bytes(), u.to_bytes());
}

#[test]
fn every_truncation_and_bit_flip_is_refused_with_a_reason() {
    let bytes = sample().to_bytes();
    for len in 0..bytes.len() {
        let e = UserModel::from_bytes(&bytes[..len]).expect_err("truncated");
        assert!(matches!(e, UserFileError::Truncated | UserFileError::Checksum { .. } | UserFileError::Corrupt(_)), "{len}: {e}");
    }
    for at in 0..bytes.len() {
        for bit in [0, 3, 7] {
            let mut b = bytes.clone();
            b[at] ^= 1 << bit;
            let e = UserModel::from_bytes(&b).expect_err("flipped");
            assert!(!e.to_string().is_empty());
        }
    }
    assert!(matches!(UserModel::from_bytes(b"GGUF\x03\0\0\0 a model, not a user file"), Err(UserFileError::Foreign)));
    let mut newer = bytes.clone();
    newer[8] = 9;
    assert!(matches!(UserModel::from_bytes(&newer), Err(UserFileError::Version(9))));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// The reader's fuzz target: any bytes give a model or an error, never a panic.
    #[test]
    fn the_reader_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300), magic in any::<bool>()) {
        let mut b = bytes;
        if magic {
            b.splice(0..0, b"LAYAUSR\0\x01\0\0\0".iter().copied());
        }
        let _ = UserModel::from_bytes(&b);
    }

    /// A valid file with its checksum recomputed after a change: the fields themselves are
    /// checked (counts, indices, lengths, UTF-8), not only the checksum.
    #[test]
    fn damaged_fields_under_a_valid_checksum_never_panic(at in 12usize..200, byte in any::<u8>()) {
        let mut b = sample().to_bytes();
        let n = b.len();
        if at < n - 8 {
            b[at] = byte;
            let sum = twox_hash::XxHash3_64::oneshot(&b[..n - 8]);
            b[n - 8..].copy_from_slice(&sum.to_le_bytes());
            if let Ok(u) = UserModel::from_bytes(&b) {
                // Whatever was accepted is a consistent model.
                let again = UserModel::from_bytes(&u.to_bytes()).unwrap();
                prop_assert_eq!(again.words(), u.words());
            }
        }
    }

    /// Any sequence of learning, forgetting and blocking saves and loads to the same history.
    #[test]
    fn random_histories_round_trip(ops in proptest::collection::vec((0u8..4, 0usize..12), 0..80)) {
        let pool = ["今天", "我们", "光标", "hello", "😀", "拉雅", "a", "ä", "的", "默认位置", "x y", "，"];
        let mut u = UserModel::with_settings(7.0, 6);
        for (op, w) in ops {
            match op {
                0 | 1 => { u.learn_words([pool[w], pool[(w + 1) % pool.len()]]); }
                2 => { u.forget(pool[w]); }
                _ => { if w % 5 == 0 { u.block(pool[w]); } else { u.unblock(pool[w]); } }
            }
        }
        let back = UserModel::from_bytes(&u.to_bytes()).unwrap();
        prop_assert_eq!(back.words(), u.words());
        prop_assert_eq!(back.pair_list(), u.pair_list());
        prop_assert!(back.len() <= 6);
    }
}

#[test]
fn an_unreadable_file_is_set_aside_and_learning_starts_fresh() {
    let d = dir("aside");
    let path = d.join("me.layu");
    for (what, bytes) in
        [("truncated", sample().to_bytes()[..40].to_vec()), ("foreign", b"{\"json\": true}".to_vec()), ("empty", Vec::new())]
    {
        std::fs::write(&path, &bytes).unwrap();
        let opened = User::open(&path).unwrap();
        let aside = opened.set_aside.unwrap_or_else(|| panic!("{what}: not set aside"));
        assert!(opened.user.read().is_empty(), "{what}");
        assert!(!path.exists(), "{what}");
        assert_eq!(std::fs::read(&aside.moved_to).unwrap(), bytes, "{what}: nothing of the old file is lost");
        assert!(aside.to_string().contains(&aside.moved_to.display().to_string()), "{what}: {aside}");
        std::fs::remove_file(&aside.moved_to).unwrap();
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[cfg(unix)]
#[test]
fn saved_files_are_private_and_a_bad_path_is_an_error() {
    use std::os::unix::fs::PermissionsExt;
    let d = dir("mode");
    let path = d.join("me.layu");
    let u = User::from_model(sample());
    u.save(&path).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    let leftovers: Vec<_> = std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(leftovers.iter().all(|n| !n.to_string_lossy().ends_with(".tmp")), "{leftovers:?}");
    let e = u.save(d.join("missing-dir/me.layu")).unwrap_err();
    assert!(matches!(e, UserFileError::Io { .. }), "{e}");
    std::fs::remove_dir_all(&d).unwrap();
}

/// Two writers (threads here; `flock` locks are per open file, so this is what two processes
/// see) save different histories over and over while a reader keeps opening the file: every
/// read is one of the two histories, whole.
#[test]
fn concurrent_writers_never_leave_a_torn_file() {
    let d = dir("race");
    let path = d.join("shared.layu");
    let a = User::from_model(sample());
    let b = {
        let mut u = UserModel::new();
        u.learn_words((0..500).map(|i| if i % 2 == 0 { "甲乙" } else { "丙丁" }));
        User::from_model(u)
    };
    a.save(&path).unwrap();
    let sizes = [a.read().len(), b.read().len()];
    std::thread::scope(|scope| {
        for u in [&a, &b] {
            let path = &path;
            scope.spawn(move || {
                for _ in 0..60 {
                    u.save(path).unwrap();
                }
            });
        }
        for _ in 0..200 {
            let bytes = std::fs::read(&path).unwrap();
            let u = UserModel::from_bytes(&bytes).expect("a whole file");
            assert!(sizes.contains(&u.len()));
        }
    });
    std::fs::remove_dir_all(&d).unwrap();
}
