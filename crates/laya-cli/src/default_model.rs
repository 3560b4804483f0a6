//! The models compiled into the `laya` binary (models/default.laya, Chinese, and
//! models/en.laya, English), 64-byte aligned so the runtime uses them in place, exactly like a
//! memory-mapped file.

/// The language of an embedded model (`--lang`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Lang {
    /// Chinese: models/default.laya.
    #[default]
    Zh,
    /// English: models/en.laya.
    En,
}

impl Lang {
    /// The value of `--lang` that picks it.
    pub fn name(self) -> &'static str {
        match self {
            Lang::Zh => "zh",
            Lang::En => "en",
        }
    }
}

#[allow(dead_code)] // unused in builds without an embedded model
#[repr(C, align(64))]
struct Aligned<T: ?Sized>(T);

#[cfg(laya_default_model)]
static DEFAULT: &Aligned<[u8]> = &Aligned(*include_bytes!(env!("LAYA_DEFAULT_MODEL")));

#[cfg(laya_english_model)]
static ENGLISH: &Aligned<[u8]> = &Aligned(*include_bytes!(env!("LAYA_ENGLISH_MODEL")));

#[cfg(laya_default_index)]
static DEFAULT_INDEX: &Aligned<[u8]> = &Aligned(*include_bytes!(env!("LAYA_DEFAULT_MODEL_INDEX")));

#[cfg(laya_english_index)]
static ENGLISH_INDEX: &Aligned<[u8]> = &Aligned(*include_bytes!(env!("LAYA_ENGLISH_MODEL_INDEX")));

/// An embedded model: its bytes, the checksum build.rs verified over them and the lexicon index
/// it prepared for them (none where the lexicon ignores case).
#[derive(Clone, Copy)]
pub struct Embedded {
    pub bytes: &'static [u8],
    pub checksum: u64,
    pub index: Option<&'static [u8]>,
}

impl Embedded {
    /// The model, its lexicon index read in place where build.rs prepared one.
    pub fn load(self, kernels: laya_kernels::Kernels) -> Result<std::sync::Arc<laya_runtime::Model>, laya_runtime::LoadError> {
        match self.index {
            Some(index) => laya_runtime::Model::from_static_prepared_with(self.bytes, self.checksum, index, kernels),
            None => laya_runtime::Model::from_static_verified_with(self.bytes, self.checksum, kernels),
        }
    }
}

/// The checksum build.rs computed, passed as a decimal string.
#[allow(dead_code)] // unused in builds without an embedded model
const fn parse_checksum(s: &str) -> u64 {
    match u64::from_str_radix(s, 10) {
        Ok(v) => v,
        Err(_) => panic!("build.rs passed a checksum that is not a u64"),
    }
}

/// The embedded model of `lang`, or `None` when this binary was built without one.
pub fn get(lang: Lang) -> Option<Embedded> {
    match lang {
        #[cfg(laya_default_model)]
        Lang::Zh => Some(Embedded {
            bytes: &DEFAULT.0,
            checksum: const { parse_checksum(env!("LAYA_DEFAULT_MODEL_CHECKSUM")) },
            #[cfg(laya_default_index)]
            index: Some(&DEFAULT_INDEX.0),
            #[cfg(not(laya_default_index))]
            index: None,
        }),
        #[cfg(laya_english_model)]
        Lang::En => Some(Embedded {
            bytes: &ENGLISH.0,
            checksum: const { parse_checksum(env!("LAYA_ENGLISH_MODEL_CHECKSUM")) },
            #[cfg(laya_english_index)]
            index: Some(&ENGLISH_INDEX.0),
            #[cfg(not(laya_english_index))]
            index: None,
        }),
        #[allow(unreachable_patterns)]
        _ => None,
    }
}
