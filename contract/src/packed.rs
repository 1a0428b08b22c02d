//! The packed form of a batch of split ids, as the contract's `split-id-batch` carries them
//! (ABI 1.4): every id's UTF-8 bytes one after another in one buffer, and where each ends.
//! A batch of 10,000 ids crosses the boundary as two copies instead of 10,000 allocations on
//! each side.

use alloc::vec::Vec;

/// Split ids packed into one buffer: id `i` is `bytes[ends[i - 1]..ends[i]]`, the first one
/// starting at 0.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PackedSplitIds {
    pub bytes: Vec<u8>,
    pub ends: Vec<u32>,
}

/// Why a packed batch cannot be read: its ends are not a rising sequence within the buffer,
/// or an id is not whole UTF-8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MalformedBatch {
    /// The index of the first id that cannot be read.
    pub index: usize,
}

/// Why ids cannot be packed: together they exceed the 4 GiB a `u32` offset reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchTooLarge;

impl PackedSplitIds {
    /// Packs `ids`, in order.
    pub fn pack<'a>(ids: impl IntoIterator<Item = &'a str>) -> Result<Self, BatchTooLarge> {
        let ids = ids.into_iter();
        let mut packed = Self {
            bytes: Vec::new(),
            ends: Vec::with_capacity(ids.size_hint().0),
        };
        for id in ids {
            packed.bytes.extend_from_slice(id.as_bytes());
            packed
                .ends
                .push(u32::try_from(packed.bytes.len()).map_err(|_| BatchTooLarge)?);
        }
        Ok(packed)
    }

    /// The ids, borrowed from the buffer, if every one is well formed.
    pub fn unpack(&self) -> Result<Vec<&str>, MalformedBatch> {
        unpack(&self.bytes, &self.ends)
    }
}

/// The ids packed in `bytes` at `ends`, borrowed, if every one is well formed: the buffer is
/// checked as UTF-8 once, and each id must start and end on a character boundary.
pub fn unpack<'a>(bytes: &'a [u8], ends: &[u32]) -> Result<Vec<&'a str>, MalformedBatch> {
    let text = match core::str::from_utf8(bytes) {
        Ok(text) => text,
        // The first id reaching the bad byte is the one that cannot be read.
        Err(error) => {
            let index = ends
                .iter()
                .position(|&end| end as usize > error.valid_up_to())
                .unwrap_or(ends.len());
            return Err(MalformedBatch { index });
        }
    };
    let mut ids = Vec::with_capacity(ends.len());
    let mut start = 0usize;
    for (index, &end) in ends.iter().enumerate() {
        let end = end as usize;
        let id = (start <= end)
            .then(|| text.get(start..end))
            .flatten()
            .ok_or(MalformedBatch { index })?;
        ids.push(id);
        start = end;
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_come_back_as_they_were_packed() {
        let ids = ["a", "", "splité-2", "a"];
        let packed = PackedSplitIds::pack(ids).unwrap();
        assert_eq!(packed.ends, [1, 1, 10, 11]);
        assert_eq!(packed.unpack().unwrap(), ids);
        assert_eq!(PackedSplitIds::pack([]).unwrap().unpack().unwrap().len(), 0);
    }

    #[test]
    fn malformed_batches_name_the_first_unreadable_id() {
        let falling = PackedSplitIds {
            bytes: b"abc".to_vec(),
            ends: vec![2, 1],
        };
        assert_eq!(falling.unpack(), Err(MalformedBatch { index: 1 }));
        let past_the_end = PackedSplitIds {
            bytes: b"abc".to_vec(),
            ends: vec![1, 4],
        };
        assert_eq!(past_the_end.unpack(), Err(MalformedBatch { index: 1 }));
        // "é" is two bytes: an end between them splits a character.
        let split_char = PackedSplitIds {
            bytes: "aé".as_bytes().to_vec(),
            ends: vec![2, 3],
        };
        assert_eq!(split_char.unpack(), Err(MalformedBatch { index: 0 }));
        let not_utf8 = PackedSplitIds {
            bytes: vec![b'a', 0xff, b'b'],
            ends: vec![1, 2, 3],
        };
        assert_eq!(not_utf8.unpack(), Err(MalformedBatch { index: 1 }));
    }
}
