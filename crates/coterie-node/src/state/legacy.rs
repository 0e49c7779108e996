//! The earlier single-file format, read once to migrate it: a node of this
//! version that finds `{cluster}-node{id}.state` and no snapshot reads the
//! record there, writes it as its first snapshot and removes the old file.
//!
//! That file held the whole record, rewritten on every change, in two
//! slots of `S` bytes each (`S` a power of two, at least 4096), written in
//! turn. A slot holds, little-endian: the generation (`u64`, raised by
//! every write), the record's length `n` (`u32`), a CRC-32 of those twelve
//! bytes and the record, then the record. The newest slot whose checksum
//! holds is the record. A file older still is a 4-byte length, then the
//! record.

use std::io;

/// A slot's header: generation, length, checksum.
const HEADER: usize = 16;
/// The smallest slot, and what every slot size is a multiple of.
const MIN_SLOT: u64 = 4096;

/// The record a file of the earlier format holds: the newest slot whose
/// checksum holds, or the older length-prefixed record. A file of zeros
/// holds nothing; a file in slots with no valid record, or in the older
/// format too short for its own length prefix, is an error.
pub fn parse(bytes: &[u8]) -> io::Result<Option<Vec<u8>>> {
    if bytes.iter().all(|&b| b == 0) {
        return Ok(None); // created, never written
    }
    if let Some(slot) = slot_size(bytes.len()) {
        return match newest(bytes, slot) {
            Some(record) => Ok(Some(record.to_vec())),
            None => Err(super::invalid("neither slot holds a valid record")),
        };
    }
    // A length, then the record (then, perhaps, the tail of a longer
    // record it overwrote in place).
    let truncated = || super::invalid("truncated record");
    let len = bytes.get(..4).ok_or_else(truncated)?;
    let len = u32::from_le_bytes(len.try_into().expect("four bytes")) as usize;
    let end = len.checked_add(4).ok_or_else(truncated)?;
    let record = bytes.get(4..end).ok_or_else(truncated)?;
    Ok(Some(record.to_vec()))
}

/// A whole file of the earlier format that holds `record` (generation 1,
/// first slot): for the migration's tests and the fuzzer's seeds.
pub fn image(record: &[u8]) -> Vec<u8> {
    let len = u32::try_from(record.len()).unwrap_or(u32::MAX);
    let mut slot = Vec::with_capacity(HEADER + record.len());
    slot.extend_from_slice(&1u64.to_le_bytes());
    slot.extend_from_slice(&len.to_le_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&slot);
    crc.update(record);
    slot.extend_from_slice(&crc.finalize().to_le_bytes());
    slot.extend_from_slice(record);
    let size = (slot.len() as u64).next_power_of_two().max(MIN_SLOT) as usize;
    let mut file = vec![0; 2 * size];
    file[..slot.len()].copy_from_slice(&slot);
    file
}

/// The size of a slot, if a file of `len` bytes is two of them.
fn slot_size(len: usize) -> Option<u64> {
    let len = len as u64;
    (len >= 2 * MIN_SLOT && len.is_multiple_of(2 * MIN_SLOT)).then_some(len / 2)
}

/// The generation and record in `slot`, if its checksum holds.
fn decode(slot: &[u8]) -> Option<(u64, &[u8])> {
    let generation = u64::from_le_bytes(slot.get(0..8)?.try_into().ok()?);
    let len = u32::from_le_bytes(slot.get(8..12)?.try_into().ok()?) as usize;
    let sum = u32::from_le_bytes(slot.get(12..16)?.try_into().ok()?);
    let record = slot.get(HEADER..HEADER.checked_add(len)?)?;
    let mut crc = crc32fast::Hasher::new();
    crc.update(&slot[..12]);
    crc.update(record);
    (generation > 0 && crc.finalize() == sum).then_some((generation, record))
}

/// The record of the valid slot with the higher generation.
fn newest(bytes: &[u8], slot: u64) -> Option<&[u8]> {
    let (first, second) = bytes.split_at(slot as usize);
    match (decode(first), decode(second)) {
        (Some(a), Some(b)) => Some(if b.0 > a.0 { b.1 } else { a.1 }),
        (a, b) => a.or(b).map(|(_, r)| r),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_earlier_layouts_read_and_damage_is_an_error() {
        assert_eq!(parse(&image(b"record")).unwrap().as_deref(), Some(&b"record"[..]));
        assert_eq!(
            parse(&[3, 0, 0, 0, b'a', b'b', b'c', b'z']).unwrap().as_deref(),
            Some(&b"abc"[..])
        );
        assert_eq!(parse(&[0; 8192]).unwrap(), None);
        assert!(parse(&[9, 0, 0, 0, 1, 2]).is_err(), "shorter than its length");
        let mut torn = image(b"record");
        torn[HEADER] ^= 1;
        assert!(parse(&torn).is_err(), "no slot valid");
        // The second slot, newer, wins; damaged, the first is read.
        let mut two = image(b"old");
        let newer = image(b"new");
        let mut slot = newer[..MIN_SLOT as usize].to_vec();
        slot[0] = 2;
        let mut crc = crc32fast::Hasher::new();
        crc.update(&slot[..12]);
        crc.update(b"new");
        slot[12..16].copy_from_slice(&crc.finalize().to_le_bytes());
        two[MIN_SLOT as usize..].copy_from_slice(&slot);
        assert_eq!(parse(&two).unwrap().as_deref(), Some(&b"new"[..]));
        two[MIN_SLOT as usize + HEADER] ^= 1;
        assert_eq!(parse(&two).unwrap().as_deref(), Some(&b"old"[..]));
    }
}
