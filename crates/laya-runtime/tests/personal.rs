//! Learning from the person (SPEC.md "Personalisation", docs/evaluation.md §4) through the Rust API: what a
//! learned word does to the bar, forgetting, incognito, the blocklist, hot swap, and that
//! predictions still allocate nothing and cost about the same with a large history.

mod common;

use std::sync::Arc;

use laya_format::testing::TinyConfig;
use laya_format::GgmlType;
use laya_runtime::{Engine, Model, Session, User, UserModel};

/// The shipped default model: the contract is about real rankings.
fn default_model() -> Arc<Model> {
    Model::load(concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/default.laya")).expect("models/default.laya loads")
}

fn bar(s: &mut Session, ctx: &str) -> Vec<(String, usize)> {
    s.predict(ctx, 5).iter().map(|c| (c.word.to_string(), c.replace)).collect()
}

fn offered(s: &mut Session, ctx: &str, word: &str, replace: usize) -> bool {
    bar(s, ctx).iter().any(|(w, r)| w == word && *r == replace)
}

#[test]
fn a_word_learned_once_is_offered_after_its_first_character() {
    let mut s = Session::new(default_model());
    // A name the lexicon lacks, committed on its own (typed character by character).
    assert!(!offered(&mut s, "我在用拉", "拉雅", 1));
    assert_eq!(s.learn("拉雅"), 1);
    assert!(offered(&mut s, "我在用拉", "拉雅", 1), "{:?}", bar(&mut s, "我在用拉"));
    // A sentence: its words are cut by the lexicon and each is learned.
    assert_eq!(s.learn("今天我们讨论光标的默认位置"), 7);
    assert!(offered(&mut s, "光", "光标", 1), "{:?}", bar(&mut s, "光"));
    // Probabilities stay a distribution over the bar.
    let total: f32 = s.predict("光", 5).iter().map(|c| c.p).sum();
    assert!(total > 0.0 && total <= 1.0 + 1e-4, "{total}");
    // Forgetting takes it off.
    assert!(s.user().write().forget("拉雅"));
    assert!(!offered(&mut s, "我在用拉", "拉雅", 1));
}

#[test]
fn pairs_bring_back_the_word_that_followed() {
    let mut s = Session::new(default_model());
    // Once committed on its own, the new word is cut whole out of later sentences.
    s.learn("拉雅");
    let before = bar(&mut s, "我们讨论");
    for _ in 0..3 {
        s.learn("我们讨论拉雅的设计");
    }
    let after = bar(&mut s, "我们讨论");
    // Alone, the word's own count may give it the last slot; the pair puts it first.
    assert!(before[..4].iter().all(|c| c.0 != "拉雅"), "{before:?}");
    assert_eq!(after[0], ("拉雅".to_string(), 0), "{after:?}");
    // The network's own candidates keep the rest of the bar.
    assert!(after[1..].iter().any(|c| before.contains(c)), "{before:?} then {after:?}");
}

#[test]
fn incognito_learns_nothing_but_still_ranks_with_what_was_learned() {
    let mut s = Session::new(default_model());
    s.learn("拉雅");
    s.user().write().set_incognito(true);
    assert_eq!(s.learn("今天我们讨论光标的默认位置"), 0);
    assert_eq!(s.user().read().count("光标"), 0.0);
    assert!(offered(&mut s, "我在用拉", "拉雅", 1));
}

#[test]
fn a_blocked_word_is_never_offered() {
    let mut s = Session::new(default_model());
    let (first, replace) = bar(&mut s, "今天天气").remove(0);
    s.user().write().block(&first);
    assert!(!offered(&mut s, "今天天气", &first, replace));
    // Neither learned nor suggested from the history.
    s.user().write().block("拉雅");
    for _ in 0..5 {
        s.learn("拉雅");
    }
    assert!(!offered(&mut s, "我在用拉", "拉雅", 1));
    assert!(s.user().write().unblock(&first));
    assert!(offered(&mut s, "今天天气", &first, replace));
}

#[test]
fn sessions_sharing_a_user_learn_together_and_the_history_survives_a_swap() {
    let dir = std::env::temp_dir().join(format!("laya-personal-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (a, b) = (dir.join("a.laya"), dir.join("b.laya"));
    std::fs::write(&a, common::model_bytes(&TinyConfig::default(), 1, GgmlType::F32)).unwrap();
    std::fs::write(
        &b,
        common::model_bytes(&TinyConfig { vocab: TinyConfig::default().vocab + 7, ..TinyConfig::default() }, 2, GgmlType::F32),
    )
    .unwrap();
    let engine = Engine::open(&a).unwrap();
    let user = User::new();
    let mut one = engine.session();
    let mut two = engine.session();
    one.session().set_user(user.clone());
    two.session().set_user(user.clone());
    one.session().learn("hello world");
    assert!(two.session().user().read().count("world") > 0.99);
    engine.swap_to(&b).unwrap();
    two.predict("hel", 5); // a different shape: the session is rebuilt around the new model
    assert!(two.session().user().same(&user));
    assert!(two.session().user().read().count("hello") > 0.99);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `n` learned words of 1–4 Han characters with pairs between neighbours, spread like a
/// person's vocabulary (a few frequent, many rare).
fn big_history(n: usize) -> UserModel {
    let mut u = UserModel::with_settings(laya_runtime::DEFAULT_HALF_LIFE, n.max(1) * 2);
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let words: Vec<String> = (0..n)
        .map(|i| {
            let len = 1 + (next() % 4) as usize;
            // The first character from the 3,000 commonest ideographs' block, the rest unique.
            let mut w: String = char::from_u32(0x4E00 + (next() % 3000) as u32).unwrap().to_string();
            w.extend((1..len).map(|j| char::from_u32(0x4E00 + ((i * 7 + j * 13) % 20000) as u32).unwrap()));
            w
        })
        .collect();
    for (i, w) in words.iter().enumerate() {
        let follow = &words[(i * 31 + 7) % n];
        u.learn_words([w.as_str(), follow.as_str()]);
    }
    u
}

#[test]
fn predictions_with_a_large_history_allocate_nothing() {
    for m in [default_model(), common::model(&TinyConfig { word_classes: 12, ..TinyConfig::default() }, 3, GgmlType::Q8_0)] {
        let mut s = Session::new(m);
        s.set_user(User::from_model(big_history(10_000)));
        assert!(s.user().read().len() > 9_000, "{}", s.user().read().len());
        s.user().write().block("的");
        s.learn("今天我们讨论光标的默认位置");
        s.warm_up();
        let typed: Vec<String> = {
            let text = "今天我们讨论光标的默认位置，拉雅 hello wor";
            text.char_indices().map(|(i, c)| text[..i + c.len_utf8()].to_string()).collect()
        };
        for ctx in typed.iter().map(String::as_str).chain(common::CONTEXTS.iter().copied()) {
            s.predict(ctx, 5);
        }
        let info = allocation_counter::measure(|| {
            for ctx in typed.iter().map(String::as_str).chain(common::CONTEXTS.iter().copied()) {
                std::hint::black_box(s.predict(ctx, 5).len());
            }
        });
        assert_eq!(info.count_total, 0, "{} allocations", info.count_total);
    }
}

#[test]
fn learned_words_respect_the_bar_rules() {
    let mut s = Session::new(default_model());
    for _ in 0..20 {
        s.learn("拉雅 拉雅酱 2024 ，。");
    }
    for ctx in ["拉", "拉雅", "我在", "", "😀"] {
        for c in s.predict(ctx, 5).iter() {
            assert!(!laya_format::is_punctuation_word(c.word), "{ctx:?}: {}", c.word);
            assert!(c.word.chars().count() > c.replace, "{ctx:?}: {c:?}");
            let tail: String = ctx.chars().rev().take(c.replace).collect::<Vec<_>>().into_iter().rev().collect();
            assert!(c.word.starts_with(&tail), "{ctx:?}: {c:?}");
        }
        let p: Vec<f32> = s.predict(ctx, 5).iter().map(|c| c.p).collect();
        assert!(p.windows(2).all(|w| w[0] >= w[1]), "{ctx:?}: {p:?}");
    }
    // Numbers are never learned.
    assert_eq!(s.user().read().count("2024"), 0.0);
}
