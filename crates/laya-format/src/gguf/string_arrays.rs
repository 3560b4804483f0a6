//! Reading a GGUF string array (a lexicon is one): in one SIMD-checked pass where it can be,
//! in place from the program's own bytes, with starts an index holds, or element by element
//! where something is wrong and the error must name the element.

use std::borrow::Cow;

use super::{Reader, ValueType};
use crate::error::FormatError;
use crate::strings::{Strings, GGUF_GAP, MAX_STRINGS_BYTES};

impl Reader<'_> {
    /// A string array into one buffer. [`Reader::one_pass_string_array`] where it applies; else
    /// copied back to back and checked as UTF-8 in one pass (a whole buffer is valid and every
    /// boundary falls between characters exactly when every element is valid). Only on failure
    /// is the array walked again to name the element.
    pub(super) fn string_array(&mut self, n: usize, what: &str) -> Result<Strings, FormatError> {
        match self.one_pass_string_array(n) {
            Some(list) => Ok(list),
            None => self.any_string_array(n, what),
        }
    }

    /// A string array checked as UTF-8 in one SIMD pass (`simdutf8`) over the whole run of
    /// lengths and elements, where the general path's check cost ~0.6 ms for 50,000 Chinese
    /// words. Each element is then sliced out of the checked run; a slice of valid UTF-8 is
    /// valid exactly when both its ends are character boundaries, which `str::get` checks. The
    /// lengths of elements shorter than 128 bytes (a lexicon's words) are ASCII bytes, so such
    /// an array passes exactly when every element is valid. `None`, with nothing read, for
    /// anything else (a truncated array, an element that is not UTF-8, a run that is not UTF-8
    /// because of a length's bytes): [`Reader::any_string_array`] then reads it and names what
    /// is wrong.
    ///
    /// From `'static` bytes the run is kept where it is ([`Strings::from_gguf_run`]), not
    /// copied element by element (~0.8 ms of a 50,000-word load), when every byte of every
    /// length is ASCII: then each element starts after an ASCII byte and ends before one or at
    /// the run's end, so a run that is valid UTF-8 holds only valid elements, each on character
    /// boundaries.
    pub(super) fn one_pass_string_array(&mut self, n: usize) -> Option<Strings> {
        let (start, bytes) = (self.pos, self.bytes);
        let len_at = |pos: usize| -> Option<u64> {
            let b = bytes.get(pos..pos.checked_add(8)?)?;
            Some(u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
        };
        // Where each element starts, for a run kept in place.
        let mut starts = Vec::with_capacity(if self.statics.is_some() { n } else { 0 });
        let mut end = start;
        for _ in 0..n {
            let raw = len_at(end)?;
            let len = usize::try_from(raw).ok()?;
            if len > bytes.len() - end - 8 {
                return None;
            }
            end += 8;
            if self.statics.is_some() {
                if raw & 0x8080_8080_8080_8080 != 0 {
                    return None;
                }
                starts.push(u32::try_from(end - start).ok()?);
            }
            end += len;
        }
        if let Some(all) = self.statics {
            if end - start > MAX_STRINGS_BYTES {
                return None;
            }
            let run = simdutf8::basic::from_utf8(all.get(start..end)?).ok()?;
            self.pos = end;
            starts.push(u32::try_from(end - start).ok()? + GGUF_GAP);
            return Some(Strings::from_gguf_run(run, Cow::Owned(starts)));
        }
        let run = simdutf8::basic::from_utf8(&bytes[start..end]).ok()?;
        let total = run.len() - 8 * n;
        if total > MAX_STRINGS_BYTES {
            return None;
        }
        let mut buf = String::with_capacity(total);
        let mut offsets = Vec::with_capacity(n + 1);
        offsets.push(0);
        let mut at = 0;
        for _ in 0..n {
            let len = usize::try_from(len_at(start + at)?).ok()?;
            buf.push_str(run.get(at + 8..at + 8 + len)?);
            offsets.push(buf.len() as u32);
            at += 8 + len;
        }
        self.pos = end;
        Strings::from_offsets(buf, offsets)
    }

    /// At a string array value in the program's own bytes whose run `starts` describes (where
    /// each element starts in the run, then the run's length plus 8, as
    /// [`Strings::run_starts`] gives them): the array read in place with those starts, once
    /// every length is checked against them (and is ASCII) and the run is UTF-8, so nothing is
    /// allocated per element. `None`, with nothing read, where anything differs: the caller
    /// then reads the array as usual.
    pub(super) fn held_string_array(&mut self, starts: &'static [u32]) -> Option<Strings> {
        let (at, all) = (self.pos, self.statics?);
        let (last, elements) = starts.split_last()?;
        let elem = u32::from_le_bytes(all.get(at..at + 4)?.try_into().ok()?);
        let n = u64::from_le_bytes(all.get(at + 4..at + 12)?.try_into().ok()?);
        if elem != ValueType::String as u32 || n != elements.len() as u64 {
            return None;
        }
        let start = at + 12;
        let mut end = start;
        for &s in elements {
            let raw = u64::from_le_bytes(all.get(end..end.checked_add(8)?)?.try_into().ok()?);
            end += 8;
            if raw & 0x8080_8080_8080_8080 != 0 || s as usize != end - start {
                return None;
            }
            end = end.checked_add(usize::try_from(raw).ok()?)?;
        }
        if *last as usize != end - start + GGUF_GAP as usize || end - start > MAX_STRINGS_BYTES {
            return None;
        }
        let run = simdutf8::basic::from_utf8(all.get(start..end)?).ok()?;
        self.pos = end;
        Some(Strings::from_gguf_run(run, Cow::Borrowed(starts)))
    }

    /// [`Reader::string_array`] for any array: the general path, and the naive twin of
    /// [`Reader::one_pass_string_array`].
    pub(super) fn any_string_array(&mut self, n: usize, what: &str) -> Result<Strings, FormatError> {
        let start = self.pos;
        let mut buf: Vec<u8> = Vec::with_capacity(n.saturating_mul(8).min(self.remaining()));
        let mut ends = Vec::with_capacity(n);
        for i in 0..n {
            let raw = self.raw_string(u64::MAX, &|| format!("{what}[{i}]"))?;
            buf.extend_from_slice(raw);
            if buf.len() > MAX_STRINGS_BYTES {
                return Err(FormatError::TooLarge {
                    what: format!("total length of the strings of {what}"),
                    value: buf.len() as u64,
                    limit: MAX_STRINGS_BYTES as u64,
                });
            }
            ends.push(buf.len() as u32);
        }
        let list = String::from_utf8(buf).ok().and_then(|b| Strings::from_parts(b, ends));
        match list {
            Some(list) => Ok(list),
            None => {
                let mut again = Reader { bytes: self.bytes, pos: start, statics: None };
                for i in 0..n {
                    again.string_lazy(u64::MAX, &|| format!("{what}[{i}]"))?;
                }
                // Not reached (see above); an error rather than a panic all the same.
                Err(FormatError::BadUtf8 { what: what.to_string(), offset: start as u64 })
            }
        }
    }
}
