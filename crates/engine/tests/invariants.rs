//! The invariants the engine's counters rely on, checked where they can break (issue 21:
//! "assertions on the invariants that matter").

use smartcon_engine::target::InFlight;

/// `InFlight::leave` more often than `enter` must not wrap the count below zero: a wrapped
/// count reads as 4 billion requests ahead, and every later smart I/O would block as
/// `queue_over_limit`. A debug build stops at the bad leave; the release build the tests
/// run in keeps the counters at zero and counts the mismatch.
#[test]
#[cfg_attr(debug_assertions, should_panic(expected = "without a matching enter"))]
fn leaving_more_than_entered_is_caught_and_never_wraps() {
    let inflight = InFlight::default();
    assert_eq!(inflight.enter(4096).inflight_count, 0);
    assert_eq!(inflight.enter(8192).inflight_count, 1);
    inflight.leave(4096);
    inflight.leave(8192);
    assert_eq!((inflight.ours(), inflight.unmatched_leaves()), (0, 0));
    // One leave too many (a caller's bug).
    inflight.leave(4096);
    assert_eq!(inflight.ours(), 0, "the count wrapped below zero");
    assert_eq!(inflight.unmatched_leaves(), 1);
    let ahead = inflight.enter(512);
    assert_eq!((ahead.inflight_count, ahead.inflight_bytes), (0, 0), "a wrapped count is ahead of the next I/O");
    inflight.leave(512);
    assert_eq!((inflight.ours(), inflight.unmatched_leaves()), (0, 1));
}

/// Bytes are checked too: leaving with more bytes than entered saturates at zero.
#[test]
#[cfg_attr(debug_assertions, should_panic(expected = "bytes with"))]
fn leaving_more_bytes_than_entered_is_caught() {
    let inflight = InFlight::default();
    inflight.enter(4096);
    inflight.leave(65_536);
    assert_eq!(inflight.unmatched_leaves(), 1);
    assert_eq!(inflight.enter(0).inflight_bytes, 0);
}
