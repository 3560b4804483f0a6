//! A factorised word head at run time (docs/format.md §3 step 5): the class head, and per class
//! its words, their biases and their rows of `output.weight`, gathered or packed.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::atomic::AtomicBool;
use std::sync::OnceLock;

use laya_format::{GgmlType, LayaFile};
use laya_kernels::{Kernels, Matrix};

use crate::error::LoadError;
use crate::model::{f32s, Mat, Packed};

/// The class head of a factorised word head and, per class, its words' rows of `output.weight`
/// gathered into one matrix, so that a session can compute one class's logits with one call.
pub(crate) struct WordClasses {
    /// `output_class.weight`, `[K, d]`.
    pub head: Mat,
    pub head_b: Vec<f32>,
    /// The word ids of class `c` are `ids[start[c]..start[c + 1]]` ([`WordClasses::members`]),
    /// increasing.
    start: Cow<'static, [u32]>,
    pub ids: Cow<'static, [u32]>,
    /// `output.bias` in `ids` order: class `c`'s biases are `bias[members(c)]`.
    pub bias: Cow<'static, [f32]>,
    /// The class of each word.
    pub class_of: Cow<'static, [u32]>,
    /// Per class: its rows of `output.weight` (same type) gathered, or their packed copy where
    /// the CPU packs the word head's type.
    pub rows: Vec<ClassRows>,
    /// `d`, the length of a row.
    cols: usize,
    /// Whether this CPU's kernels pack the word head's type: the class rows are then read from
    /// their packed copies ([`Model::class_packed`]), made when first needed again.
    pub packs: bool,
    /// The word head's type, which every class's rows share.
    pub row_type: GgmlType,
}

/// One class's rows (its type is the word head's, its shape its member count by `d`). Small,
/// because a load writes one per class (1,443 for the default).
pub(crate) struct ClassRows {
    /// The gathered rows where this CPU does not pack their type; otherwise empty, and a class
    /// of one word (whose row is never computed) has none either.
    pub data: Vec<u8>,
    /// The packed copy, made once: packing 50,000 rows at load was most of a cold start, so a
    /// class is packed when a prediction needs it a second time, or by [`Model::pack`]
    /// (`Session::warm_up`, an engine swap).
    pub(crate) packed: OnceLock<Option<Box<Packed>>>,
    /// Whether a prediction has computed this class from the file's rows (the first use of a
    /// Q8_0 class, [`Model::class_packed`]).
    pub(crate) used: AtomicBool,
}

/// What [`WordClasses::new`] derives from the class of each word and `output.bias` (the
/// members of each class and their biases in member order), as [`WordClasses::index`] lends it
/// and a prepared index ([`crate::prepared`]) gives it back.
pub(crate) struct ClassIndex<'a> {
    /// `K + 1` offsets into `ids`, from 0 to `V`.
    pub(crate) start: &'a [u32],
    /// The word ids, class by class.
    pub(crate) ids: &'a [u32],
    /// `output.bias` in `ids` order.
    pub(crate) bias: &'a [f32],
    /// The class of each word.
    pub(crate) class_of: &'a [u32],
}

