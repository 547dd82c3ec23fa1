//! Cutting a list of byte ranges into aligned slot-sized reads.

use crate::file::Alignment;

/// A byte range of a file to stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    /// The first byte's file offset.
    pub offset: u64,
    /// The number of bytes.
    pub len: u64,
}

/// Part of a range that lies in one slot read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Piece {
    pub(crate) range: usize,
    pub(crate) offset_in_range: u64,
    pub(crate) len: u64,
    pub(crate) offset_in_slot: usize,
}

/// One aligned read into a slot: `[start, start + len)`, holding `pieces`, whose bytes end at
/// `needed_end`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Window {
    pub(crate) start: u64,
    pub(crate) len: u64,
    pub(crate) needed_end: u64,
    pub(crate) pieces: Vec<Piece>,
}

/// Plans the slot reads for `ranges`, in file order: each window starts aligned, is at most
/// `slot_size` bytes (a multiple of the alignment) and ends at the aligned end of the last byte
/// it needs. A range longer than what is left of a window continues in the next one.
pub(crate) fn plan(ranges: &[ByteRange], slot_size: u64, align: &Alignment) -> Vec<Window> {
    let mut order: Vec<usize> = (0..ranges.len()).filter(|&i| ranges[i].len > 0).collect();
    order.sort_by_key(|&i| (ranges[i].offset, i));
    let mut windows = Vec::new();
    let mut cur: Option<Window> = None;
    for idx in order {
        let r = ranges[idx];
        let end = r.offset + r.len;
        let mut p = r.offset;
        while p < end {
            let fits = cur
                .as_ref()
                .is_some_and(|w| p >= w.start && p < w.start + slot_size);
            if !fits {
                if let Some(w) = cur.take() {
                    windows.push(finish(w, align));
                }
                cur = Some(Window {
                    start: align.down(p),
                    len: 0,
                    needed_end: p,
                    pieces: Vec::new(),
                });
            }
            let Some(w) = cur.as_mut() else { break };
            let piece_end = end.min(w.start + slot_size);
            w.pieces.push(Piece {
                range: idx,
                offset_in_range: p - r.offset,
                len: piece_end - p,
                offset_in_slot: (p - w.start) as usize,
            });
            w.needed_end = w.needed_end.max(piece_end);
            p = piece_end;
        }
    }
    if let Some(w) = cur {
        windows.push(finish(w, align));
    }
    windows
}

fn finish(mut w: Window, align: &Alignment) -> Window {
    w.len = align.up(w.needed_end) - w.start;
    w
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::file::AlignmentSource;
    use proptest::prelude::*;

    fn align(n: usize) -> Alignment {
        Alignment {
            memory: n,
            offset: n,
            source: AlignmentSource::Default,
        }
    }

    proptest! {
        #[test]
        fn every_range_byte_is_planned_once_within_aligned_slots(
            ranges in proptest::collection::vec((0u64..100_000, 0u64..20_000), 0..12),
            slots in 1u64..6,
        ) {
            let a = align(4096);
            let slot = slots * 4096;
            let ranges: Vec<ByteRange> =
                ranges.into_iter().map(|(offset, len)| ByteRange { offset, len }).collect();
            let windows = plan(&ranges, slot, &a);
            let mut covered = vec![0u64; ranges.len()];
            for w in &windows {
                prop_assert_eq!(w.start % 4096, 0, "window starts aligned");
                prop_assert_eq!(w.len % 4096, 0, "window length aligned");
                prop_assert!(w.len <= slot, "window fits its slot");
                for p in &w.pieces {
                    let r = ranges[p.range];
                    prop_assert_eq!(w.start + p.offset_in_slot as u64, r.offset + p.offset_in_range);
                    prop_assert!(p.offset_in_slot as u64 + p.len <= w.len, "piece inside the window");
                    prop_assert_eq!(p.offset_in_range, covered[p.range], "pieces of a range in order");
                    covered[p.range] += p.len;
                }
            }
            for (i, r) in ranges.iter().enumerate() {
                prop_assert_eq!(covered[i], r.len, "range {} fully covered", i);
            }
        }
    }
}
