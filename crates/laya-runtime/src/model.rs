//! A loaded, validated, immutable model: the file's bytes plus everything the forward pass
//! needs to find in them. Shared between threads behind an `Arc`.

use std::borrow::Cow;
use std::fs::File;
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::AtomicU8;
use std::sync::{Arc, OnceLock};

use laya_format::{Activation, GgmlType, LayaFile, Mapping, NormRule, PositionScheme, TensorRef};
use laya_kernels::{Kernels, Level, Matrix, PackedQ4, PackedQ8};

use crate::classes::WordClasses;
use crate::error::LoadError;
use crate::lexicon::Lexicon;
use crate::ngram::Ngram;
use crate::prepared;
use crate::storage::Storage;
use crate::unigram::WordLogp;

mod packing;

/// Hyper-parameters of a loaded model, as the forward pass uses them.
#[derive(Debug, Clone)]
pub struct Config {
    /// Context length `T` in Unicode scalar values.
    pub context_length: usize,
    /// Model width `d`.
    pub d_model: usize,
    /// Attention heads.
    pub heads: usize,
    /// FFN width of each block (pruned blocks differ).
    pub ffn: Vec<usize>,
    /// LayerNorm epsilon.
    pub eps: f32,
    /// FFN activation.
    pub activation: Activation,
    /// Rows of the embedding table.
    pub embedding_rows: u32,
    /// How a codepoint picks its embedding row.
    pub mapping: Mapping,
    /// Lexicon size `V`.
    pub vocab: usize,
    /// Replace classes `C`.
    pub replace_classes: usize,
    /// Normalisation rules applied to the context.
    pub normalization: Vec<NormRule>,
    /// Learned absolute positions over a window of `T`, or the causal window whose keys and
    /// values a session keeps between keystrokes (docs/format.md §3).
    pub position_scheme: PositionScheme,
    /// Tokens that can reach the output (`T` or `L·(T−1)+1`).
    pub receptive_field: usize,
    /// Classes `K` of a factorised word head (docs/format.md §3 step 5); 0 for a flat head.
    pub word_classes: usize,
    /// Words in the largest class (0 for a flat head).
    pub largest_class: usize,
    /// The model's language separates words with spaces ([`laya_format::separates_words`]):
    /// a context ending inside a word then gets completions only, next words after a space.
    pub spaced_words: bool,
    /// The output memory (docs/format.md §3 step 4), `relative_causal` models only.
    pub memory: Option<laya_format::memory::Memory>,
}

/// Descriptive facts about a model file, for `laya inspect` and logs.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    /// `general.name`.
    pub name: String,
    /// `laya.provenance.language`.
    pub language: String,
    /// `laya.provenance.training_data`.
    pub training_data: String,
    /// `laya.provenance.created`.
    pub created: String,
    /// The verified content checksum.
    pub checksum: u64,
    /// File size in bytes.
    pub file_len: usize,
    /// `mmap`, `heap` or `embedded`.
    pub storage: &'static str,
    /// Lexicon words with a dictionary frequency (`laya.lexicon.dict_frequencies`); 0 when
    /// the file has none, and then completions are ranked by the network alone.
    pub dict_words: usize,
    /// How long this load took, by phase (for `laya bench`'s cold start).
    pub load_time: LoadTime,
}

/// The two phases of a load, as they ran in this process.
#[derive(Debug, Clone, Copy, Default)]
pub struct LoadTime {
    /// Parsing and validating the file: every check of `laya-format`, the checksum included.
    pub validate: std::time::Duration,
    /// Building what predictions read from the validated file: the lexicon's index, the packed
    /// int8 copies of the linear layers, the word classes.
    pub prepare: std::time::Duration,
}

#[derive(Debug, Clone)]
pub(crate) struct Mat {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub range: Range<usize>,
    /// Whether this CPU multiplies the matrix with the packed int8 kernels: a quantised linear
    /// layer where `Kernels::packs_q8` / `packs_q4` (x86 with AVX2).
    pub packs: bool,
    /// The packed copy once made (Q4 layers at load, Q8_0 ones by the model's packer thread,
    /// which a second prediction starts, or [`Model::pack`]); `Some(None)` if packing failed,
    /// which leaves the layer on [`PackedRef::Pending`]'s kernel for good.
    pub packed: OnceLock<Option<Packed>>,
}

impl Mat {
    /// What the int8 path multiplies this matrix with now.
    pub fn packed(&self) -> PackedRef<'_> {
        match (self.packs, self.packed.get()) {
            (false, _) => PackedRef::No,
            (true, Some(Some(p))) => PackedRef::Ready(p),
            // Only Q8_0 has a row-major stand-in; Q4 layers are packed at load.
            (true, _) if self.ty == GgmlType::Q8_0 => PackedRef::Pending,
            (true, _) => PackedRef::No,
        }
    }
}

/// The state of a matrix's packed copy, as the forward pass sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum PackedRef<'a> {
    /// This CPU has no packed kernels for the type: the row-major kernels.
    No,
    /// Packed kernels apply, the copy is not made yet: `Kernels::matmul_q8_packed_rows`, the
    /// packed kernels' arithmetic on the file's rows, so the results do not change when it is.
    Pending,
    /// The packed copy.
    Ready(&'a Packed),
}

