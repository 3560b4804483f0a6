//! When and how a model makes its packed copies: the linear layers and the word head (the
//! packer thread, which a model's second prediction starts), a factorised head's classes (the
//! second time a prediction needs one), everything at once ([`Model::pack`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use laya_format::GgmlType;

use super::{Mat, Model, Packed, PackedRef, PACKER_ARMED, PACKER_NEVER, PACKER_ONE_SEEN, PACKER_STARTED};
use crate::classes::{ClassRows, WordClasses};
use crate::ngram::Ngram;

impl Model {
    /// Heap bytes of the packed copies of quantised layers made so far (0 where the CPU has no
    /// packed int8 kernels; a factorised head's classes count once packed, see
    /// [`Model::pack`]).
    pub fn packed_bytes(&self) -> usize {
        let l = self.layers.iter().flat_map(|l| [&l.q, &l.k, &l.v, &l.o, &l.up, &l.down]);
        let heads = self.classes.iter().map(|c| &c.head);
        let layers: usize = l.chain([&self.output]).chain(heads).filter_map(|m| m.packed.get()?.as_ref()).map(Packed::heap_bytes).sum();
        let rows = self.classes.iter().flat_map(|c| &c.rows).filter_map(|r| r.packed.get()?.as_deref()).map(Packed::heap_bytes);
        layers + rows.sum::<usize>()
    }