impl WordClasses {
    /// `class_of` is the file's `laya.lexicon.word_class`, moved out of it; `out_b` the bytes of
    /// `output.bias`; `prepared`, the classes, members and biases [`WordClasses::index`] gave
    /// for the same model earlier (a prepared index; `class_of` is then unused, and empty where
    /// the file's copy was not decoded), else they are derived here. Prepared arrays are
    /// checked for what indexing relies on (shapes, offsets in order, ids and classes in
    /// range), never trusted to.
    pub(crate) fn new(
        file: &LayaFile,
        class_of: Vec<u32>,
        out_w: &Matrix,
        out_b: &[u8],
        head: Mat,
        kernels: Kernels,
        prepared: Option<ClassIndex<'static>>,
    ) -> Result<WordClasses, LoadError> {
        let Some((_, b)) = file.output_class.as_ref() else {
            return Err(LoadError::Kernel("output_class: a factorised head without its class map".into()));
        };
        let k = b.ne[0] as usize;
        let (start, ids, bias, class_of) = match prepared {
            Some(ix) => {
                let v = file.meta.words.len();
                let offsets_ok = ix.start.len() == k + 1 && ix.start.first() == Some(&0) && ix.start.windows(2).all(|w| w[0] <= w[1]);
                if !offsets_ok
                    || ix.start[k] as usize != v
                    || ix.ids.len() != v
                    || ix.bias.len() != v
                    // Maxima, not searches: they compile to vector code over the 50,000 words.
                    || ix.ids.iter().copied().max().is_some_and(|id| id as usize >= v)
                    || ix.class_of.len() != v
                    || ix.class_of.iter().copied().max().is_some_and(|c| c as usize >= k)
                {
                    return Err(LoadError::Prepared(format!("its class members do not fit {k} classes of {v} words")));
                }
                (Cow::Borrowed(ix.start), Cow::Borrowed(ix.ids), Cow::Borrowed(ix.bias), Cow::Borrowed(ix.class_of))
            }
            None => {
                // Validation checked that every class is below K, and the bias's shape.
                let (start, ids) = laya_format::class_members(&class_of, k);
                let bias = ids
                    .iter()
                    .map(|&id| {
                        let i = 4 * id as usize;
                        f32::from_le_bytes([out_b[i], out_b[i + 1], out_b[i + 2], out_b[i + 3]])
                    })
                    .collect();
                (Cow::Owned(start.iter().map(|&s| s as u32).collect()), Cow::Owned(ids), Cow::Owned(bias), Cow::Owned(class_of))
            }
        };
        let rb = out_w.row_bytes();
        let err = |e: laya_kernels::KernelError| LoadError::Kernel(format!("output.weight (one class's rows): {e}"));
        let packs = match out_w.ty {
            GgmlType::Q8_0 => kernels.packs_q8(),
            GgmlType::Q4_0 | GgmlType::Q4_1 => kernels.packs_q4(),
            _ => false,
        };
        let mut rows = Vec::with_capacity(k);
        for c in 0..k {
            let members = &ids[start[c] as usize..start[c + 1] as usize];
            // A word alone in its class has its class's probability: its row is never computed
            // (`rank::expand_class`, `forward::word_log_probs`), so it is neither packed nor copied.
            // Where the CPU packs the type, the int8 path reads the packed copy and the rare
            // f32-activation path the file's word head, so no gathered copy is kept either.
            let mut data = Vec::new();
            if members.len() > 1 && !packs {
                data.reserve_exact(members.len() * rb);
                for &id in members {
                    data.extend_from_slice(out_w.row(id as usize));
                }
                Matrix::new(out_w.ty, members.len(), out_w.cols, &data).map_err(err)?;
            }
            rows.push(ClassRows { data, packed: OnceLock::new(), used: AtomicBool::new(false) });
        }
        Ok(WordClasses { head_b: f32s(b), head, start, ids, bias, class_of, rows, cols: out_w.cols, packs, row_type: out_w.ty })
    }

    /// The members of class `c`, for a prepared index ([`crate::prepared`]).
    pub(crate) fn index(&self) -> ClassIndex<'_> {
        ClassIndex { start: &self.start, ids: &self.ids, bias: &self.bias, class_of: &self.class_of }
    }

    /// Where class `c`'s words are in `ids` (and their biases in `bias`).
    #[inline]
    pub(crate) fn members(&self, c: usize) -> Range<usize> {
        self.start[c] as usize..self.start[c + 1] as usize
    }

    /// The number of words of class `c`.
    #[inline]
    pub(crate) fn class_len(&self, c: usize) -> usize {
        (self.start[c + 1] - self.start[c]) as usize
    }

    /// Class `c`'s gathered rows (empty where they are packed instead, or where the class has
    /// one word).
    pub(crate) fn gathered(&self, c: usize) -> Matrix<'_> {
        Matrix { ty: self.row_type, rows: self.class_len(c), cols: self.cols, data: &self.rows[c].data }
    }

    /// `K`.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// The largest class's word count.
    pub fn max_class(&self) -> usize {
        self.start.windows(2).map(|w| (w[1] - w[0]) as usize).max().unwrap_or(0)
    }
}