/// The packed copy of a linear layer (see `Mat::packed`).
#[derive(Debug, Clone)]
pub(crate) enum Packed {
    Q8(PackedQ8),
    Q4(PackedQ4),
}

impl Packed {
    /// Whether this CPU's kernels pack matrices of type `ty`.
    fn packs(ty: GgmlType, kernels: Kernels) -> bool {
        match ty {
            GgmlType::Q8_0 => kernels.packs_q8(),
            GgmlType::Q4_0 | GgmlType::Q4_1 => kernels.packs_q4(),
            _ => false,
        }
    }

    /// The packed copy of a quantised matrix where this CPU has kernels for it (Q8_0, and Q4_0
    /// or Q4_1, on x86 with AVX2); `None` for other types and CPUs.
    fn of(w: &Matrix, kernels: Kernels) -> Result<Option<Packed>, laya_kernels::KernelError> {
        Ok(match w.ty {
            GgmlType::Q8_0 if kernels.packs_q8() => Some(Packed::Q8(PackedQ8::new(w)?)),
            GgmlType::Q4_0 | GgmlType::Q4_1 if kernels.packs_q4() => Some(Packed::Q4(PackedQ4::new(w)?)),
            _ => None,
        })
    }

    /// [`Packed::of`] for rows `ids` of `w` (one class of a factorised head).
    fn gather(w: &Matrix, ids: &[u32], kernels: Kernels) -> Result<Option<Packed>, laya_kernels::KernelError> {
        Ok(match w.ty {
            GgmlType::Q8_0 if kernels.packs_q8() => Some(Packed::Q8(PackedQ8::gather(w, ids)?)),
            GgmlType::Q4_0 | GgmlType::Q4_1 if kernels.packs_q4() => Some(Packed::Q4(PackedQ4::gather(w, ids)?)),
            _ => None,
        })
    }

    fn heap_bytes(&self) -> usize {
        match self {
            Packed::Q8(p) => p.heap_bytes(),
            Packed::Q4(p) => p.heap_bytes(),
        }
    }
}

pub(crate) struct Layer {
    pub attn_norm_w: Vec<f32>,
    pub attn_norm_b: Vec<f32>,
    pub q: Mat,
    pub q_b: Vec<f32>,
    pub k: Mat,
    pub k_b: Vec<f32>,
    pub v: Mat,
    pub v_b: Vec<f32>,
    pub o: Mat,
    pub o_b: Vec<f32>,
    pub ffn_norm_w: Vec<f32>,
    pub ffn_norm_b: Vec<f32>,
    pub up: Mat,
    pub up_b: Vec<f32>,
    pub down: Mat,
    pub down_b: Vec<f32>,
}

/// A validated Laya model, ready to predict. Cheap to share: wrap it in an [`Arc`] and give
/// each thread its own [`crate::Session`].
///
/// ```no_run
/// let model = laya_runtime::Model::load("model.laya")?;
/// let mut session = laya_runtime::Session::new(model);
/// for c in session.predict("今天天气", 5).iter() {
///     println!("{} replace={} p={:.3}", c.word, c.replace, c.p);
/// }
/// # Ok::<(), laya_runtime::LoadError>(())
/// ```
pub struct Model {
    storage: Storage,
    pub(crate) kernels: Kernels,
    pub(crate) cfg: Config,
    pub(crate) info: ModelInfo,
    pub(crate) tok: Mat,
    /// `token_embd_comp.weight`: one row per 32 embedding rows, added at lookup.
    pub(crate) tok_comp: Option<Mat>,
    /// `memory_embd.weight`: the output memory's rows (with `cfg.memory`).
    pub(crate) memory: Option<Mat>,
    pub(crate) pos: Mat,
    /// `relative_causal` only: the attention bias of block `l`, head `h`, distance `δ` at
    /// `[(l·H + h)·T + δ]` (empty under learned positions, whose table `pos` holds).
    pub(crate) rel_bias: Vec<f32>,
    pub(crate) layers: Vec<Layer>,
    pub(crate) out_norm_w: Vec<f32>,
    pub(crate) out_norm_b: Vec<f32>,
    pub(crate) output: Mat,
    /// `output.bias` of a flat word head; empty for a factorised one ([`WordClasses::bias`]).
    pub(crate) output_b: Vec<f32>,
    pub(crate) replace: Mat,
    pub(crate) replace_b: Vec<f32>,
    pub(crate) lexicon: Lexicon,
    /// Per word, `ln(dictionary share) − ln(corpus share)`, or empty (see [`prior_shift`]):
    /// computed when a session first sets a completion prior, not at load (the default λ is 0).
    prior_shift: OnceLock<Vec<f32>>,
    /// What the prior shift is computed from: the corpus counts when the file has dictionary
    /// frequencies (`unigram` then counts those).
    prior_source: PriorSource,
    /// A factorised word head (docs/format.md §3 step 5), or `None` for a flat one.
    pub(crate) classes: Option<WordClasses>,
    /// The unigram model that cuts text into words: the n-gram's histories and learned text.
    unigram: WordLogp,
    /// The word trigram beside the network (docs/format.md §8), when the file has one.
    pub(crate) ngram: Option<Ngram>,
    /// When the packer thread starts ([`Model::note_prediction`], `model/packing.rs`):
    /// `PACKER_NEVER` for a model made without it, `PACKER_ARMED` until a first prediction,
    /// `PACKER_ONE_SEEN` until a second, then `PACKER_STARTED`.
    packer: AtomicU8,
}

