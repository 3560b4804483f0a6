//! The heap of a `laya` process with the training commands: the system allocator (counted,
//! `crate::ALLOCATOR`) until a command that trains or reads a corpus asks for mimalloc
//! ([`use_mimalloc`]).
//!
//! Training allocates and frees tensors of tens of MB every step, which glibc hands back to the
//! kernel and page-faults in again; mimalloc keeps them. A process that answers keystrokes
//! (`laya predict`, `bench`, `serve`) needs none of that, and mimalloc's arenas cost a fresh
//! process ~90 page faults more than glibc's heap before its first prediction.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

use mimalloc::MiMalloc;

/// Set once mimalloc has been initialised and allocations go to it.
static MIMALLOC: AtomicBool = AtomicBool::new(false);

/// `mi_option_purge_delay`: its place in mimalloc 3's `mi_option_e` (mimalloc.h), which the
/// Rust bindings do not name; `a_purge_delay_is_where_mimalloc_keeps_it` checks it.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// The process's allocator: the system's (counted), or mimalloc's after [`use_mimalloc`]. Memory goes
/// back to whichever allocator handed it out, so blocks made before the switch stay valid.
pub struct Heap;

/// Whether mimalloc handed out `ptr` (only ever true after [`use_mimalloc`]).
fn from_mimalloc(ptr: *mut u8) -> bool {
    // SAFETY: mi_is_in_heap_region only looks `ptr` up in mimalloc's page map, which exists
    // once MIMALLOC is set (use_mimalloc initialises mimalloc before setting it).
    MIMALLOC.load(Ordering::Acquire) && unsafe { libmimalloc_sys::mi_is_in_heap_region(ptr as *const c_void) }
}

// SAFETY: each method forwards to the system allocator or MiMalloc, both sound allocators; a block is freed or
// resized only by the allocator that `from_mimalloc` finds owns it.
unsafe impl GlobalAlloc for Heap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `layout`, passed on unchanged.
        unsafe {
            if MIMALLOC.load(Ordering::Relaxed) {
                MiMalloc.alloc(layout)
            } else {
                crate::ALLOCATOR.alloc(layout)
            }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        unsafe {
            if MIMALLOC.load(Ordering::Relaxed) {
                MiMalloc.alloc_zeroed(layout)
            } else {
                crate::ALLOCATOR.alloc_zeroed(layout)
            }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator with `layout`; it goes back to its owner.
        unsafe {
            if from_mimalloc(ptr) {
                MiMalloc.dealloc(ptr, layout)
            } else {
                crate::ALLOCATOR.dealloc(ptr, layout)
            }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as in `dealloc`; the block stays with the allocator that owns it.
        unsafe {
            if from_mimalloc(ptr) {
                MiMalloc.realloc(ptr, layout, new_size)
            } else {
                crate::ALLOCATOR.realloc(ptr, layout, new_size)
            }
        }
    }
}

/// Sends this process's allocations to mimalloc from now on, and keeps the memory a training
/// step frees mapped for the next step unless the user set `MIMALLOC_PURGE_DELAY` (each step
/// would otherwise page-fault its tens of MB of tensors in again, zeroed: 11–16% of `laya
/// train`'s step time on two cores, docs/training.md "Throughput"). Call it before the work
/// starts; calling it again does nothing.
pub fn use_mimalloc() {
    if MIMALLOC.load(Ordering::Acquire) {
        return;
    }
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: mi_option_set stores a value in mimalloc's table of options, which mimalloc
        // reads when it next decides whether to purge; any thread may call it at any time.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    }
    // SAFETY: a block from mimalloc's own API, freed at once: it makes mimalloc set up its
    // page map before any `from_mimalloc` can look in it.
    unsafe { libmimalloc_sys::mi_free(libmimalloc_sys::mi_malloc(16)) };
    MIMALLOC.store(true, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The switch below changes the heap of the whole test process, where other tests count
    /// allocations through `crate::ALLOCATOR`; so it runs in a process of its own.
    #[test]
    fn the_switch_keeps_each_block_with_its_owner() {
        let name = "heap::tests::switching_in_a_process_of_its_own";
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", name, "--ignored", "--test-threads=1"])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && stdout.contains("1 passed"), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    }

    /// `MI_OPTION_PURGE_DELAY` names the purge delay: before `use_mimalloc` it reads mimalloc
    /// 3's default of 1,000 ms (no neighbouring option has that default), after it -1; blocks
    /// made before the switch are freed by the system allocator, later ones by mimalloc, and
    /// the system's are counted.
    #[test]
    #[ignore = "run by the_switch_keeps_each_block_with_its_owner in a process of its own"]
    fn switching_in_a_process_of_its_own() {
        let layout = Layout::from_size_align(4096, 64).unwrap();
        let user_delay = std::env::var_os("MIMALLOC_PURGE_DELAY").is_some();
        // SAFETY: a non-zero layout; each block is freed once, by `Heap`, with its layout.
        unsafe {
            let counted = crate::ALLOCATOR.stats().allocations;
            let before = Heap.alloc(layout);
            assert!(!before.is_null() && !from_mimalloc(before));
            assert!(crate::ALLOCATOR.stats().allocations > counted);
            if !user_delay {
                assert_eq!(libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY), 1000);
            }
            use_mimalloc();
            if !user_delay {
                assert_eq!(libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY), -1);
            }
            let after = Heap.alloc(layout);
            assert!(!after.is_null() && from_mimalloc(after) && !from_mimalloc(before));
            let grown = Heap.realloc(before, layout, 3 * 4096);
            assert!(!grown.is_null() && !from_mimalloc(grown));
            let zeroed = Heap.alloc_zeroed(layout);
            assert!(from_mimalloc(zeroed) && std::slice::from_raw_parts(zeroed, 4096).iter().all(|&b| b == 0));
            Heap.dealloc(grown, Layout::from_size_align(3 * 4096, 64).unwrap());
            Heap.dealloc(after, layout);
            Heap.dealloc(zeroed, layout);
        }
    }
}
