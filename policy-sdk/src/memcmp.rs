//! `memcmp` and `bcmp`, which a `no_std` component would otherwise take from the C library:
//! every `str` and slice comparison ends here (the sorted maps of split ids compare ids
//! sharing long prefixes). wasi-libc's version walks byte by byte, which made it the hottest
//! loop of a 1,000-split plan; this one compares eight bytes at a time and leaves a policy
//! needing nothing from the C library.

// Both take raw pointers, by their C signatures.
#![allow(unsafe_code)]

/// Compares `len` bytes: negative, zero or positive as `left` sorts before, with or after
/// `right`.
#[unsafe(no_mangle)]
unsafe extern "C" fn memcmp(left: *const u8, right: *const u8, len: usize) -> i32 {
    // SAFETY: the caller passes two readable regions of `len` bytes, per memcmp's contract.
    let (left, right) = unsafe {
        (
            core::slice::from_raw_parts(left, len),
            core::slice::from_raw_parts(right, len),
        )
    };
    let mut start = 0;
    while start + 8 <= len {
        let a = u64::from_be_bytes(left[start..start + 8].try_into().unwrap_or([0; 8]));
        let b = u64::from_be_bytes(right[start..start + 8].try_into().unwrap_or([0; 8]));
        if a != b {
            return if a < b { -1 } else { 1 };
        }
        start += 8;
    }
    for (a, b) in left[start..].iter().zip(&right[start..]) {
        if a != b {
            return i32::from(*a) - i32::from(*b);
        }
    }
    0
}

/// Equality-only comparison; LLVM emits it for `==` on slices.
#[unsafe(no_mangle)]
unsafe extern "C" fn bcmp(left: *const u8, right: *const u8, len: usize) -> i32 {
    // SAFETY: as for memcmp.
    unsafe { memcmp(left, right, len) }
}
