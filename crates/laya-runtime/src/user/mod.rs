//! What the engine learns from its user, on the device (docs/personalisation.md): the words the
//! user committed (outside the lexicon too) and which word followed which, with a forgetting
//! curve, a size cap, a blocklist, and an incognito switch. Ranking mixes this history with the
//! network's distribution ([`crate::Session`], "Learning" in docs/personalisation.md); the
//! history is kept apart from any model, so it survives a hot swap, and is stored in one user
//! file ([`User::open`], [`User::save`]).

mod file;
mod mix;

use std::collections::{BTreeSet, HashMap};
use std::hash::BuildHasherDefault;
use std::ops::Range;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

pub use file::{Opened, SetAside, UserFileError, USER_FILE_VERSION};
pub use mix::{mix_candidates, MixParams, DEFAULT_MIX};
pub(crate) use mix::{mix_into, MixScratch, USER_BIT};

type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<rustc_hash::FxHasher>>;

/// Half-life of a learned count, in words committed after it: a word typed once weighs 1/2
/// after the user committed 20,000 more words (a few weeks of everyday typing), 1/4 after 40,000.
pub const DEFAULT_HALF_LIFE: f64 = 20_000.0;

/// Words kept before the least used are evicted (each with at most [`FOLLOWERS`] followers).
pub const DEFAULT_CAPACITY: usize = 20_000;

/// Longest word learned, in characters; longer ones are not learned (they are rarely words).
pub const MAX_WORD_CHARS: usize = 16;

/// Longest blocked word, in UTF-8 bytes.
pub const MAX_BLOCKED_BYTES: usize = 1024;

/// Followers kept per word (the least used is dropped for a new one).
pub const FOLLOWERS: usize = 16;

/// The user's most used words kept ready as next-word candidates.
const TOP: usize = 8;

/// Decay exponents beyond which the stored weights are rescaled (2^256 is far inside f64).
const REBASE_AFTER: f64 = 256.0;

struct Entry {
    word: Box<str>,
    chars: u16,
    /// The count scaled to the clock `base`: its effective count now is `weight · decay()`.
    weight: f64,
    /// The words that followed this one, with their pair weights (same scale), at most
    /// [`FOLLOWERS`].
    followers: Vec<Follower>,
}

/// A word that followed another, with what ranking checks about it kept inline (its first
/// character and length), so that filtering followers by a typed prefix reads no other memory.
#[derive(Clone, Copy)]
struct Follower {
    slot: u32,
    first: u32,
    chars: u16,
    weight: f64,
}

impl Follower {
    fn new(slot: u32, word: &str, chars: usize, weight: f64) -> Follower {
        Follower { slot, first: word.chars().next().map_or(0, u32::from), chars: chars as u16, weight }
    }
}

/// The learned history: words and word pairs with decaying counts, and the blocklist.
///
/// ```
/// let mut u = laya_runtime::UserModel::new();
/// assert_eq!(u.learn_words(["今天", "我们", "讨论", "光标"]), 4);
/// assert!((u.count("光标") - 1.0).abs() < 1e-9); // forgetting starts with the next word
/// assert!(u.forget("光标"));
/// assert_eq!(u.count("光标"), 0.0);
/// u.block("讨论");
/// assert_eq!(u.learn_words(["讨论"]), 0); // blocked words are neither learned nor suggested
/// ```
pub struct UserModel {
    /// Slots; a forgotten or evicted word leaves `None` until a new word takes the slot.
    entries: Vec<Option<Entry>>,
    free: Vec<u32>,
    by_word: FxMap<Box<str>, u32>,
    /// Live slots in byte order of their words: a typed prefix is one range.
    sorted: Vec<u32>,
    /// The first character of each word of `sorted`: a prefix search narrows by integers
    /// before it compares strings (the per-keystroke path).
    first: Vec<u32>,
    /// The weights of `sorted`'s words in its order: the evidence of a typed prefix and its
    /// candidates are read from contiguous memory. Kept in step with every change.
    sorted_w: Vec<f64>,
    /// Per last character of a learned word: a bit per length (in characters) of the words
    /// that end with it, so that finding the word before the cursor probes only those.
    ends: FxMap<u32, u32>,
    /// Up to [`TOP`] live slots, largest weight first.
    top: Vec<u32>,
    blocked: BTreeSet<String>,
    /// Words learned so far: the forgetting curve's clock.
    clock: u64,
    /// The clock value the weights are scaled to.
    base: u64,
    /// Σ weight over live words (scale `base`).
    mass: f64,
    half_life: f64,
    capacity: usize,
    incognito: bool,
    /// Bumped by every change of the blocklist, so sessions rebuild their blocked-word marks.
    block_generation: u64,
}