const PACKER_NEVER: u8 = 0;
const PACKER_ARMED: u8 = 1;
const PACKER_ONE_SEEN: u8 = 2;
const PACKER_STARTED: u8 = 3;

impl Model {
    /// Memory-maps and validates a model file (every check of `laya-format`, checksum
    /// included), choosing the best kernels for this CPU.
    pub fn load(path: impl AsRef<Path>) -> Result<Arc<Model>, LoadError> {
        Self::load_with(path, Kernels::detect())
    }

    /// Like [`Model::load`] with an explicit kernel tier (for tests and benchmarks).
    pub fn load_with(path: impl AsRef<Path>, kernels: Kernels) -> Result<Arc<Model>, LoadError> {
        let path = path.as_ref();
        let io = |source| LoadError::Io { path: path.display().to_string(), source };
        let directory = || LoadError::IsDirectory { path: path.display().to_string() };
        // Windows refuses to open a directory; Linux opens it and only the mapping fails, with
        // "No such device". Either way the user is told what the path is.
        let file = File::open(path).map_err(|e| if path.is_dir() { directory() } else { io(e) })?;
        if file.metadata().map_err(io)?.is_dir() {
            return Err(directory());
        }
        let storage = Storage::map(&file, path).map_err(io)?;
        Self::from_storage(storage, kernels, None, None).map(Self::start_packing)
    }

