//! How Laya's tools choose the classes of a factorised word head (`laya.lexicon.word_class`,
//! docs/format.md §3 step 5).
//!
//! The file accepts any class map; this rule is what `laya train --word-classes` writes, and
//! it is chosen for the runtime's two uses of a class:
//!
//! * **Words that complete the typed characters stay in one class.** Every word that starts
//!   with a given character is in the same class, so the completions of the last `i` typed
//!   characters (one sorted-lexicon range) need one class's words, not the whole head.
//! * **Likely words sit in small classes.** A runtime ranks next words by expanding classes
//!   in order of `P(class)` until no unexpanded class can beat the k-th candidate; that stops
//!   early when the probability mass is spread evenly over the classes. First-character groups
//!   are taken by corpus frequency, most frequent first, and a class is closed once it holds
//!   `1/K` of the mass, so frequent groups get classes of their own. A size cap (twice the mean
//!   class size, or the group's own size when one group is larger) keeps the tail's classes
//!   from growing to thousands of rare words, each of which would be read whenever one of them
//!   is a completion.
//! * **Frequent words alone** ([`assign_word_classes_own`], `laya train --own-class-words`):
//!   a word alone in its class is scored by the class head exactly as a flat head would score
//!   it, and a runtime needs no row for it; the completions of a typed character are then its
//!   group's class plus those single words.

/// Assigns each word a class: first-character groups, by corpus frequency, binned to about
/// `target` classes of equal mass with a size cap (see the module docs). Returns one class per
/// word, numbered `0..K` with no class empty; `K` is near `target` (the cap can add classes,
/// and groups are never split, so a few large groups can leave fewer). Deterministic: ties
/// break on the first character.
///
/// ```
/// let words = ["的", "的确", "了", "了解", "是", "是否", "不"];
/// let freq = [100, 5, 80, 4, 60, 3, 50];
/// let c = laya_format::assign_word_classes(words.iter().copied(), &freq, 3);
/// assert_eq!(c[0], c[1]); // 的 and 的确 share their first character, so their class
/// assert_ne!(c[0], c[2]); // the two most frequent groups each fill a class
/// assert_eq!(c.iter().max(), Some(&2));
/// ```
pub fn assign_word_classes<'a>(words: impl IntoIterator<Item = &'a str>, frequencies: &[u32], target: usize) -> Vec<u32> {
    assign_word_classes_own(words, frequencies, target, 0)
}

/// [`assign_word_classes`], except that the `own` most frequent words (by corpus count, ties
/// to the lower id) each get a class of their own, numbered first, and the rest are grouped
/// and binned as there. A word alone in its class has `P(w) = P(class)`: the class head
/// scores it exactly as a flat head would, and the linear class head's approximation of a
/// class's mass (what a factorised head loses against a flat one) is left to the rarer words,
/// which seldom reach the bar. The completions of typed characters then span their group's
/// class and the own classes of its frequent words, each one row.
///
/// ```
/// let words = ["的", "的确", "了", "了解", "是", "是否", "不"];
/// let freq = [100, 5, 80, 4, 60, 3, 50];
/// let c = laya_format::assign_word_classes_own(words.iter().copied(), &freq, 2, 2);
/// assert_eq!((c[0], c[2]), (0, 1)); // 的 and 了, the two most frequent, alone
/// assert_ne!(c[1], c[0]); // 的确 is grouped with the rest
/// ```
pub fn assign_word_classes_own<'a>(words: impl IntoIterator<Item = &'a str>, frequencies: &[u32], target: usize, own: usize) -> Vec<u32> {
    let firsts: Vec<char> = words.into_iter().map(|w| w.chars().next().unwrap_or('\0')).collect();
    let n = firsts.len();
    if n == 0 {
        return Vec::new();
    }
    let count = |i: usize| frequencies.get(i).copied().unwrap_or(0);
    let own = own.min(n);
    let mut by_count: Vec<usize> = (0..n).collect();
    by_count.sort_by(|&a, &b| count(b).cmp(&count(a)).then(a.cmp(&b)));
    let mut class: Vec<Option<u32>> = vec![None; n];
    for (c, &i) in by_count.iter().take(own).enumerate() {
        class[i] = Some(c as u32);
    }
    if own == n {
        return class.into_iter().map(|c| c.unwrap_or(0)).collect();
    }
    let rest = n - own;
    let target = target.clamp(1, rest);
    // (first character, mass, words); `+1` so a word the corpus never saw still counts.
    let mut groups: std::collections::BTreeMap<char, (f64, usize)> = Default::default();
    for (i, &c) in firsts.iter().enumerate().filter(|&(i, _)| class[i].is_none()) {
        let g = groups.entry(c).or_insert((0.0, 0));
        g.0 += f64::from(count(i)) + 1.0;
        g.1 += 1;
    }
    let mut order: Vec<(char, f64, usize)> = groups.into_iter().map(|(c, (m, s))| (c, m, s)).collect();
    order.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let total: f64 = order.iter().map(|g| g.1).sum();
    let (quota, cap) = (total / target as f64, 2 * rest.div_ceil(target));
    let mut class_of: std::collections::HashMap<char, u32> = Default::default();
    let (mut next, mut mass, mut size) = (own as u32, 0.0f64, 0usize);
    for (c, m, s) in order {
        if size > 0 && (mass >= quota || size + s > cap) {
            next += 1;
            (mass, size) = (0.0, 0);
        }
        class_of.insert(c, next);
        mass += m;
        size += s;
    }
    firsts.iter().zip(class).map(|(c, own)| own.unwrap_or_else(|| class_of[c])).collect()
}