impl Default for UserModel {
    fn default() -> Self {
        UserModel::new()
    }
}

impl std::fmt::Debug for UserModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserModel")
            .field("words", &self.len())
            .field("pairs", &self.pairs())
            .field("blocked", &self.blocked.len())
            .field("clock", &self.clock)
            .finish()
    }
}

/// Why a word is not learned: punctuation, digits (numbers, codes and card numbers are not
/// kept), whitespace, too long, or blocked.
fn learnable(word: &str, chars: usize) -> bool {
    chars > 0
        && chars <= MAX_WORD_CHARS
        && !laya_format::is_punctuation_word(word)
        && !word.chars().any(|c| c.is_numeric() || c.is_whitespace() || c.is_control())
}

impl UserModel {
    /// An empty history with [`DEFAULT_HALF_LIFE`] and [`DEFAULT_CAPACITY`].
    pub fn new() -> UserModel {
        UserModel::with_settings(DEFAULT_HALF_LIFE, DEFAULT_CAPACITY)
    }

    /// An empty history with the given half-life (in committed words, at least 1) and capacity
    /// (in words, at least 1).
    pub fn with_settings(half_life: f64, capacity: usize) -> UserModel {
        UserModel {
            entries: Vec::new(),
            free: Vec::new(),
            by_word: FxMap::default(),
            sorted: Vec::new(),
            first: Vec::new(),
            sorted_w: Vec::new(),
            ends: FxMap::default(),
            top: Vec::new(),
            blocked: BTreeSet::new(),
            clock: 0,
            base: 0,
            mass: 0.0,
            half_life: if half_life.is_finite() { half_life.max(1.0) } else { DEFAULT_HALF_LIFE },
            capacity: capacity.max(1),
            incognito: false,
            block_generation: 0,
        }
    }

    /// The half-life of a count, in committed words.
    pub fn half_life(&self) -> f64 {
        self.half_life
    }

    /// The most words kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Words learned since the history began (the forgetting curve's clock).
    pub fn clock(&self) -> u64 {
        self.clock
    }

    /// Number of words in the history.
    pub fn len(&self) -> usize {
        self.by_word.len()
    }

    /// True when nothing is learned.
    pub fn is_empty(&self) -> bool {
        self.by_word.is_empty()
    }

    /// Number of word pairs in the history.
    pub fn pairs(&self) -> usize {
        self.live().map(|(_, e)| e.followers.len()).sum()
    }

    /// Incognito: [`UserModel::learn_words`] learns nothing (predictions still use what was
    /// learned before).
    pub fn set_incognito(&mut self, on: bool) {
        self.incognito = on;
    }

    /// Whether learning is off (see [`UserModel::set_incognito`]).
    pub fn incognito(&self) -> bool {
        self.incognito
    }

    /// The factor every stored weight is multiplied by to give today's counts.
    #[inline]
    fn decay(&self) -> f64 {
        (-((self.clock - self.base) as f64) / self.half_life).exp2()
    }

    fn live(&self) -> impl Iterator<Item = (u32, &Entry)> {
        self.entries.iter().enumerate().filter_map(|(s, e)| e.as_ref().map(|e| (s as u32, e)))
    }

    #[inline]
    fn entry(&self, slot: u32) -> &Entry {
        self.entries[slot as usize].as_ref().expect("a slot in an index is live")
    }

    /// The slot of `word`, if learned.
    #[inline]
    pub(crate) fn slot(&self, word: &str) -> Option<u32> {
        self.by_word.get(word).copied()
    }

    /// Today's count of `word` (after forgetting); 0 when not learned.
    pub fn count(&self, word: &str) -> f64 {
        self.slot(word).map_or(0.0, |s| self.entry(s).weight * self.decay())
    }

    /// Today's count of the pair `first second`; 0 when not learned.
    pub fn pair_count(&self, first: &str, second: &str) -> f64 {
        let (Some(a), Some(b)) = (self.slot(first), self.slot(second)) else { return 0.0 };
        self.entry(a).followers.iter().find(|f| f.slot == b).map_or(0.0, |f| f.weight * self.decay())
    }