    /// Validates a model held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Arc<Model>, LoadError> {
        Self::from_storage(Storage::Owned(bytes), Kernels::detect(), None, None).map(Self::start_packing)
    }

    /// Validates a model compiled into the program (`include_bytes!`). The bytes must be
    /// 64-byte aligned for in-place use; if they are not, they are copied once.
    pub fn from_static(bytes: &'static [u8]) -> Result<Arc<Model>, LoadError> {
        Self::from_static_with(bytes, Kernels::detect())
    }

    /// Like [`Model::from_static`] with an explicit kernel tier.
    pub fn from_static_with(bytes: &'static [u8], kernels: Kernels) -> Result<Arc<Model>, LoadError> {
        Self::from_storage(Storage::of_static(bytes), kernels, None, None).map(Self::start_packing)
    }

    /// Like [`Model::from_static`] for bytes that [`LayaFile::parse`] validated when the program
    /// was built: every check whose cost does not grow with the data, but not the ones that
    /// read every byte (the hash, float finiteness, the n-gram lists' entries, each word's own
    /// rules; [`LayaFile::parse_static`]; the stored checksum must equal `checksum`). For a model
    /// compiled in with `include_bytes!` whose build script validated it in full and passed on
    /// its checksum, as the `laya` binary does; it saves ~10 ms of a 30 MB model's start.
    ///
    /// ```no_run
    /// # static BYTES: &[u8] = &[];
    /// # const CHECKSUM: u64 = 0; // in a real program: env!("...") set by build.rs
    /// let model = laya_runtime::Model::from_static_verified(BYTES, CHECKSUM)?;
    /// # Ok::<(), laya_runtime::LoadError>(())
    /// ```
    pub fn from_static_verified(bytes: &'static [u8], checksum: u64) -> Result<Arc<Model>, LoadError> {
        Self::from_static_verified_with(bytes, checksum, Kernels::detect())
    }

    /// Like [`Model::from_static_verified`] with an explicit kernel tier.
    pub fn from_static_verified_with(bytes: &'static [u8], checksum: u64, kernels: Kernels) -> Result<Arc<Model>, LoadError> {
        Self::from_storage(Storage::of_static(bytes), kernels, Some(checksum), None).map(Self::start_packing)
    }

    /// Like [`Model::from_bytes`] with an explicit kernel tier.
    pub fn from_bytes_with(bytes: Vec<u8>, kernels: Kernels) -> Result<Arc<Model>, LoadError> {
        Self::from_storage(Storage::Owned(bytes), kernels, None, None).map(Self::start_packing)
    }

    /// Like [`Model::from_static_verified`], and what a load derives from the lexicon (each
    /// word's length and flags, the byte order, the first-character tables) and the factorised
    /// head (each class's members and biases) is read in place from `index`, what
    /// [`Model::prepared_index`] gave for the same model when the program was built, instead of
    /// being built (~1.2 ms of the 50,000-word default's cold start). `index` must be 8-byte
    /// aligned; one made for another model, or damaged, is refused
    /// ([`LoadError::Prepared`]). Predictions are the same either way.
    ///
    /// ```
    /// # use laya_format::{testing, write_model, GgmlType, LayaFile};
    /// # let (meta, tensors) = testing::random_model(&testing::TinyConfig::small(), 5, GgmlType::F32);
    /// # let aligned = |b: Vec<u8>| -> &'static [u8] { let r = vec![0u8; b.len() + 64].leak(); let at = r.as_ptr().align_offset(64); r[at..at + b.len()].copy_from_slice(&b); &r[at..at + b.len()] };
    /// // In a build script: validate the model in full, keep its checksum and its index.
    /// let bytes: &'static [u8] = aligned(write_model(&meta, &tensors)?);
    /// let checksum = LayaFile::parse(bytes)?.checksum;
    /// let index = aligned(laya_runtime::Model::from_static(bytes)?.prepared_index());
    /// // In the program: both compiled in beside the model.
    /// let model = laya_runtime::Model::from_static_prepared(bytes, checksum, index)?;
    /// assert_eq!(model.word(0), laya_runtime::Model::from_static(bytes)?.word(0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_static_prepared(bytes: &'static [u8], checksum: u64, index: &'static [u8]) -> Result<Arc<Model>, LoadError> {
        Self::from_static_prepared_with(bytes, checksum, index, Kernels::detect())
    }

    /// Like [`Model::from_static_prepared`] with an explicit kernel tier.
    pub fn from_static_prepared_with(
        bytes: &'static [u8],
        checksum: u64,
        index: &'static [u8],
        kernels: Kernels,
    ) -> Result<Arc<Model>, LoadError> {
        Self::from_storage(Storage::of_static(bytes), kernels, Some(checksum), Some(index)).map(Self::start_packing)
    }

    /// The prepared index of this model's lexicon, classes and n-gram lists, for
    /// [`Model::from_static_prepared`]: made when a program that embeds the model is built,
    /// compiled in beside it.
    pub fn prepared_index(&self) -> Vec<u8> {
        self.prepare_ngram();
        let words = prepared::PerWord {
            cuts: self.unigram.freq(),
            cut_total: self.unigram.total(),
            prior: &self.prior_source,
            dict_words: self.info.dict_words,
        };
        prepared::write(&self.lexicon, self.classes.as_ref(), self.ngram.as_ref(), words, self.info.checksum)
    }

    /// `verified`: the checksum already verified over these bytes (see
    /// [`Model::from_static_verified`]), or `None` to hash them. `index`: a prepared lexicon
    /// index ([`Model::from_static_prepared`]).
    fn from_storage(storage: Storage, kernels: Kernels, verified: Option<u64>, index: Option<&'static [u8]>) -> Result<Model, LoadError> {
        let start = std::time::Instant::now();
        let bytes = storage.bytes();
        // An index is only given with the checksum verified when it was made.
        let prepared = match (index, verified) {
            (Some(image), Some(checksum)) => Some(prepared::read(image, checksum).map_err(LoadError::Prepared)?),
            (Some(_), None) => return Err(LoadError::Prepared("a prepared index without the verified checksum".into())),
            (None, _) => None,
        };
        let mut file = match (&storage, verified, &prepared) {
            // The program's own bytes: the lexicon is read in place, and with a prepared index
            // its per-word integers are read from the index, not decoded, and where its words
            // start too.
            (Storage::Static(s), Some(checksum), Some(p)) => LayaFile::parse_static_indexed(s, checksum, p.word_starts)?,
            (Storage::Static(s), _, _) => LayaFile::parse_static(s, verified)?,
            (_, Some(checksum), _) => LayaFile::parse_verified(bytes, checksum)?,
            (_, None, _) => LayaFile::parse(bytes)?,
        };
        if let Some(p) = &prepared {
            if p.words != file.meta.words.len() {
                return Err(LoadError::Prepared(format!("made for {} words, the model has {}", p.words, file.meta.words.len())));
            }
        }
        let validate = start.elapsed();
        let base = bytes.as_ptr() as usize;
        // Where the unigram's counts, the prior's source and the number of words with a
        // dictionary frequency come from: the index, else the file.
        let (lexicon_index, class_index, ngram_index, per_word) = match prepared {
            Some(p) => (Some(p.lexicon), p.classes, p.ngram, Some((p.cuts, p.cut_total, p.c1_total, p.prior, p.dict_words))),
            None => (None, None, None, None),
        };
        let mat = |t: &TensorRef| -> Result<Mat, LoadError> {
            let ty = t.ty;
            let start = t.data.as_ptr() as usize - base;
            let (cols, rows) = (t.ne[0] as usize, t.ne.get(1).copied().unwrap_or(1) as usize);
            // Re-check through the kernel crate's own constructor so a disagreement between
            // the two crates is an error at load, never an out-of-bounds read later.
            Matrix::new(ty, rows, cols, t.data).map_err(|e| LoadError::Kernel(format!("{}: {e}", t.name)))?;
            Ok(Mat { ty, rows, cols, range: start..start + t.data.len(), packs: false, packed: OnceLock::new() })
        };
        // A linear layer: its Q8_0, Q4_0 or Q4_1 weights on x86 with AVX2 also get the
        // interleaved copy the packed int8 kernels read (a few percent more than the tensor).
        // Q8_0 layers are packed later, by the packer thread a second prediction starts or by
        // [`Model::pack`]; the rare Q4 layers, which have no row-major stand-in, here.
        let lin = |t: &TensorRef| -> Result<Mat, LoadError> {
            let mut m = mat(t)?;
            m.packs = Packed::packs(m.ty, kernels);
            if m.packs && m.ty != GgmlType::Q8_0 {
                let err = |e: laya_kernels::KernelError| LoadError::Kernel(format!("{}: {e}", t.name));
                let w = Matrix::new(m.ty, m.rows, m.cols, t.data).map_err(err)?;
                m.packed = OnceLock::from(Packed::of(&w, kernels).map_err(err)?);
            }
            Ok(m)
        };
        let hp = &file.meta.hparams;
        let cfg = Config {
            context_length: hp.context_length as usize,
            d_model: hp.embedding_length as usize,
            heads: hp.head_count as usize,
            ffn: hp.feed_forward_length.iter().map(|&f| f as usize).collect(),
            eps: hp.layer_norm_epsilon,
            activation: hp.activation,
            embedding_rows: hp.embedding_rows,
            mapping: hp.mapping.clone(),
            vocab: file.meta.words.len(),
            replace_classes: hp.replace_classes as usize,
            normalization: file.meta.normalization.clone(),
            position_scheme: hp.position_scheme,
            receptive_field: hp.position_scheme.receptive_field(hp.block_count, hp.context_length) as usize,
            word_classes: 0,
            largest_class: 0,
            spaced_words: laya_format::separates_words(&file.meta.provenance.language),
            memory: hp.memory.clone(),
        };
        let mut layers = Vec::with_capacity(file.layers.len());
        for l in &file.layers {
            layers.push(Layer {
                attn_norm_w: f32s(&l.attn_norm_w),
                attn_norm_b: f32s(&l.attn_norm_b),
                q: lin(&l.attn_q_w)?,
                q_b: f32s(&l.attn_q_b),
                k: lin(&l.attn_k_w)?,
                k_b: f32s(&l.attn_k_b),
                v: lin(&l.attn_v_w)?,
                v_b: f32s(&l.attn_v_b),
                o: lin(&l.attn_out_w)?,
                o_b: f32s(&l.attn_out_b),
                ffn_norm_w: f32s(&l.ffn_norm_w),
                ffn_norm_b: f32s(&l.ffn_norm_b),
                up: lin(&l.ffn_up_w)?,
                up_b: f32s(&l.ffn_up_b),
                down: lin(&l.ffn_down_w)?,
                down_b: f32s(&l.ffn_down_b),
            });
        }
        let info = ModelInfo {
            name: file.meta.name.clone(),
            language: file.meta.provenance.language.clone(),
            training_data: file.meta.provenance.training_data.clone(),
            created: file.meta.provenance.created.clone(),
            checksum: file.checksum,
            file_len: bytes.len(),
            storage: storage.kind(),
            dict_words: match &per_word {
                Some((.., n)) => *n,
                None => file.meta.dict_frequencies.as_deref().map_or(0, |d| d.iter().filter(|&&f| f > 0).count()),
            },
            load_time: LoadTime { validate, prepare: std::time::Duration::ZERO },
        };
        let classes = match &file.output_class {
            Some((w, _)) => {
                let out = mat(&file.output_w)?;
                let out_w = Matrix { ty: out.ty, rows: out.rows, cols: out.cols, data: file.output_w.data };
                let class_of = file.meta.word_class.take().unwrap_or_default();
                Some(WordClasses::new(&file, class_of, &out_w, file.output_b.data, lin(w)?, kernels, class_index)?)
            }
            None => None,
        };
        let cfg = Config {
            word_classes: classes.as_ref().map_or(0, WordClasses::len),
            largest_class: classes.as_ref().map_or(0, WordClasses::max_class),
            ..cfg
        };
        // Which of the words that fold alike is shown, where the language ignores case (a
        // prepared index holds the answer).
        let folds = lexicon_index.is_none() && laya_format::ignores_case(&file.meta.provenance.language);
        let fold_freqs = folds.then(|| file.meta.frequencies.clone());
        let (unigram, prior_source, c1_total) = match per_word {
            Some((cuts, total, c1_total, prior, _)) => (WordLogp::with_total(Cow::Borrowed(cuts), total), prior, c1_total),
            None => {
                let corpus = std::mem::take(&mut file.meta.frequencies);
                let (cuts, prior) = match file.meta.dict_frequencies.take() {
                    None => (corpus, PriorSource::None),
                    Some(d) if d.iter().any(|&f| f > 0) => (d, PriorSource::Corpus(Cow::Owned(corpus))),
                    Some(d) => (corpus, PriorSource::Zero(d.len())),
                };
                (WordLogp::new(Cow::Owned(cuts)), prior, None)
            }
        };
        let ngram = Ngram::from_file(&file, base, c1_total);
        if let (Some(n), Some(ix)) = (&ngram, ngram_index) {
            n.adopt(ix).map_err(LoadError::Prepared)?;
        }
        let parts = Model {
            ngram,
            classes,
            kernels,
            tok: mat(&file.token_embd)?,
            tok_comp: file.token_embd_comp.as_ref().map(mat).transpose()?,
            memory: file.memory_embd.as_ref().map(mat).transpose()?,
            pos: mat(&file.pos_embd)?,
            rel_bias: match hp.position_scheme {
                PositionScheme::RelativeCausal => file.pos_embd.to_f32()?,
                PositionScheme::LearnedAbsolute => Vec::new(),
            },
            out_norm_w: f32s(&file.output_norm_w),
            out_norm_b: f32s(&file.output_norm_b),
            // A factorised head reads its words' rows class by class from `classes`, packed
            // there; a second packed copy of the whole head would never be read.
            output: if file.output_class.is_some() { mat(&file.output_w)? } else { lin(&file.output_w)? },
            // A factorised head keeps its biases in `classes`, in member order.
            output_b: if file.output_class.is_some() { Vec::new() } else { f32s(&file.output_b) },
            prior_shift: OnceLock::new(),
            prior_source,
            unigram,
            packer: AtomicU8::new(PACKER_NEVER),
            replace: mat(&file.replace_w)?,
            replace_b: f32s(&file.replace_b),
            lexicon: match lexicon_index {
                Some(ix) => Lexicon::with_index(std::mem::take(&mut file.meta.words), ix).map_err(LoadError::Prepared)?,
                None => {
                    Lexicon::with_order(std::mem::take(&mut file.meta.words), std::mem::take(&mut file.word_order), fold_freqs.as_deref())
                }
            },
            layers,
            cfg,
            info,
            storage: Storage::Owned(Vec::new()),
        };
        drop(file);
        let mut parts = parts;
        parts.info.load_time.prepare = start.elapsed() - validate;
        // The parts hold byte ranges, not references, so the storage can move in now.
        let model = Model { storage, ..parts };
        Ok(model)
    }

    /// Per word, `ln(dictionary share) − ln(corpus share)`; empty for a model without
    /// dictionary frequencies. Computed once, at the first call.
    pub(crate) fn prior_shift(&self) -> &[f32] {
        self.prior_shift.get_or_init(|| match &self.prior_source {
            PriorSource::None => Vec::new(),
            PriorSource::Zero(n) => vec![0.0; *n],
            PriorSource::Corpus(corpus) => prior_shift(corpus, self.unigram.freq()),
        })
    }

    /// The unigram model that cuts text into words.
    pub(crate) fn word_logp(&self) -> &WordLogp {
        &self.unigram
    }

    /// Whether the file carries a word trigram that sessions mix into the network's candidates
    /// (docs/format.md §8; [`crate::Session::set_ngram_weight`]).
    pub fn has_ngram(&self) -> bool {
        self.ngram.is_some()
    }

    /// `P(w | u v)` of the model's word trigram (docs/format.md §8), the words given as
    /// strings (`None`: the line start; a word outside the lexicon counts as unknown). `None`
    /// when the model has no n-gram. For tests against other implementations of the same
    /// counts (`laya_text::NgramPredictor::probability`); allocates.
    pub fn ngram_probability(&self, history: [Option<&str>; 2], w: &str) -> Option<f64> {
        let n = self.ngram.as_ref()?;
        let logp = self.word_logp();
        let input =
            crate::ngram::NgramInput { bytes: self.storage.bytes(), lexicon: &self.lexicon, normalization: &self.cfg.normalization, logp };
        let mut key = String::new();
        let mut pos = |word: Option<&str>| match word {
            None => self.lexicon.len() as u32,
            Some(word) => {
                key.reserve(4 * word.len());
                crate::ngram::position(word, &input, n, &mut key)
            }
        };
        let (u, v, w) = (pos(history[0]), pos(history[1]), pos(Some(w)));
        Some(n.probability(self.storage.bytes(), u, v, w))
    }

    /// The count that cuts text into word `id` (`id < lexicon_len()`): the dictionary's
    /// frequency where the file has dictionary frequencies, else the corpus count. An n-gram
    /// trained for this model cuts its text with these (`laya ngram --model M --cut lexicon`).
    pub fn cut_count(&self, id: usize) -> Option<u32> {
        self.unigram.freq().get(id).copied()
    }

    /// The position of word `id` in the lexicon's search order (byte order of the words, or
    /// of their folded forms where the language ignores case): what the n-gram tables number
    /// words by, indexed by word id. For tools (`laya attach-ngram`); allocates.
    pub fn search_positions(&self) -> Vec<u32> {
        let mut pos = vec![0u32; self.lexicon.len()];
        for p in 0..self.lexicon.len() {
            pos[self.lexicon.id_at(p)] = p as u32;
        }
        pos
    }

    /// The model's hyper-parameters.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Name, provenance, checksum and storage of the model.
    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// The kernel tier chosen at load.
    pub fn kernel_level(&self) -> Level {
        self.kernels.level()
    }

    /// The kernel handle chosen at load.
    pub fn kernels(&self) -> Kernels {
        self.kernels
    }

    /// The int8 instruction set chosen at load (for Q8_0 layers).
    pub fn int8_isa(&self) -> laya_kernels::Int8Isa {
        self.kernels.int8_isa()
    }

    /// Number of words in the lexicon.
    pub fn lexicon_len(&self) -> usize {
        self.lexicon.len()
    }

    /// Word `id` of the lexicon (`id < lexicon_len()`).
    pub fn word(&self, id: usize) -> Option<&str> {
        (id < self.lexicon.len()).then(|| self.lexicon.word(id))
    }

    /// Multiply-adds of one prediction computed whole: with learned positions, `T` context
    /// positions in every block but the last (which computes only the last position's query,
    /// attention and FFN); with the causal window, keys and values at the last `m_l + T − 1`
    /// positions of block `l` and the rest at its last `m_l` (docs/format.md §3), for a context
    /// that fills the receptive field. Used to report the fraction of the CPU's peak
    /// arithmetic a prediction reaches.
    pub fn macs_per_prediction(&self) -> u64 {
        let (t, d) = (self.cfg.context_length as u64, self.cfg.d_model as u64);
        let nl = self.layers.len() as u64;
        let mut macs = 0u64;
        if self.cfg.position_scheme == PositionScheme::RelativeCausal {
            for (i, f) in self.cfg.ffn.iter().enumerate() {
                let (f, m) = (*f as u64, (nl - 1 - i as u64) * (t - 1) + 1);
                macs += 2 * (m + t - 1) * d * d + m * (2 * d * d + 2 * t * d + 2 * d * f);
            }
            return macs + self.head_macs();
        }
        for (i, f) in self.cfg.ffn.iter().enumerate() {
            let f = *f as u64;
            let full = i as u64 + 1 < nl;
            let positions = if full { t } else { 1 };
            macs += 2 * t * d * d; // k, v
            macs += 2 * positions * d * d; // q, output projection
            macs += positions * 2 * t * d; // scores and weighted values
            macs += positions * 2 * d * f; // ffn up + down
        }
        macs + self.head_macs()
    }

    /// Multiply-adds of the heads: every word and replace class, or, with a factorised word
    /// head, the class head and the replace head only; each word-head row a prediction then
    /// computes adds `d` (`StageTimes::word_rows` counts them).
    pub fn head_macs(&self) -> u64 {
        let rows = if self.cfg.word_classes > 0 { self.cfg.word_classes } else { self.cfg.vocab };
        self.cfg.d_model as u64 * (rows + self.cfg.replace_classes) as u64
    }

    /// Multiply-adds of a prediction whose context adds one character to the previous one. The
    /// same as [`Model::macs_per_prediction`] with learned positions (nothing carries over);
    /// with the causal window, one position per block (its key, value, query, at most `T`
    /// keys, output projection and FFN) and the heads.
    ///
    /// ```
    /// use laya_format::{testing, write_model, GgmlType, PositionScheme};
    /// let cfg = testing::TinyConfig { position_scheme: PositionScheme::RelativeCausal, ..Default::default() };
    /// let (meta, tensors) = testing::random_model(&cfg, 1, GgmlType::F32);
    /// let m = laya_runtime::Model::from_bytes(write_model(&meta, &tensors).unwrap()).unwrap();
    /// assert!(m.macs_per_keystroke() * 5 < m.macs_per_prediction());
    /// ```
    pub fn macs_per_keystroke(&self) -> u64 {
        if self.cfg.position_scheme != PositionScheme::RelativeCausal {
            return self.macs_per_prediction();
        }
        let (t, d) = (self.cfg.context_length as u64, self.cfg.d_model as u64);
        let blocks: u64 = self.cfg.ffn.iter().map(|&f| 4 * d * d + 2 * t * d + 2 * d * f as u64).sum();
        blocks + self.head_macs()
    }

    /// Reads one byte of every page so a freshly mapped file is resident before the first
    /// keystroke (part of [`crate::Session::warm_up`]).
    pub fn prefault(&self) {
        let bytes = self.storage.bytes();
        let mut acc = 0u8;
        for i in (0..bytes.len()).step_by(4096) {
            acc ^= bytes[i];
        }
        std::hint::black_box(acc);
    }

    #[inline]
    /// The file's bytes (what the n-gram tables are read from).
    pub(crate) fn storage_bytes(&self) -> &[u8] {
        self.storage.bytes()
    }

    pub(crate) fn matrix(&self, m: &Mat) -> Matrix<'_> {
        Matrix { ty: m.ty, rows: m.rows, cols: m.cols, data: &self.storage.bytes()[m.range.clone()] }
    }
}