    /// How a prediction computes class `c` of a factorised head with int8 activations: its
    /// packed rows ([`PackedRef::Ready`]); the file's rows through the packed kernels'
    /// arithmetic ([`PackedRef::Pending`]: the first time a Q8_0 class is needed, so a cold
    /// start copies no class and a class needed once is never copied); or the row-major kernels
    /// ([`PackedRef::No`]: the CPU does not pack the head's type, a class of one word, a flat
    /// head). Packs the class the second time it is needed, allocating then only.
    pub(crate) fn class_packed(&self, c: usize) -> PackedRef<'_> {
        let Some((wc, rows)) = self.class_to_pack(c) else { return PackedRef::No };
        if rows.packed.get().is_none() && wc.row_type == GgmlType::Q8_0 && !rows.used.swap(true, Ordering::Relaxed) {
            return PackedRef::Pending;
        }
        self.pack_class(c).map_or(PackedRef::No, PackedRef::Ready)
    }

    /// The packed rows of class `c` (see [`Model::class_packed`]), packing them now if nothing
    /// has yet. Shapes and ids were checked at load, so packing cannot fail; if it did, the
    /// class would be computed from the file's rows in f32.
    fn pack_class(&self, c: usize) -> Option<&Packed> {
        let (wc, rows) = self.class_to_pack(c)?;
        let members = &wc.ids[wc.members(c)];
        rows.packed
            .get_or_init(|| Packed::gather(&self.matrix(&self.output), members, self.kernels).ok().flatten().map(Box::new))
            .as_deref()
    }

    /// Class `c` of a factorised head and its rows, where this CPU packs the head's type and
    /// the class has rows to pack (more than one word).
    fn class_to_pack(&self, c: usize) -> Option<(&WordClasses, &ClassRows)> {
        let wc = self.classes.as_ref()?;
        let rows = wc.rows.get(c)?;
        (wc.packs && wc.class_len(c) >= 2).then_some((wc, rows))
    }

    /// Makes every packed copy not made yet: the linear layers and the word head (which the
    /// packer thread a model's second prediction starts may be making meanwhile; this call
    /// waits for, or takes over, what it has not done) and every class of a factorised head
    /// (packed when a prediction needs it a second time); takes every word's log share the
    /// cutter has not looked up. Predictions give the same results before and after; after
    /// this call ([`Session::warm_up`](crate::Session::warm_up), `laya_session_new` and every
    /// engine swap make it) they run at full speed and none allocates.
    pub fn pack(&self) {
        let classes = self.classes.as_ref().map_or(0, WordClasses::len);
        // The classes (10 MB of copies for the default's 50,000-word head, most of this call)
        // are packed by a second thread, and by this one once it has made sure of the rest;
        // each takes the next class no one has taken.
        let next = AtomicUsize::new(0);
        let pack_classes = || loop {
            let c = next.fetch_add(1, Ordering::Relaxed);
            if c >= classes {
                break;
            }
            self.pack_class(c);
        };
        std::thread::scope(|scope| {
            let helper = match classes > 0 {
                true => std::thread::Builder::new().name("laya-pack-classes".into()).spawn_scoped(scope, pack_classes).ok(),
                false => None,
            };
            self.pack_layers();
            self.prepare_ngram();
            self.unigram.fill();
            pack_classes();
            // Packing only copies checked rows; were the helper to fail, the loop below packs
            // what it left.
            let _ = helper.map(|h| h.join());
        });
        for c in 0..classes {
            self.pack_class(c);
        }
    }

    /// Derives what the n-gram picks from its tables at every keystroke (its long lists' best
    /// followers), if the model has one; waits for the packer thread if it is doing so.
    pub(super) fn prepare_ngram(&self) {
        if let Some(n) = &self.ngram {
            n.prepare(self.storage.bytes(), &self.lexicon);
        }
    }

    /// Whether everything [`Model::pack`] makes at load has been made: [`Model::is_packed`]
    /// and the n-gram's derived lists.
    pub(super) fn is_prepared(&self) -> bool {
        self.is_packed() && self.ngram.as_ref().is_none_or(Ngram::is_prepared)
    }

    /// The first half of [`Model::pack`]: the linear layers and the word head, not the classes
    /// of a factorised head. Returns once every copy is made ([`Model::is_packed`]).
    pub fn pack_layers(&self) {
        for i in 0.. {
            if !self.pack_matrix(i) {
                break;
            }
        }
    }

    /// Whether every linear layer and the word head have their packed copy (or have none to
    /// make on this CPU).
    pub fn is_packed(&self) -> bool {
        self.packable().all(|m| !matches!(m.packed(), PackedRef::Pending))
    }

    /// The matrices a packer makes copies of, in the order a prediction reads them.
    fn packable(&self) -> impl Iterator<Item = &Mat> {
        let layers = self.layers.iter().flat_map(|l| [&l.q, &l.k, &l.v, &l.o, &l.up, &l.down]);
        layers.chain(self.classes.iter().map(|c| &c.head)).chain([&self.output]).filter(|m| m.packs)
    }

    /// Packs the `i`-th of [`Model::packable`]'s matrices if it is not packed; `false` once
    /// there is no `i`-th. Blocks while another thread packs the same matrix.
    fn pack_matrix(&self, i: usize) -> bool {
        let Some(m) = self.packable().nth(i) else { return false };
        // Shapes were checked at load, so packing cannot fail; if it did, the matrix would stay
        // on the row-major stand-in, which computes the same values.
        m.packed.get_or_init(|| Packed::of(&self.matrix(m), self.kernels).ok().flatten());
        true
    }

    /// Wraps a freshly loaded model in its `Arc`, armed to start the thread that packs its
    /// layers and then prepares its n-gram's lists (`laya-pack`) when a second prediction asks
    /// for it ([`Model::note_prediction`]), so that loading returns without the ~10 ms a
    /// 50,000-word flat head takes to pack, or the ~5 ms of scanning a 50,000-word trigram's
    /// long lists; predictions meanwhile compute the same values from the file's rows and lists.
    pub(super) fn start_packing(model: Model) -> Arc<Model> {
        let model = Arc::new(model);
        if !model.is_prepared() {
            model.packer.store(PACKER_ARMED, Ordering::Relaxed);
        }
        model
    }

    /// Called at each prediction of a session on this model. The first prediction starts
    /// nothing: a process that answers once (`laya predict`, a cold start) would pay for a
    /// thread and copies it never uses, on the core its answer needs. The second starts the
    /// packer thread (~40 µs here), unless [`Model::pack`] has made everything already. The
    /// thread holds only a weak reference between steps and stops when the model is dropped;
    /// where no thread can be started, this prediction packs everything itself.
    pub(crate) fn note_prediction(model: &Arc<Model>) {
        let state = &model.packer;
        match state.load(Ordering::Relaxed) {
            PACKER_NEVER | PACKER_STARTED => return,
            PACKER_ARMED if state.compare_exchange(PACKER_ARMED, PACKER_ONE_SEEN, Ordering::Relaxed, Ordering::Relaxed).is_ok() => return,
            _ => {}
        }
        if state.compare_exchange(PACKER_ONE_SEEN, PACKER_STARTED, Ordering::Relaxed, Ordering::Relaxed).is_err() || model.is_prepared() {
            return;
        }
        let weak = Arc::downgrade(model);
        let packer = std::thread::Builder::new().name("laya-pack".into()).spawn(move || {
            for i in 0.. {
                match weak.upgrade() {
                    Some(m) if m.pack_matrix(i) => {}
                    Some(m) => {
                        m.prepare_ngram();
                        return m.unigram.fill();
                    }
                    None => return,
                }
            }
        });
        if packer.is_err() {
            model.pack();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Session;
    use laya_format::quantize::QuantizeOptions;
    use laya_format::testing::{random_quantized_model, TinyConfig};
    use laya_kernels::Kernels;

    /// A model's packer thread starts with its second prediction, not at load or the first
    /// (a process that answers once pays for no thread and no copies), and then makes every
    /// copy; a model made whole by `pack` first never starts one.
    #[test]
    fn the_packer_starts_with_the_second_prediction() {
        if !Kernels::detect().packs_q8() {
            eprintln!("skipped: this CPU has no packed int8 kernels, so nothing is packed");
            return;
        }
        let cfg = TinyConfig { word_classes: 12, ..TinyConfig::default() };
        let (meta, tensors) = random_quantized_model(&cfg, 4, &QuantizeOptions::default());
        let bytes = laya_format::write_model(&meta, &tensors).unwrap();
        let model = Model::from_bytes(bytes.clone()).unwrap();
        assert_eq!(model.packer.load(Ordering::Relaxed), PACKER_ARMED);
        let mut s = Session::new(Arc::clone(&model));
        s.predict("今天", 5);
        assert_eq!(model.packer.load(Ordering::Relaxed), PACKER_ONE_SEEN);
        assert!(!model.is_packed(), "packed after one prediction");
        s.predict("今天天", 5);
        assert_eq!(model.packer.load(Ordering::Relaxed), PACKER_STARTED);
        let started = std::time::Instant::now();
        while !model.is_prepared() && started.elapsed() < std::time::Duration::from_secs(30) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(model.is_prepared(), "the packer did not finish");
        let whole = Model::from_bytes(bytes).unwrap();
        whole.pack();
        let mut s = Session::new(Arc::clone(&whole));
        for ctx in ["今天", "今天天", "今天天气"] {
            s.predict(ctx, 5);
        }
        assert!(whole.is_prepared() && Arc::strong_count(&whole) == 2 && Arc::weak_count(&whole) == 0, "a packer was started");
    }
}
