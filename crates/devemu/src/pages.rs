//! Page-unit completion of a (merged) request: the timing model of paper 002's page-unit
//! I/O completion acknowledgement (Sec. 4, Fig. 2).
//!
//! A request of `pages` pages starts on its channel at `start_ns`; after the op's fixed
//! latency the pages are transferred one after another, each taking the page's transfer
//! time on the channel (`page_bytes / bandwidth`, rounded up to whole ns). Page `i` (from 0)
//! is therefore done at
//!
//! ```text
//! start_ns + fixed_ns + (i + 1) * page_ns
//! ```
//!
//! and the whole request at the last page's instant. A device with page-unit ack exposes
//! the number of pages done so far ([`PageTransfer::acked`]); a device without it exposes
//! only "all done" ([`PageTransfer::all_done`]), the top timeline of Fig. 2.
//!
//! A status poll that holds the channel (`poll_cost`, paper Fig. 1) delays every page not
//! yet done by the time it holds the channel ([`PageTransfer::stall`]); pages already
//! acknowledged keep their instants, so the ack count never goes backwards.
//!
//! The model is pure: explicit instants in, instants out; no clock, no randomness, so it
//! runs in real time (the engine's merge module) and in virtual time (its tests).
//!
//! Non-goals: out-of-order page completion (a channel transfers in order), per-page fixed
//! latency (a merged request is one device command, paying the fixed part once).

use crate::model::OpTiming;

/// The transfer of one page on one channel of `timing`, rounded up to whole ns.
pub fn page_transfer_ns(timing: &OpTiming, page_bytes: u64) -> u64 {
    assert!(timing.bandwidth_bytes_per_s > 0, "bandwidth must be positive");
    (page_bytes as u128 * 1_000_000_000).div_ceil(timing.bandwidth_bytes_per_s as u128) as u64
}

/// The channel time of a request of `pages` pages: the fixed part once, then every page.
pub fn service_ns(timing: &OpTiming, page_bytes: u64, pages: u32) -> u64 {
    timing.fixed_ns + pages as u64 * page_transfer_ns(timing, page_bytes)
}

/// One request in service, page by page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageTransfer {
    /// When the first page's transfer begins (start + fixed).
    first_page_begin_ns: u64,
    page_ns: u64,
    pages: u32,
    /// Pages seen done so far; they keep their instants from now on.
    acked: u32,
    /// Channel time taken by polls, added to every page not yet done.
    stall_ns: u64,
}

impl PageTransfer {
    /// A request of `pages` pages starting on its channel at `start_ns`.
    pub fn new(start_ns: u64, timing: &OpTiming, page_bytes: u64, pages: u32) -> PageTransfer {
        assert!(pages >= 1, "a request has at least one page");
        PageTransfer {
            first_page_begin_ns: start_ns + timing.fixed_ns,
            page_ns: page_transfer_ns(timing, page_bytes),
            pages,
            acked: 0,
            stall_ns: 0,
        }
    }

    pub fn pages(&self) -> u32 {
        self.pages
    }

    pub fn page_ns(&self) -> u64 {
        self.page_ns
    }

    /// The instant page `index` is done, as the device stands now (polls that stall the
    /// channel later can only move it later, and only while it is not yet acknowledged).
    pub fn page_done_ns(&self, index: u32) -> u64 {
        assert!(index < self.pages, "page {index} of a {}-page request", self.pages);
        self.first_page_begin_ns + (index as u64 + 1) * self.page_ns + self.stall_ns
    }

    /// The instant the whole request is done (its last page).
    pub fn complete_ns(&self) -> u64 {
        self.page_done_ns(self.pages - 1)
    }

    /// The page-unit ack register: how many pages are done at `now_ns`. Monotone: a later
    /// call never returns fewer.
    pub fn acked(&mut self, now_ns: u64) -> u32 {
        while self.acked < self.pages && self.page_done_ns(self.acked) <= now_ns {
            self.acked += 1;
        }
        self.acked
    }

    /// The single completion ack of a device without page-unit ack.
    pub fn all_done(&mut self, now_ns: u64) -> bool {
        self.acked(now_ns) == self.pages
    }

    /// A status poll at `now_ns` held the channel for `busy_ns`: the pages not done by then
    /// are delayed by that much. Returns the pages done at `now_ns`.
    pub fn stall(&mut self, now_ns: u64, busy_ns: u64) -> u32 {
        let acked = self.acked(now_ns);
        if acked < self.pages {
            self.stall_ns += busy_ns;
        }
        acked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1 GB/s: a 4096-byte page takes 4096 ns; fixed 10 us.
    const T: OpTiming = OpTiming { fixed_ns: 10_000, bandwidth_bytes_per_s: 1_000_000_000 };

    #[test]
    fn page_instants_are_start_plus_fixed_plus_pages() {
        let p = PageTransfer::new(1_000, &T, 4096, 4);
        assert_eq!(p.page_ns(), 4096);
        assert_eq!(p.page_done_ns(0), 1_000 + 10_000 + 4096);
        assert_eq!(p.page_done_ns(1), 1_000 + 10_000 + 2 * 4096);
        assert_eq!(p.page_done_ns(3), 1_000 + 10_000 + 4 * 4096);
        assert_eq!(p.complete_ns(), 1_000 + service_ns(&T, 4096, 4));
    }

    #[test]
    fn one_page_request_matches_the_device_model() {
        // The merged-request model agrees with the plain model for a single request.
        assert_eq!(service_ns(&T, 4096, 1), T.service_ns(4096));
        let optane = OpTiming { fixed_ns: 8_300, bandwidth_bytes_per_s: 2_400_000_000 };
        assert_eq!(page_transfer_ns(&optane, 4096), 1_707); // 1706.67 rounded up
        assert_eq!(service_ns(&optane, 4096, 32), 8_300 + 32 * 1_707);
    }

    #[test]
    fn the_ack_register_counts_pages_done_and_never_goes_back() {
        let mut p = PageTransfer::new(0, &T, 4096, 3);
        assert_eq!(p.acked(0), 0);
        assert_eq!(p.acked(14_095), 0);
        assert_eq!(p.acked(14_096), 1);
        assert_eq!(p.acked(18_191), 1);
        assert_eq!(p.acked(18_192), 2);
        assert!(!p.all_done(18_192));
        assert_eq!(p.acked(1_000_000), 3);
        assert!(p.all_done(1_000_000));
        // An earlier instant afterwards does not un-acknowledge a page.
        assert_eq!(p.acked(0), 3);
    }

    #[test]
    fn a_poll_stall_delays_only_the_pages_not_yet_done() {
        let mut p = PageTransfer::new(0, &T, 4096, 3);
        // At 15 us page 0 is done (14_096); a poll holds the channel 500 ns.
        assert_eq!(p.stall(15_000, 500), 1);
        assert_eq!(p.page_done_ns(1), 18_192 + 500);
        assert_eq!(p.complete_ns(), 22_288 + 500);
        assert_eq!(p.acked(18_192), 1);
        assert_eq!(p.acked(18_692), 2);
        // Once everything is done, polls cost the request nothing.
        assert_eq!(p.stall(1_000_000, 500), 3);
        assert_eq!(p.complete_ns(), 22_288 + 500);
    }
}