/// Norms and biases are small F32 vectors (format.md §7); copying them once at load keeps the
/// runtime free of unaligned-cast `unsafe` and costs a few kilobytes.
pub(crate) fn f32s(t: &TensorRef) -> Vec<f32> {
    t.data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

/// The completion prior's per-word log ratio (docs/format.md §3 step 6): how much more often a
/// general-purpose dictionary sees the word than the training corpus did,
/// `ln(d_w / Σd) − ln((c_w + 1) / Σ(c + 1))`, both sums over the words the dictionary has.
/// A word the dictionary lacks (`d_w = 0`: punctuation, numbers, names of the corpus) keeps 0,
/// so it neither gains nor loses. Computed once, at load.
/// Where a model's completion-prior shift comes from.
pub(crate) enum PriorSource {
    /// No dictionary frequencies: no prior.
    None,
    /// Dictionary frequencies that are all 0: a shift of 0 for each of this many words.
    Zero(usize),
    /// The corpus counts, against the dictionary frequencies in `Model::word_freq`.
    Corpus(Cow<'static, [u32]>),
}

fn prior_shift(corpus: &[u32], dict: &[u32]) -> Vec<f32> {
    let both = || corpus.iter().zip(dict).filter(|(_, &d)| d > 0);
    let sum_d: f64 = both().map(|(_, &d)| d as f64).sum();
    let sum_c: f64 = both().map(|(&c, _)| c as f64 + 1.0).sum();
    if sum_d == 0.0 {
        return vec![0.0; dict.len()];
    }
    corpus
        .iter()
        .zip(dict)
        .map(|(&c, &d)| if d == 0 { 0.0 } else { ((d as f64 / sum_d).ln() - ((c as f64 + 1.0) / sum_c).ln()) as f32 })
        .collect()
}

/// A random quantised model of `vocab` words with a random n-gram, not yet packed.
#[cfg(test)]
pub(crate) fn random_with_ngram(vocab: usize, seed: u64) -> Model {
    use laya_format::quantize::QuantizeOptions;
    use laya_format::testing::{random_quantized_model, TinyConfig};
    let cfg = TinyConfig { vocab, ..TinyConfig::default() };
    let (meta, mut tensors) = random_quantized_model(&cfg, seed, &QuantizeOptions::default());
    tensors.extend(laya_format::testing::random_ngram(cfg.vocab, 6000, seed));
    let bytes = laya_format::write_model(&meta, &tensors).unwrap();
    Model::from_storage(Storage::Owned(bytes), Kernels::detect(), None, None).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Session;
    use laya_format::quantize::QuantizeOptions;
    use laya_format::testing::{random_quantized_model, TinyConfig};

    type Bar = Vec<(String, usize, u32)>;

    fn bar(s: &mut Session, ctx: &str) -> Bar {
        s.predict(ctx, 5).iter().map(|c| (c.word.to_string(), c.replace, c.p.to_bits())).collect()
    }

    /// Predictions made before the packer has made the layers' copies (the row-major stand-in,
    /// `PackedRef::Pending`) equal those made after, to the bit: in fresh sessions, and in one
    /// session that keeps its keys and values across the moment the copies arrive.
    #[test]
    fn predictions_do_not_change_when_the_packed_copies_arrive() {
        let kernels = Kernels::detect();
        if !kernels.packs_q8() {
            eprintln!("skipped: this CPU has no packed int8 kernels, so nothing is packed");
            return;
        }
        let causal = TinyConfig { position_scheme: PositionScheme::RelativeCausal, ..TinyConfig::default() };
        let classes = TinyConfig { word_classes: 12, ..causal.clone() };
        let contexts = ["", "今", "今天", "今天天气很好我们去", "hello wor", "😀", "的的的的的的的的的的的的的的的的的的的的"];
        for (seed, cfg) in [(1, TinyConfig::default()), (2, causal), (3, classes)] {
            let (meta, tensors) = random_quantized_model(&cfg, seed, &QuantizeOptions::default());
            let bytes = laya_format::write_model(&meta, &tensors).unwrap();
            // Without `start_packing`: nothing packs until `pack`.
            let model = Arc::new(Model::from_storage(Storage::Owned(bytes), kernels, None, None).unwrap());
            assert!(!model.is_packed(), "seed {seed}: packed at load");
            let run = |m: &Arc<Model>| {
                let mut s = Session::new(Arc::clone(m));
                contexts.iter().map(|c| bar(&mut s, c)).collect::<Vec<_>>()
            };
            let before = run(&model);
            let mut across = Session::new(Arc::clone(&model));
            let first = bar(&mut across, "今天天");
            assert!(!model.is_packed());
            model.pack();
            assert!(model.is_packed() && model.packed_bytes() > 0);
            assert_eq!(before, run(&model), "seed {seed}: fresh sessions");
            let mut after = Session::new(Arc::clone(&model));
            assert_eq!(first, bar(&mut after, "今天天"));
            assert_eq!(bar(&mut across, "今天天气"), bar(&mut after, "今天天气"), "seed {seed}: one session across packing");
        }
    }

    /// The n-gram's candidates before the packer thread has prepared its long lists (picked
    /// from the lists at each prediction) equal those after, to the bit; the lists are long
    /// enough to need preparing.
    #[test]
    fn predictions_do_not_change_when_the_ngram_lists_are_prepared() {
        // Enough words that some letters start more than `TOP_FOLLOW` of them.
        let model = Arc::new(random_with_ngram(4000, 8));
        let contexts = ["", "今", "今天", "我们", "hello ", "的的的的", "s", "hello t", "我们a"];
        let run = || {
            let mut s = Session::new(Arc::clone(&model));
            contexts.iter().map(|c| bar(&mut s, c)).collect::<Vec<_>>()
        };
        let n = model.ngram.as_ref().unwrap();
        assert!(!n.is_prepared());
        let before = run();
        model.pack();
        assert!(n.is_prepared() && n.long_list_count() >= 2, "{} long lists", n.long_list_count());
        assert!(n.first_range_count() >= 1, "{} long one-character ranges", n.first_range_count());
        assert_eq!(before, run());
    }
}
