//! The L3-miss sampler's throttling: reads the kernel's PERF_RECORD_THROTTLE / UNTHROTTLE records
//! from a small ring buffer per sampling fd and turns them into times stopped and CPU time lost.
//!
//! The kernel stops a sampling event that overflows more than `perf_event_max_sample_rate / HZ`
//! times in one tick until a later tick. A stopped event counts nothing, so the sample count
//! cannot show the gap; the kernel reports it only as records in the event's ring buffer. The
//! attached program returns 0, so no sample is written there (l3miss keeps PEBS from batching
//! samples past the program): the ring carries just these records, and PERF_RECORD_LOST if it
//! ever overflows.
use std::mem::offset_of;
use std::sync::atomic::{AtomicU64, Ordering};

use perf_event_open_sys::bindings::{
    perf_event_mmap_page, PERF_RECORD_LOST, PERF_RECORD_THROTTLE, PERF_RECORD_UNTHROTTLE,
};

/// Data pages per CPU (a power of two, as the kernel requires): 64 KiB, 2048 records, where a
/// sampler throttled at every tick writes two per tick: a second's worth at HZ = 1000 between
/// reads (`record` reads every interval, `serve` every second). Past that, records are lost
/// and counted.
pub const RING_DATA_PAGES: usize = 16;

pub use crate::snapshot::SamplerThrottle as ThrottleTotals;

/// One CPU's stop in progress.
#[derive(Debug, Default)]
struct CpuState {
    stopped_since: Option<u64>,
}

/// The records of one ring, as the kernel lays it out: the control page (`perf_event_mmap_page`)
/// then `data_size` bytes of records, written at `data_head`, consumed up to `data_tail`.
pub struct ThrottleRing<B: AsMut<[u8]>> {
    buf: B,
    cpu: CpuState,
}

impl<B: AsMut<[u8]>> ThrottleRing<B> {
    pub fn new(buf: B) -> Self {
        ThrottleRing {
            buf,
            cpu: CpuState::default(),
        }
    }

    /// Consume every complete record; `now_ns` (the records' clock, CLOCK_MONOTONIC) closes
    /// an open stop's share up to this read, the rest goes to later reads.
    pub fn drain(&mut self, now_ns: u64, t: &mut ThrottleTotals) {
        let page_size = page_size();
        let buf = self.buf.as_mut();
        if buf.len() < std::mem::size_of::<perf_event_mmap_page>() {
            return;
        }
        let head_at = offset_of!(perf_event_mmap_page, data_head);
        let tail_at = offset_of!(perf_event_mmap_page, data_tail);
        let (mut off, mut size) = (
            read_u64(buf, offset_of!(perf_event_mmap_page, data_offset)),
            read_u64(buf, offset_of!(perf_event_mmap_page, data_size)),
        );
        if size == 0 {
            // Kernels before 4.1 leave these 0: data starts at the second page.
            off = page_size as u64;
            size = (buf.len() - page_size.min(buf.len())) as u64;
        }
        let (off, size) = (off as usize, size as usize);
        if size == 0 || off.checked_add(size).is_none_or(|end| end > buf.len()) {
            return;
        }
        // SAFETY: the control page is 8-byte aligned (page-aligned mapping or a Vec<u64>-backed
        // test buffer) and data_head/data_tail are u64 fields at 8-byte offsets in it; the kernel
        // writes data_head and reads data_tail concurrently, hence atomics.
        let head = unsafe { &*(buf.as_mut_ptr().add(head_at) as *const AtomicU64) }
            .load(Ordering::Acquire);
        let tail_cell = unsafe { &*(buf.as_mut_ptr().add(tail_at) as *const AtomicU64) };
        let mut tail = tail_cell.load(Ordering::Relaxed);
        let data = &buf[off..off + size];
        while head.saturating_sub(tail) >= 8 {
            let header = read_ring(data, tail, 8);
            let kind = u32::from_ne_bytes(header[0..4].try_into().unwrap_or_default());
            let len = u16::from_ne_bytes(header[6..8].try_into().unwrap_or_default()) as u64;
            if len < 8 || head - tail < len {
                // A record never has less than its header; a short one is not complete yet
                // (or the ring is corrupt): leave it.
                break;
            }
            let body = read_ring(data, tail + 8, (len - 8).min(32) as usize);
            let word = |i: usize| {
                body.get(i * 8..i * 8 + 8)
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_ne_bytes)
            };
            match kind {
                PERF_RECORD_THROTTLE => {
                    t.throttles += 1;
                    // Stops and restarts alternate; a stop while stopped means the restart
                    // between was lost: start over rather than count the gap as stopped.
                    self.cpu.stopped_since = word(0);
                }
                PERF_RECORD_UNTHROTTLE => {
                    if let (Some(at), Some(since)) = (word(0), self.cpu.stopped_since.take()) {
                        t.throttled_ns += at.saturating_sub(since);
                    }
                }
                // { id, lost }: whichever stop or restart went missing, the open stop (if
                // any) can no longer be timed.
                PERF_RECORD_LOST => {
                    t.records_lost += word(1).unwrap_or(0);
                    self.cpu.stopped_since = None;
                }
                _ => {}
            }
            tail += len;
        }
        tail_cell.store(tail, Ordering::Release);
        if let Some(since) = self.cpu.stopped_since.as_mut() {
            t.throttled_ns += now_ns.saturating_sub(*since);
            *since = now_ns.max(*since);
        }
    }
}

