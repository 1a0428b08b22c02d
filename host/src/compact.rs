//! mend's compact binary encoding: where JSON costs more than the work it describes, the same
//! values as bytes with no keys, no escapes and no decimal numbers. Two things use it: an
//! intent's plan as Postgres stores it ([`crate::intent::compact`]) and the compact bodies of
//! the HTTP server's stage and begin (the book's HTTP API page has their layouts).
//!
//! **Values.** A number (a count, a length, a `u64`) is an unsigned LEB128 varint in its fewest
//! bytes; a string is its byte length then its UTF-8 bytes; a list is its length then its items;
//! an option is one byte, 0 (none) or 1 (some) followed by the value; a byte is itself. A
//! checkpoint delta is `source string, partitions list of (partition string, from_position
//! option of number, to_position number)`.
//!
//! **One encoding per value.** The [`Writer`] writes numbers in their fewest bytes and the
//! [`Reader`] refuses any other form, so equal values have equal bytes. Reading checks every
//! length against the bytes left before it allocates: damaged or hostile bytes are refused
//! with where and why, never read past their end or allowed to allocate more than their own
//! size.

use crate::model::{CheckpointDelta, PartitionDelta};

/// What is wrong with bytes a [`Reader`] refused, in words, with the byte it happened at.
pub type Decoded<T> = std::result::Result<T, String>;

/// Writes values into a byte buffer.
#[derive(Debug, Default)]
pub struct Writer(Vec<u8>);

impl Writer {
    /// An empty buffer with room for `capacity` bytes.
    pub fn with_capacity(capacity: usize) -> Writer {
        Writer(Vec::with_capacity(capacity))
    }

    /// The bytes written.
    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }

    /// One byte, as is: a tag.
    pub fn byte(&mut self, byte: u8) {
        self.0.push(byte);
    }

    /// A number, as a varint in its fewest bytes.
    pub fn number(&mut self, mut value: u64) {
        loop {
            let low = (value & 0x7f) as u8;
            value >>= 7;
            if value == 0 {
                self.0.push(low);
                return;
            }
            self.0.push(low | 0x80);
        }
    }

    /// A string: its length, then its bytes.
    pub fn string(&mut self, text: &str) {
        self.number(text.len() as u64);
        self.0.extend_from_slice(text.as_bytes());
    }

    /// A list of strings.
    pub fn strings(&mut self, texts: &[String]) {
        self.list(texts, |out, text| out.string(text));
    }

    /// A list: its length, then each item as `each` writes it.
    pub fn list<T>(&mut self, items: &[T], mut each: impl FnMut(&mut Self, &T)) {
        self.number(items.len() as u64);
        for item in items {
            each(self, item);
        }
    }

    /// An option: 0, or 1 and the value as `some` writes it.
    pub fn option<T>(&mut self, value: Option<&T>, some: impl FnOnce(&mut Self, &T)) {
        match value {
            None => self.0.push(0),
            Some(value) => {
                self.0.push(1);
                some(self, value);
            }
        }
    }

    /// A checkpoint delta (the layout is in the module's doc).
    pub fn checkpoint_delta(&mut self, delta: &CheckpointDelta) {
        self.string(&delta.source);
        self.list(&delta.partitions, |out, partition| {
            out.string(&partition.partition);
            out.option(partition.from_position.as_ref(), |out, from| {
                out.number(*from)
            });
            out.number(partition.to_position);
        });
    }
}

/// Reads values from bytes, in the order they were written.
#[derive(Debug)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the first of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, at: 0 }
    }

    /// Refuses bytes left after the last value read: nothing may follow.
    pub fn finish(self) -> Decoded<()> {
        if self.at == self.bytes.len() {
            Ok(())
        } else {
            Err(format!(
                "bytes after its end: {}",
                self.bytes.len() - self.at
            ))
        }
    }

    /// The offset of the next byte to read, for messages.
    pub fn at(&self) -> usize {
        self.at
    }

    /// One byte.
    pub fn byte(&mut self) -> Decoded<u8> {
        let byte = *self
            .bytes
            .get(self.at)
            .ok_or_else(|| format!("it ends at byte {}, in the middle of a value", self.at))?;
        self.at += 1;
        Ok(byte)
    }

    /// A number, refused unless in its fewest bytes and within 64 bits.
    pub fn number(&mut self) -> Decoded<u64> {
        let started = self.at;
        let mut value: u64 = 0;
        for shift in (0..64).step_by(7) {
            let byte = self.byte()?;
            let bits = u64::from(byte & 0x7f);
            // The tenth byte holds the last bit of a u64; anything above it overflows.
            if shift == 63 && bits > 1 {
                break;
            }
            value |= bits << shift;
            if byte & 0x80 == 0 {
                // A last byte of 0 after others adds nothing: the writer never ends so, and
                // refusing it keeps one encoding per value.
                if byte == 0 && shift > 0 {
                    return Err(format!(
                        "the number at byte {started} has a needless last byte"
                    ));
                }
                return Ok(value);
            }
        }
        Err(format!("the number at byte {started} does not fit 64 bits"))
    }

    /// A length or a count, which can be at most the bytes left: every item and every byte
    /// of a string takes at least one.
    pub fn count(&mut self) -> Decoded<usize> {
        let started = self.at;
        let count = self.number()?;
        let left = self.bytes.len() - self.at;
        match usize::try_from(count) {
            Ok(count) if count <= left => Ok(count),
            _ => Err(format!(
                "the length {count} at byte {started} is more than the {left} bytes left"
            )),
        }
    }

    /// A string, refused unless UTF-8.
    pub fn string(&mut self) -> Decoded<String> {
        let length = self.count()?;
        let started = self.at;
        let bytes = &self.bytes[started..started + length];
        self.at += length;
        String::from_utf8(bytes.to_vec())
            .map_err(|_| format!("the string at byte {started} is not UTF-8"))
    }

    /// A list of strings.
    pub fn strings(&mut self) -> Decoded<Vec<String>> {
        self.list(Self::string)
    }

    /// A list, each item as `each` reads it.
    pub fn list<T>(&mut self, mut each: impl FnMut(&mut Self) -> Decoded<T>) -> Decoded<Vec<T>> {
        let count = self.count()?;
        let mut items = Vec::with_capacity(count);
        for _ in 0..count {
            items.push(each(self)?);
        }
        Ok(items)
    }

    /// An option, its value as `some` reads it.
    pub fn option<T>(&mut self, some: impl FnOnce(&mut Self) -> Decoded<T>) -> Decoded<Option<T>> {
        let started = self.at;
        match self.byte()? {
            0 => Ok(None),
            1 => some(self).map(Some),
            tag => Err(format!(
                "the option at byte {started} is tagged {tag}, neither 0 nor 1"
            )),
        }
    }

    /// A checkpoint delta (the layout is in the module's doc).
    pub fn checkpoint_delta(&mut self) -> Decoded<CheckpointDelta> {
        Ok(CheckpointDelta {
            source: self.string()?,
            partitions: self.list(|input| {
                Ok(PartitionDelta {
                    partition: input.string()?,
                    from_position: input.option(Reader::number)?,
                    to_position: input.number()?,
                })
            })?,
        })
    }
}
