//! Which driver hand-up tracepoints a detail window attaches: those that began lives of the
//! device's frames lately, not all five.
//!
//! A driver hands its frames up through one or two of them (GRO drivers napi_gro_receive,
//! veth without GRO netif_rx, ...). Attaching a program to a tracepoint nothing else uses
//! turns on its static key, and the kernel patches every call site of it on every CPU, with
//! interrupts to all of them, on the way on and again on the way off: once a window each. A
//! hook the device does not use also runs for every other device's frames while it is on.
//! So a window attaches the hooks that timed a frame of the device in one of their last
//! [`QUIET_WINDOWS`] windows; all of them when none did (an idle device, or one whose path
//! changed), and every [`RECHECK_EVERY`]th window, so a path the driver takes up while
//! another still runs (GRO turned off on some queues) is found within that many windows.

/// The hand-up tracepoints, in the order of the tables below.
pub const HANDUP_TPS: [&str; 5] = super::hooks::HANDUP;

/// Goes on and off with napi_gro_receive_entry: it ends the lives that hook defers.
pub const GRO_EXIT_TP: &str = super::hooks::NAPI_GRO_RECEIVE_EXIT;

/// Windows in a row a hook may time none of the device's frames and still be attached.
pub const QUIET_WINDOWS: u32 = 3;

/// Every this many windows, all the hand-up hooks attach.
pub const RECHECK_EVERY: u64 = 10;

/// The choice, window by window.
#[derive(Debug, Default)]
pub struct HandupChoice {
    /// Per hook: windows in a row it was attached and timed none of the device's frames
    /// (None: it never timed one).
    quiet: [Option<u32>; 5],
    /// Per hook: its count of timed frames as last read.
    last: [u64; 5],
    /// Windows opened so far.
    windows: u64,
    /// Per hook: whether the window under way attached it.
    on: [bool; 5],
}

impl HandupChoice {
    /// The hooks the next window attaches (by [`HANDUP_TPS`] index).
    pub fn open_window(&mut self) -> [bool; 5] {
        let recheck = self.windows.is_multiple_of(RECHECK_EVERY);
        self.windows += 1;
        let lately = self.quiet.map(|q| q.is_some_and(|q| q < QUIET_WINDOWS));
        self.on = if recheck || !lately.contains(&true) {
            [true; 5]
        } else {
            lately
        };
        self.on
    }

    /// The window closed; `timed` holds each hook's cumulative count of timed frames.
    pub fn close_window(&mut self, timed: [u64; 5]) {
        for (((now, last), quiet), on) in timed
            .into_iter()
            .zip(&mut self.last)
            .zip(&mut self.quiet)
            .zip(self.on)
        {
            if now > *last {
                *quiet = Some(0);
            } else if on {
                *quiet = quiet.map(|q| q.saturating_add(1));
            }
            *last = now;
        }
    }

    /// Whether the window under way attached the tracepoint `tp` (any other than the hand-up
    /// hooks and the GRO exit always).
    pub fn attaches(&self, tp: &str) -> bool {
        let tp = if tp == GRO_EXIT_TP { HANDUP_TPS[0] } else { tp };
        HANDUP_TPS
            .iter()
            .position(|h| *h == tp)
            .is_none_or(|i| self.on[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_attaches_the_hand_ups_that_timed_frames_lately_and_all_of_them_when_none_did_or_to_recheck(
    ) {
        let mut c = HandupChoice::default();
        // Nothing known yet: all of them.
        assert_eq!(c.open_window(), [true; 5]);
        assert!(
            c.attaches("netif_rx_entry") && c.attaches(GRO_EXIT_TP) && c.attaches("consume_skb")
        );
        // GRO timed frames: from now on GRO alone, its exit with it.
        c.close_window([40, 0, 0, 0, 0]);
        assert_eq!(c.open_window(), [true, false, false, false, false]);
        assert!(
            c.attaches(GRO_EXIT_TP) && !c.attaches("netif_rx_entry") && c.attaches("consume_skb")
        );
        c.close_window([80, 0, 0, 0, 0]);
        // The traffic stops: GRO stays on for QUIET_WINDOWS quiet windows, then all attach.
        for _ in 0..QUIET_WINDOWS {
            assert_eq!(c.open_window(), [true, false, false, false, false]);
            c.close_window([80, 0, 0, 0, 0]);
        }
        assert_eq!(c.open_window(), [true; 5]);
        // The driver now hands up through netif_rx: that one alone, until the recheck.
        c.close_window([80, 0, 0, 0, 9]);
        let mut opened: u64 = 6;
        while !opened.is_multiple_of(RECHECK_EVERY) {
            assert_eq!(
                c.open_window(),
                [false, false, false, false, true],
                "window {opened}"
            );
            assert!(!c.attaches(GRO_EXIT_TP));
            c.close_window([80, 0, 0, 0, 9 + opened]);
            opened += 1;
        }
        // The recheck attaches all, and finds GRO back beside netif_rx: both stay on.
        assert_eq!(c.open_window(), [true; 5]);
        c.close_window([90, 0, 0, 0, 30]);
        assert_eq!(c.open_window(), [true, false, false, false, true]);
    }

    #[test]
    fn a_hook_not_attached_is_not_counted_quiet() {
        let mut c = HandupChoice::default();
        c.open_window();
        c.close_window([0, 0, 5, 0, 0]);
        // netif_receive_skb alone for many windows: the others, off, keep what they were.
        for n in 1..RECHECK_EVERY {
            assert_eq!(c.open_window(), [false, false, true, false, false]);
            c.close_window([0, 0, 5 + n, 0, 0]);
        }
        assert_eq!(c.quiet, [None, None, Some(0), None, None]);
    }
}