    /// Every learned word with today's count, most used first.
    pub fn words(&self) -> Vec<(String, f64)> {
        let d = self.decay();
        let mut v: Vec<(String, f64)> = self.live().map(|(_, e)| (e.word.to_string(), e.weight * d)).collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v
    }

    /// Every learned pair `(first, second, count)`, most used first.
    pub fn pair_list(&self) -> Vec<(String, String, f64)> {
        let d = self.decay();
        let mut v: Vec<(String, String, f64)> = self
            .live()
            .flat_map(|(_, e)| e.followers.iter().map(move |f| (e.word.to_string(), self.entry(f.slot).word.to_string(), f.weight * d)))
            .collect();
        v.sort_by(|a, b| b.2.total_cmp(&a.2).then_with(|| (&a.0, &a.1).cmp(&(&b.0, &b.1))));
        v
    }

    /// Learns a sequence of committed words, in order: each word's count and each pair of
    /// neighbours. Punctuation, words with digits or whitespace, words longer than
    /// [`MAX_WORD_CHARS`] and blocked words are skipped, and no pair spans them. Returns the
    /// number of words counted (0 in incognito).
    pub fn learn_words<'a>(&mut self, words: impl IntoIterator<Item = &'a str>) -> usize {
        if self.incognito {
            return 0;
        }
        let mut prev: Option<u32> = None;
        let mut n = 0;
        for w in words {
            let chars = w.chars().count();
            if !learnable(w, chars) || self.blocked.contains(w) {
                prev = None;
                continue;
            }
            // The clock moves first, so a word just learned counts 1 today.
            self.clock += 1;
            let inc = ((self.clock - self.base) as f64 / self.half_life).exp2();
            let slot = self.add(w, chars, inc);
            if let Some(p) = prev {
                self.add_pair(p, Follower::new(slot, w, chars, inc));
            }
            prev = Some(slot);
            n += 1;
            if (self.clock - self.base) as f64 / self.half_life > REBASE_AFTER {
                self.rebase();
            }
        }
        if self.len() > self.capacity {
            self.evict();
        }
        n
    }

    /// Rebuilds `sorted_w` from the weights.
    fn resum(&mut self) {
        let mut w = std::mem::take(&mut self.sorted_w);
        w.clear();
        w.extend(self.sorted.iter().map(|&s| self.entry(s).weight));
        self.sorted_w = w;
    }

    /// Where `w`, a learned word, is in `sorted`.
    fn position(&self, w: &str) -> usize {
        let r = self.prefix_range(w);
        r.start + self.sorted[r].partition_point(|&o| self.entry(o).word.as_bytes() < w.as_bytes())
    }

    fn add(&mut self, w: &str, chars: usize, inc: f64) -> u32 {
        let slot = match self.slot(w) {
            Some(s) => {
                self.entries[s as usize].as_mut().expect("live").weight += inc;
                let at = self.position(w);
                self.sorted_w[at] += inc;
                s
            }
            None => {
                let e = Entry { word: w.into(), chars: chars as u16, weight: inc, followers: Vec::new() };
                let s = match self.free.pop() {
                    Some(s) => {
                        self.entries[s as usize] = Some(e);
                        s
                    }
                    None => {
                        self.entries.push(Some(e));
                        (self.entries.len() - 1) as u32
                    }
                };
                self.by_word.insert(w.into(), s);
                let at = self.sorted.partition_point(|&o| self.entry(o).word.as_bytes() < w.as_bytes());
                self.sorted.insert(at, s);
                self.sorted_w.insert(at, inc);
                self.first.insert(at, w.chars().next().map_or(0, u32::from));
                *self.ends.entry(w.chars().next_back().map_or(0, u32::from)).or_insert(0) |= 1 << chars;
                s
            }
        };
        self.mass += inc;
        self.raise_top(slot);
        slot
    }

    fn add_pair(&mut self, prev: u32, next: Follower) {
        let e = self.entries[prev as usize].as_mut().expect("live");
        match e.followers.iter_mut().find(|f| f.slot == next.slot) {
            Some(f) => f.weight += next.weight,
            None => {
                if e.followers.len() == FOLLOWERS {
                    let (at, _) = e.followers.iter().enumerate().min_by(|a, b| a.1.weight.total_cmp(&b.1.weight)).expect("full");
                    e.followers.swap_remove(at);
                }
                e.followers.push(next);
            }
        }
    }

    /// Keeps `top` the largest weights, largest first, after `slot`'s weight grew.
    fn raise_top(&mut self, slot: u32) {
        if let Some(at) = self.top.iter().position(|&s| s == slot) {
            self.top.remove(at);
        } else if self.top.len() == TOP {
            let last = *self.top.last().expect("full");
            if self.entry(last).weight >= self.entry(slot).weight {
                return;
            }
            self.top.pop();
        }
        let w = self.entry(slot).weight;
        let at = self.top.partition_point(|&s| self.entry(s).weight >= w);
        self.top.insert(at, slot);
    }

    /// Rebuilds what is derived from `sorted` and the words: `first`, `ends` and `top`.
    fn reindex(&mut self) {
        let first: Vec<u32> = self.sorted.iter().map(|&s| self.entry(s).word.chars().next().map_or(0, u32::from)).collect();
        self.first = first;
        let mut ends = FxMap::default();
        for (_, e) in self.live() {
            *ends.entry(e.word.chars().next_back().map_or(0, u32::from)).or_insert(0) |= 1 << e.chars;
        }
        self.ends = ends;
        self.rebuild_top();
        self.resum();
    }

    fn rebuild_top(&mut self) {
        let mut all: Vec<(f64, u32)> = self.live().map(|(s, e)| (e.weight, s)).collect();
        all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        self.top = all.into_iter().take(TOP).map(|(_, s)| s).collect();
    }

    /// Rescales every weight to the current clock, so they stay far from overflow.
    fn rebase(&mut self) {
        let d = self.decay();
        for e in self.entries.iter_mut().flatten() {
            e.weight *= d;
            for f in &mut e.followers {
                f.weight *= d;
            }
        }
        self.mass *= d;
        self.base = self.clock;
        self.resum();
    }

    /// Drops the least used words until a tenth of the capacity is free.
    fn evict(&mut self) {
        let keep = self.capacity - self.capacity / 10;
        let mut all: Vec<(f64, u32)> = self.live().map(|(s, e)| (e.weight, s)).collect();
        all.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)));
        let drop = all.len().saturating_sub(keep);
        let gone: Vec<u32> = all[..drop].iter().map(|&(_, s)| s).collect();
        self.remove_slots(&gone);
    }

    fn remove_slots(&mut self, gone: &[u32]) {
        if gone.is_empty() {
            return;
        }
        let mut dead = vec![false; self.entries.len()];
        for &s in gone {
            dead[s as usize] = true;
            if let Some(e) = self.entries[s as usize].take() {
                self.by_word.remove(&e.word);
                self.mass -= e.weight;
                self.free.push(s);
            }
        }
        self.sorted.retain(|&s| !dead[s as usize]);
        for e in self.entries.iter_mut().flatten() {
            e.followers.retain(|f| !dead[f.slot as usize]);
        }
        self.reindex();
        if self.by_word.is_empty() {
            self.mass = 0.0;
        }
    }

    /// Forgets `word`: its count and every pair it is in. False when it was not learned.
    pub fn forget(&mut self, word: &str) -> bool {
        match self.slot(word) {
            Some(s) => {
                self.remove_slots(&[s]);
                true
            }
            None => false,
        }
    }

    /// Forgets everything learned (the blocklist and settings stay).
    pub fn clear(&mut self) {
        let (half_life, capacity, blocked, incognito, gen) =
            (self.half_life, self.capacity, std::mem::take(&mut self.blocked), self.incognito, self.block_generation);
        *self = UserModel::with_settings(half_life, capacity);
        self.blocked = blocked;
        self.incognito = incognito;
        self.block_generation = gen;
    }

    /// Never suggests `word` again, whatever the network or the history says, and forgets its
    /// history. Returns false when it was already blocked, or is empty or longer than
    /// [`MAX_BLOCKED_BYTES`] (no word is).
    pub fn block(&mut self, word: &str) -> bool {
        if word.is_empty() || word.len() > MAX_BLOCKED_BYTES {
            return false;
        }
        self.forget(word);
        let new = self.blocked.insert(word.to_string());
        self.block_generation += u64::from(new);
        new
    }

    /// Lifts a block. False when `word` was not blocked.
    pub fn unblock(&mut self, word: &str) -> bool {
        let had = self.blocked.remove(word);
        self.block_generation += u64::from(had);
        had
    }

    /// True when `word` is blocked.
    pub fn is_blocked(&self, word: &str) -> bool {
        self.blocked.contains(word)
    }

    /// The blocked words, in byte order.
    pub fn blocklist(&self) -> impl Iterator<Item = &str> {
        self.blocked.iter().map(String::as_str)
    }

    pub(crate) fn block_generation(&self) -> u64 {
        self.block_generation
    }

    /// Positions in `sorted` of the words starting with `prefix`.
    fn prefix_range(&self, prefix: &str) -> Range<usize> {
        let Some(c) = prefix.chars().next().map(u32::from) else { return 0..self.sorted.len() };
        // The words starting with the first character, found by integer search.
        let a = self.first.partition_point(|&f| f < c);
        let b = a + self.first[a..].partition_point(|&f| f == c);
        let (p, run) = (prefix.as_bytes(), &self.sorted[a..b]);
        let lo = run.partition_point(|&s| self.entry(s).word.as_bytes() < p);
        let n = run[lo..].partition_point(|&s| self.entry(s).word.as_bytes().starts_with(p));
        a + lo..a + lo + n
    }

    /// The length bits of the learned words that end with `c`.
    #[inline]
    fn lengths_ending_with(&self, c: char) -> u32 {
        self.ends.get(&u32::from(c)).copied().unwrap_or(0)
    }
}

