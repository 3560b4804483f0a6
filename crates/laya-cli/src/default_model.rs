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

/// The embedded model of `lang`'s bytes, or `None` when this binary was built without one.
pub fn bytes(lang: Lang) -> Option<&'static [u8]> {
    match lang {
        #[cfg(laya_default_model)]
        Lang::Zh => Some(&DEFAULT.0),
        #[cfg(laya_english_model)]
        Lang::En => Some(&ENGLISH.0),
        #[allow(unreachable_patterns)]
        _ => None,
    }
}