/// The words of each class, as a class map's inverse: class `c`'s word ids are
/// `words[offsets[c]..offsets[c + 1]]`, ascending. `classes` is `K`; a class with no word has an
/// empty range.
///
/// # Panics
/// If a class is `>= classes` (a validated file's map never is).
///
/// ```
/// let (offsets, words) = laya_format::class_members(&[1, 0, 1, 0], 3);
/// assert_eq!(offsets, [0, 2, 4, 4]);
/// assert_eq!(words, [1, 3, 0, 2]);
/// ```
pub fn class_members(class_of: &[u32], classes: usize) -> (Vec<usize>, Vec<u32>) {
    let mut offsets = vec![0usize; classes + 1];
    for &c in class_of {
        offsets[c as usize + 1] += 1;
    }
    for c in 0..classes {
        offsets[c + 1] += offsets[c];
    }
    let mut next = offsets.clone();
    let mut words = vec![0u32; class_of.len()];
    for (w, &c) in class_of.iter().enumerate() {
        words[next[c as usize]] = w as u32;
        next[c as usize] += 1;
    }
    (offsets, words)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_stay_whole_and_no_class_is_empty() {
        let words: Vec<String> = (0..2000u32).map(|i| format!("{}{}", char::from_u32(0x4E00 + i % 97).unwrap(), i)).collect();
        let freq: Vec<u32> = (0..2000u32).map(|i| 100_000 / (i + 1)).collect();
        let c = assign_word_classes(words.iter().map(String::as_str), &freq, 16);
        crate::check_word_class(&c, words.len()).unwrap();
        for (i, w) in words.iter().enumerate() {
            for (j, v) in words.iter().enumerate() {
                if w.chars().next() == v.chars().next() {
                    assert_eq!(c[i], c[j]);
                }
            }
        }
        let k = *c.iter().max().unwrap() as usize + 1;
        assert!((8..=40).contains(&k), "{k} classes for a target of 16");
        let cap = 2 * 2000usize.div_ceil(16);
        for class in 0..k as u32 {
            let size = c.iter().filter(|&&x| x == class).count();
            // A class over the cap is a single group (21 words per first character here).
            assert!(size <= cap.max(21), "class {class} has {size} words");
        }
    }

    #[test]
    fn frequent_words_get_their_own_classes() {
        let words: Vec<String> = (0..300u32).map(|i| format!("{}{i}", char::from_u32(0x4E00 + i % 11).unwrap())).collect();
        let freq: Vec<u32> = (0..300u32).map(|i| (i * 7919) % 1000).collect();
        let c = assign_word_classes_own(words.iter().map(String::as_str), &freq, 5, 20);
        crate::check_word_class(&c, words.len()).unwrap();
        let mut top: Vec<usize> = (0..300).collect();
        top.sort_by(|&a, &b| freq[b].cmp(&freq[a]).then(a.cmp(&b)));
        for (rank, &i) in top.iter().enumerate() {
            let alone = c.iter().filter(|&&x| x == c[i]).count() == 1;
            assert_eq!(rank < 20, alone && (c[i] as usize) == rank, "word {i} of rank {rank} in class {}", c[i]);
        }
        // Everything else still keeps its first-character group whole.
        for i in top[20..].iter().copied() {
            for j in top[20..].iter().copied() {
                if words[i].chars().next() == words[j].chars().next() {
                    assert_eq!(c[i], c[j]);
                }
            }
        }
        assert_eq!(assign_word_classes_own(["a", "b"], &[1, 2], 9, 5), vec![1, 0]);
    }

    #[test]
    fn degenerate_inputs() {
        assert!(assign_word_classes([], &[], 8).is_empty());
        assert_eq!(assign_word_classes(["a", "b"], &[1, 1], 0), vec![0, 0]);
        // Two groups of equal mass, two classes wanted: one each, the lower character first.
        assert_eq!(assign_word_classes(["b", ""], &[], 100), vec![1, 0]);
    }
}
