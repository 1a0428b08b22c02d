//! The component's allocator: a bump allocator, because an instance of a policy lives for one
//! decision. The host makes a fresh instance for every call and throws it away when the call
//! answers, so memory handed back inside a call would only be reused by that same call; what a
//! general-purpose allocator buys (reuse, fragmentation control) is worth less here than what it
//! costs (dlmalloc's bookkeeping on every allocation, and a `memory.grow` for its first arena
//! in every decision, which the host pays for with an `mprotect` when the memory grows and
//! another when its sandbox is reset).
//!
//! Allocations go upwards from `__heap_base`. Freeing or resizing the newest allocation is done
//! in place (a `Vec` growing while nothing else is allocated, a temporary dropped at once);
//! any other free is a no-op, so a decision's peak memory is everything it ever allocated.
//! The component's initial memory leaves room for a small decision's heap
//! ([`crate::memory_layout`], linked by the policy's `build.rs`), so it never grows; a larger one grows the memory in steps
//! of at least [`GROW_PAGES`], up to the host's memory limit, past which an allocation fails
//! and the call traps with that limit named.
//!
//! It is the `#[global_allocator]` of every policy that links this crate, and `cabi_realloc`,
//! through which the host allocates a decision's input inside the component, allocates with
//! it too.

// An allocator is raw pointers by nature.
#![allow(unsafe_code)]

use core::alloc::{GlobalAlloc, Layout};
use core::arch::wasm32;
use core::sync::atomic::{AtomicUsize, Ordering};

const PAGE_BYTES: usize = 65_536;

/// The smallest growth of the memory, in pages (1 MiB): fewer, larger growths.
const GROW_PAGES: usize = 16;

#[global_allocator]
static ALLOCATOR: BumpAllocator = BumpAllocator::new();

/// The bump pointer, the end of the memory, and the newest allocation. A component instance
/// runs one thread, so relaxed atomics are plain loads and stores; they only make the statics
/// shareable without unsafe code.
pub struct BumpAllocator {
    next: AtomicUsize,
    end: AtomicUsize,
    newest: AtomicUsize,
}

impl BumpAllocator {
    /// An allocator that starts at `__heap_base` on its first allocation.
    pub const fn new() -> Self {
        Self {
            next: AtomicUsize::new(0),
            end: AtomicUsize::new(0),
            newest: AtomicUsize::new(0),
        }
    }

    /// The first free byte; the heap's start before the first allocation.
    fn next(&self) -> usize {
        match self.next.load(Ordering::Relaxed) {
            0 => {
                unsafe extern "C" {
                    static __heap_base: u8;
                }
                let start = core::ptr::addr_of!(__heap_base) as usize;
                self.end
                    .store(wasm32::memory_size(0) * PAGE_BYTES, Ordering::Relaxed);
                start
            }
            next => next,
        }
    }

    /// Makes the memory reach at least `end`; false if the host refuses the growth.
    fn reach(&self, end: usize) -> bool {
        let current = self.end.load(Ordering::Relaxed);
        if end <= current {
            return true;
        }
        let needed = (end - current).div_ceil(PAGE_BYTES);
        // A big step first; if the limit refuses it, exactly what is needed.
        if wasm32::memory_grow(0, needed.max(GROW_PAGES)) == usize::MAX
            && wasm32::memory_grow(0, needed) == usize::MAX
        {
            return false;
        }
        self.end
            .store(wasm32::memory_size(0) * PAGE_BYTES, Ordering::Relaxed);
        true
    }
}

impl Default for BumpAllocator {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: every pointer returned is aligned as asked, inside the memory, and disjoint from
// every other live allocation: the bump pointer only moves back over the newest allocation
// when that one is freed or shrunk.
unsafe impl GlobalAlloc for BumpAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let start = self.next().next_multiple_of(layout.align());
        let Some(end) = start.checked_add(layout.size()) else {
            return core::ptr::null_mut();
        };
        if !self.reach(end) {
            return core::ptr::null_mut();
        }
        self.next.store(end, Ordering::Relaxed);
        self.newest.store(start, Ordering::Relaxed);
        start as *mut u8
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let start = ptr as usize;
        if start == self.newest.load(Ordering::Relaxed)
            && start + layout.size() == self.next.load(Ordering::Relaxed)
        {
            self.next.store(start, Ordering::Relaxed);
            // The allocation before it is not known: nothing more can be rewound.
            self.newest.store(0, Ordering::Relaxed);
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let start = ptr as usize;
        if start == self.newest.load(Ordering::Relaxed)
            && start + layout.size() == self.next.load(Ordering::Relaxed)
        {
            let Some(end) = start.checked_add(new_size) else {
                return core::ptr::null_mut();
            };
            if !self.reach(end) {
                return core::ptr::null_mut();
            }
            self.next.store(end, Ordering::Relaxed);
            return ptr;
        }
        // SAFETY: `layout` with `new_size` is a valid layout, per realloc's contract.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: as for `alloc`.
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both regions are live, disjoint and at least min(old, new) bytes long.
            unsafe {
                core::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
            }
        }
        new
    }
}

/// The canonical ABI's allocator entry point. On wasm32-wasip2 the standard library would
/// export it; a policy is `no_std` there, so this crate exports its own, backed by the
/// allocator above.
#[unsafe(no_mangle)]
unsafe extern "C" fn cabi_realloc(
    old_ptr: *mut u8,
    old_len: usize,
    align: usize,
    new_len: usize,
) -> *mut u8 {
    use alloc::alloc::{alloc, realloc};
    if new_len == 0 {
        return align as *mut u8;
    }
    // SAFETY: the canonical ABI passes a power-of-two alignment and, for a reallocation, the
    // pointer and size of an allocation it made through this same function.
    let ptr = unsafe {
        if old_len == 0 {
            alloc(Layout::from_size_align_unchecked(new_len, align))
        } else {
            realloc(
                old_ptr,
                Layout::from_size_align_unchecked(old_len, align),
                new_len,
            )
        }
    };
    if ptr.is_null() {
        // Out of memory: trap, and let the host report it for this one decision.
        wasm32::unreachable()
    }
    ptr
}
