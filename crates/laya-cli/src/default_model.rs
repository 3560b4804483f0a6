//! The model compiled into the `laya` binary (models/default.laya), 64-byte aligned so the
//! runtime uses it in place, exactly like a memory-mapped file.

#[allow(dead_code)] // unused in builds without an embedded model
#[repr(C, align(64))]
struct Aligned<T: ?Sized>(T);

#[cfg(laya_default_model)]
static DEFAULT: &Aligned<[u8]> = &Aligned(*include_bytes!(env!("LAYA_DEFAULT_MODEL")));

/// The embedded model's bytes, or `None` when this binary was built without one.
pub fn bytes() -> Option<&'static [u8]> {
    #[cfg(laya_default_model)]
    {
        Some(&DEFAULT.0)
    }
    #[cfg(not(laya_default_model))]
    {
        None
    }
}