impl<B: AsMut<[u8]>> ThrottleRing<B> {
    /// The sampler was disabled at `now_ns` (attribution windows): a stop in progress ends
    /// there. The kernel writes the matching restart only when the event is enabled again,
    /// and then at once, so it finds no stop open and adds nothing.
    pub fn disabled(&mut self, now_ns: u64, t: &mut ThrottleTotals) {
        self.drain(now_ns, t);
        self.cpu.stopped_since = None;
    }
}

fn read_u64(buf: &[u8], at: usize) -> u64 {
    buf.get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_ne_bytes)
        .unwrap_or(0)
}

/// `n` bytes from ring position `pos`, wrapping at the end of the data area.
fn read_ring(data: &[u8], pos: u64, n: usize) -> Vec<u8> {
    let len = data.len() as u64;
    (0..n as u64)
        .map(|i| data[((pos + i) % len) as usize])
        .collect()
}

pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as usize
    } else {
        4096
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 4096;
    const DATA: usize = 256;

    /// A ring laid out as the kernel's: control page, then DATA bytes of records. Backed by
    /// u64s for the control page's alignment.
    struct FakeRing(Vec<u64>);
    impl AsMut<[u8]> for FakeRing {
        fn as_mut(&mut self) -> &mut [u8] {
            // SAFETY: a Vec<u64>'s storage viewed as bytes, same length in bytes.
            unsafe {
                std::slice::from_raw_parts_mut(self.0.as_mut_ptr() as *mut u8, self.0.len() * 8)
            }
        }
    }

    fn ring() -> ThrottleRing<FakeRing> {
        let mut r = ThrottleRing::new(FakeRing(vec![0u64; (PAGE + DATA) / 8]));
        let b = r.buf.as_mut();
        b[offset_of!(perf_event_mmap_page, data_offset)..][..8]
            .copy_from_slice(&(PAGE as u64).to_ne_bytes());
        b[offset_of!(perf_event_mmap_page, data_size)..][..8]
            .copy_from_slice(&(DATA as u64).to_ne_bytes());
        r
    }

    /// Write records as the kernel does (struct perf_event_header { u32 type; u16 misc; u16
    /// size; } then the body), wrapping, and advance data_head.
    fn push(r: &mut ThrottleRing<FakeRing>, kind: u32, words: &[u64]) {
        let b = r.buf.as_mut();
        let head = read_u64(b, offset_of!(perf_event_mmap_page, data_head));
        let mut rec = Vec::new();
        rec.extend_from_slice(&kind.to_ne_bytes());
        rec.extend_from_slice(&0u16.to_ne_bytes());
        rec.extend_from_slice(&((8 + 8 * words.len()) as u16).to_ne_bytes());
        for w in words {
            rec.extend_from_slice(&w.to_ne_bytes());
        }
        for (i, byte) in rec.iter().enumerate() {
            b[PAGE + ((head as usize + i) % DATA)] = *byte;
        }
        let head = head + rec.len() as u64;
        b[offset_of!(perf_event_mmap_page, data_head)..][..8].copy_from_slice(&head.to_ne_bytes());
    }

    fn throttle(r: &mut ThrottleRing<FakeRing>, at: u64) {
        push(r, PERF_RECORD_THROTTLE, &[at, 7, 7]);
    }
    fn unthrottle(r: &mut ThrottleRing<FakeRing>, at: u64) {
        push(r, PERF_RECORD_UNTHROTTLE, &[at, 7, 7]);
    }

    #[test]
    fn stops_are_counted_and_timed() {
        let mut r = ring();
        let mut t = ThrottleTotals::default();
        throttle(&mut r, 1_000);
        unthrottle(&mut r, 5_000);
        throttle(&mut r, 9_000);
        unthrottle(&mut r, 10_500);
        r.drain(20_000, &mut t);
        assert_eq!(
            t,
            ThrottleTotals {
                throttles: 2,
                throttled_ns: 4_000 + 1_500,
                records_lost: 0
            }
        );
        // Nothing new: nothing added.
        r.drain(30_000, &mut t);
        assert_eq!(t.throttled_ns, 5_500);
    }

    #[test]
    fn an_open_stop_is_charged_up_to_each_read() {
        let mut r = ring();
        let mut t = ThrottleTotals::default();
        throttle(&mut r, 1_000);
        r.drain(3_000, &mut t);
        assert_eq!((t.throttles, t.throttled_ns), (1, 2_000));
        unthrottle(&mut r, 4_000);
        r.drain(9_000, &mut t);
        assert_eq!((t.throttles, t.throttled_ns), (1, 3_000));
    }

    #[test]
    fn records_that_wrap_the_ring_end_are_read_whole() {
        let mut r = ring();
        let mut t = ThrottleTotals::default();
        // 32-byte records in a 256-byte ring: after 20 of them the writes have wrapped twice;
        // consume as we go, as the kernel needs room.
        for i in 0..10u64 {
            throttle(&mut r, 100 * i);
            unthrottle(&mut r, 100 * i + 40);
            r.drain(100 * i + 50, &mut t);
        }
        assert_eq!((t.throttles, t.throttled_ns), (10, 400));
        // 24-byte LOST records shift later records off the 32-byte grid: five of them (head
        // 640 + 120 = 760, at 248 in the ring) leave the next record across the end.
        for _ in 0..5 {
            push(&mut r, PERF_RECORD_LOST, &[7, 3]);
        }
        assert_eq!(
            read_u64(r.buf.as_mut(), offset_of!(perf_event_mmap_page, data_head)) % DATA as u64,
            248
        );
        throttle(&mut r, 2_000);
        unthrottle(&mut r, 2_070);
        r.drain(2_100, &mut t);
        assert_eq!(
            t,
            ThrottleTotals {
                throttles: 11,
                throttled_ns: 470,
                records_lost: 15
            }
        );
    }

    #[test]
    fn a_stop_ends_when_the_sampler_is_disabled() {
        let mut r = ring();
        let mut t = ThrottleTotals::default();
        // Stopped at 1_000, the sampler disabled at 4_000 (a window closed); the kernel logs
        // the restart when it is enabled again, at 90_000: the gap between is not a stop.
        throttle(&mut r, 1_000);
        r.disabled(4_000, &mut t);
        unthrottle(&mut r, 90_000);
        r.drain(95_000, &mut t);
        assert_eq!(
            t,
            ThrottleTotals {
                throttles: 1,
                throttled_ns: 3_000,
                records_lost: 0
            }
        );
    }

    #[test]
    fn a_lost_restart_does_not_count_the_gap_as_stopped() {
        let mut r = ring();
        let mut t = ThrottleTotals::default();
        // The restart at 2_000 went missing (no LOST record either: the stream alone shows it).
        throttle(&mut r, 1_000);
        throttle(&mut r, 50_000);
        unthrottle(&mut r, 51_000);
        // A LOST record ends any open stop: it cannot be timed.
        throttle(&mut r, 60_000);
        push(&mut r, PERF_RECORD_LOST, &[7, 1]);
        r.drain(90_000, &mut t);
        assert_eq!(
            t,
            ThrottleTotals {
                throttles: 3,
                throttled_ns: 1_000,
                records_lost: 1
            }
        );
    }

    #[test]
    fn an_incomplete_record_waits_for_the_next_read() {
        let mut r = ring();
        let mut t = ThrottleTotals::default();
        throttle(&mut r, 1_000);
        // Pretend the kernel has published only part of the record.
        b_set_head(&mut r, 16);
        r.drain(2_000, &mut t);
        assert_eq!(t, ThrottleTotals::default());
        b_set_head(&mut r, 32);
        r.drain(2_000, &mut t);
        assert_eq!((t.throttles, t.throttled_ns), (1, 1_000));
    }

    fn b_set_head(r: &mut ThrottleRing<FakeRing>, head: u64) {
        let b = r.buf.as_mut();
        b[offset_of!(perf_event_mmap_page, data_head)..][..8].copy_from_slice(&head.to_ne_bytes());
    }
}