/// A shared handle to one [`UserModel`]: cheap to clone, `Send + Sync`. Give it to every
/// [`crate::Session`] that types for the same person ([`crate::Session::set_user`]); learning
/// through any of them takes effect for all at their next prediction.
///
/// ```
/// let user = laya_runtime::User::new();
/// user.write().learn_words(["光标"]);
/// let other = user.clone();
/// assert!(other.read().count("光标") > 0.99);
/// ```
#[derive(Clone, Default)]
pub struct User(Arc<RwLock<UserModel>>);

impl std::fmt::Debug for User {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.read().fmt(f)
    }
}

impl User {
    /// An empty in-memory history (see [`User::open`] for one kept in a file).
    pub fn new() -> User {
        User::default()
    }

    /// Wraps a history.
    pub fn from_model(model: UserModel) -> User {
        User(Arc::new(RwLock::new(model)))
    }

    /// Reads the history. A panic in another thread while it held the lock does not poison it:
    /// every change leaves the model consistent before it returns.
    pub fn read(&self) -> RwLockReadGuard<'_, UserModel> {
        self.0.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Changes the history (learn, forget, block, …).
    pub fn write(&self) -> RwLockWriteGuard<'_, UserModel> {
        self.0.write().unwrap_or_else(|p| p.into_inner())
    }

    /// True when both handles share one history.
    pub fn same(&self, other: &User) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_decay_by_half_life() {
        let mut u = UserModel::with_settings(4.0, 100);
        u.learn_words(["甲"]);
        u.learn_words(["乙", "乙", "乙", "乙"]);
        // 甲 was followed by 4 words: one half-life.
        assert!((u.count("甲") - 0.5).abs() < 1e-12);
        // 乙's four counts have aged 3, 2, 1 and 0 words.
        let want: f64 = (0..4).map(|a| (-(a as f64) / 4.0).exp2()).sum();
        assert!((u.count("乙") - want).abs() < 1e-12);
        // Rebasing changes the scale, not the counts.
        let (a, b) = (u.count("甲"), u.count("乙"));
        u.rebase();
        assert!((u.count("甲") - a).abs() < 1e-12 && (u.count("乙") - b).abs() < 1e-12);
    }

    #[test]
    fn pairs_skip_what_is_not_learned() {
        let mut u = UserModel::new();
        assert_eq!(u.learn_words(["我们", "，", "讨论", "2024", "光标", "的"]), 4);
        assert_eq!(u.pair_count("我们", "讨论"), 0.0);
        assert_eq!(u.pair_count("光标", "的"), 1.0);
        assert_eq!(u.count("，") + u.count("2024"), 0.0);
        assert_eq!(u.learn_words(["a".repeat(MAX_WORD_CHARS + 1).as_str()]), 0);
    }

    #[test]
    fn capacity_evicts_the_least_used() {
        let mut u = UserModel::with_settings(1e9, 100);
        for _ in 0..5 {
            u.learn_words(["常用"]);
        }
        let words: Vec<String> = (0..300).map(|i| format!("w{}", char::from_u32(0x4E00 + i).unwrap())).collect();
        for pair in words.chunks(2) {
            u.learn_words(pair.iter().map(String::as_str));
        }
        assert!(u.len() <= 100, "{}", u.len());
        assert!((u.count("常用") - 5.0).abs() < 1e-4);
        // No pair points at an evicted word, and the index matches the slots.
        for (_, e) in u.live() {
            for f in &e.followers {
                let target = u.entries[f.slot as usize].as_ref().expect("a live follower");
                assert_eq!((f.first, f.chars), (target.word.chars().next().unwrap() as u32, target.chars));
            }
        }
        assert_eq!(u.sorted.len(), u.len());
        let mass: f64 = u.live().map(|(_, e)| e.weight).sum();
        assert!((mass - u.mass).abs() < 1e-6);
    }

    #[test]
    fn forget_clear_block() {
        let mut u = UserModel::new();
        u.learn_words(["今天", "光标", "默认"]);
        assert!(u.forget("光标"));
        assert!(!u.forget("光标"));
        assert_eq!(u.pair_count("今天", "光标"), 0.0);
        assert_eq!(u.prefix_range("光").len(), 0);
        assert!(u.block("默认"));
        assert!(!u.block("默认"));
        assert_eq!(u.count("默认"), 0.0);
        u.clear();
        assert!(u.is_empty() && u.is_blocked("默认"));
        u.set_incognito(true);
        assert_eq!(u.learn_words(["今天"]), 0);
        assert!(u.is_empty());
    }

    /// Every index derived from the words agrees with them after any mix of operations.
    #[test]
    fn derived_indexes_stay_in_step() {
        let pool = ["今天", "今", "我们", "光标", "光", "光标位置", "hello", "help", "😀", "拉雅", "的", "默认"];
        let mut u = UserModel::with_settings(3.0, 7);
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        for step in 0..3000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let (a, b) = (pool[(state % 12) as usize], pool[((state >> 8) % 12) as usize]);
            match (state >> 16) % 8 {
                0 => drop(u.forget(a)),
                1 => drop(u.block(a)),
                2 => drop(u.unblock(a)),
                3 if step % 500 == 0 => u.clear(),
                _ => drop(u.learn_words([a, b])),
            }
            let want: Vec<&str> = {
                let mut w: Vec<&str> = u.live().map(|(_, e)| &*e.word).collect();
                w.sort();
                w
            };
            let got: Vec<&str> = u.sorted.iter().map(|&s| &*u.entry(s).word).collect();
            assert_eq!(got, want);
            for (j, &s) in u.sorted.iter().enumerate() {
                let e = u.entry(s);
                assert!((u.sorted_w[j] - e.weight).abs() <= 1e-9 * e.weight.max(1.0), "step {step}");
                assert_eq!(u.first[j], e.word.chars().next().unwrap() as u32);
                assert_ne!(u.lengths_ending_with(e.word.chars().last().unwrap()) & (1 << e.chars), 0);
                for f in &e.followers {
                    let t = u.entry(f.slot);
                    assert_eq!((f.first, f.chars), (t.word.chars().next().unwrap() as u32, t.chars), "step {step}");
                }
            }
            let mass: f64 = u.live().map(|(_, e)| e.weight).sum();
            assert!((mass - u.mass).abs() <= 1e-6 * mass.max(1.0), "step {step}");
        }
    }

    #[test]
    fn top_words_and_prefix_ranges() {
        let mut u = UserModel::new();
        u.learn_words(["光标", "光", "光标位置", "默认", "光标"]);
        let words: Vec<&str> = u.prefix_range("光标").map(|p| &*u.entry(u.sorted[p]).word).collect();
        assert_eq!(words, ["光标", "光标位置"]);
        assert_eq!(&*u.entry(u.top[0]).word, "光标");
        assert_eq!(u.lengths_ending_with('标'), 1 << 2);
        assert_eq!(u.lengths_ending_with('置'), 1 << 4);
        assert_eq!(u.lengths_ending_with('光'), 1 << 1);
        assert_eq!(u.lengths_ending_with('x'), 0);
    }
}
