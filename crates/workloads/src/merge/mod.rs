//! Temporal merge, page-unit completion and pipelined post-I/O processing (paper 002,
//! Sec. 4, Fig. 2) on an emulated device in real time.
//!
//! # Temporal merge
//! Threads issue synchronous requests of one size (`bs_bytes`, whole 4 KiB pages) to one
//! [`MergeDevice`]. With merge on, a request goes into one shared FIFO queue. A thread that
//! finds a channel with no merged request in flight becomes that channel's *leader*: it
//! takes pending requests of one op from the head of the queue, regardless of their
//! addresses, up to `merge_pages_max` pages, submits them as one device request (the fixed
//! latency is paid once, then the pages transfer one after another, `devemu::pages`), waits
//! for it by polling, and runs the post-I/O work of every request in it. The other threads
//! are parked (futex, `std::thread::park`) until their request is released. A leader serves
//! batches until its own request is done, and then at most [`LEADER_BATCHES_MAX`] in all;
//! with requests still pending it hands the channel over to the oldest pending request
//! whose thread is not leading another channel (that thread is woken to lead), else it
//! frees the channel. Every decision about leadership is taken under the queue's one lock,
//! so "requests are pending" always implies "some thread leads", and no request is
//! stranded.
//!
//! A channel counts as busy from the submission of its merged request until its leader has
//! finished that request's post-I/O work: the next merged request is dispatched from the
//! completion path, as a polling driver with one outstanding command per channel (the
//! paper's FIFO command queue) does. That is where serialized post-I/O processing costs
//! throughput: the device idles while the host finishes it.
//!
//! # Post-I/O work (real, per request)
//! Right after submission (the device's clock has started) the leader stages each request
//! in a merge buffer from a [`pool::BufferPool`] and the CPU plays the device's DMA engine (reads: device memory into the buffer; writes:
//! the waiter's data into the buffer, the buffer into device memory). Then, per request:
//! reads copy the merge buffer out into the waiter's buffer and verify the pattern there
//! (`smartcon_engine::verify`); writes verify the merge buffer the device took; then the buffer goes
//! back to the pool and the waiter is released (its state set, the thread unparked).
//!
//! - serialized: the device has one completion ack for the whole merged request (Fig. 2,
//!   top); after it, the post-I/O work runs for every request in order;
//! - pipelined: the device has a page-unit ack register (Fig. 2, bottom); as each ack
//!   arrives the leader runs the post-I/O work of the requests whose pages are all done,
//!   while the device transfers the next pages.
//!
//! # Waiting: through the SmartPort's group call
//! Every device request (a merged one, or with merge off a thread's own) is a group call of
//! the waiting thread's [`SmartPort`] ([`smartcon_engine::smartport::group`]): the port
//! enters the device's in-flight counters with the request's members and bytes, decides how
//! the leader waits (`MergeConfig::strategy`, any `--strategy`: a fixed one, or `smart`'s
//! decision on the whole command's size, the other channels' commands ahead and the CPU),
//! and waits as decided on the page-level status a poll reads, which is what is the merge
//! device's own; the leader releases each follower once a wait saw its pages done.
//!
//! The paper's two pollings are two strategies ([`Polling`]): `fixed` is `poll`, a status
//! poll every `interval` ([`smartcon_engine::wait::fixed`]); `dynamic` is `hybrid`
//! ([`smartcon_engine::wait::hybrid`], sampling phase then predicted waits corrected by
//! alpha). Serialized waits are for the last page of the merged request, given to the
//! policy as a page with `pages - 1` pages ahead of it on the device, so the predictor's
//! per-byte-ahead slope learns the page transfer time; pipelined waits are one page each,
//! the first one from submission (fixed latency + a page) by the port's policy and the
//! following ones (a page) by its second one ([`GroupWait::FromLast`]), so neither class
//! mixes the two. `block` sleeps until the wanted pages' instant ([`Status::block`]), `spin`
//! and `sync` poll back to back. Every clock read, sleep and clock-only spin goes through
//! the engine's injected [`smartcon_engine::clock::Time`] (the host's here). As the
//! real-time replay's ports do, a fixed strategy reads an idle System Monitor (the polling
//! policies' busy branch is never taken, as before the port); the decisions read the
//! process-wide one, unless [`MergeDevice::set_monitor`] gives another.
//!
//! With merge off each thread submits its own request (queued FCFS on the channels like
//! `smartcon_emutarget::emu`), waits for it with the same policy and does its own post-I/O work: the
//! reference row.
//!
//! # Shared requests and unwinding
//! A request lives on its waiting thread's stack and other threads reach it, and the
//! waiter's buffer, by raw pointer (`ReqPtr`) from the moment it is queued until it is
//! DONE. A panic on the waiting thread in that window (it may be leading: `lead`, `serve`,
//! `post` run there) would unwind the frame and free both while a queue entry or another
//! leader's batch still points at them. So that window runs under an `AbortOnUnwind`
//! guard: a panic there aborts the process instead of unwinding into freed memory (the
//! panic message is printed first). Heap-owned requests (`Arc` slots) were not chosen: the
//! waiter's buffer is borrowed (`&mut [u8]`), so owning the request alone would not stop a
//! leader copying into a freed buffer, owning the buffer too would add a copy per request
//! on the measured path, and recovering instead (handing a dead leader's batch and channel
//! on) is a second leadership protocol with its own failure modes. The guard costs nothing
//! on the normal path (it is forgotten, never dropped).
//!
//! Non-goals: merging across ops in one device command; more than one merged request in
//! flight per channel; requests that are not whole pages; real hardware (this is the
//! emulated device of `smartcon_emutarget::emu` with a page-level view of its transfers).

//!
//! # The files
//! One job each: `config.rs` what the paper compares (the switches, the pollings);
//! `device.rs` the device (its model, memory, channels, queue and counters, and the waiters'
//! ports); `request.rs` the shared requests that other threads reach by pointer, and the
//! guard against unwinding; `waiter.rs` a thread's handle, its leadership of a channel and the
//! group call that serves a device request; `status.rs` the page-level status a wait polls
//! and its bound; `post_io.rs` the data movement at submission and the post-I/O work;
//! `job.rs` the timed job over the device; `pool.rs` the merge buffers.

mod config;
mod device;
pub mod job;
pub mod pool;
mod post_io;
mod request;
mod status;
mod waiter;

pub use config::{wait_name, MergeConfig, Polling};
pub use device::{DeviceCounts, MergeDevice};
pub use status::{WAIT_BOUND_NS_MIN, WAIT_BOUND_SERVICES};
pub use waiter::{Waiter, WaiterStats};

/// The page of page-unit completion and of the verification pattern.
pub const PAGE_BYTES: u64 = 4096;
/// The largest merged request `merge_pages_max` may ask for.
pub const MERGE_PAGES_MAX: u32 = 256;
/// A leader serves at most this many merged requests in a row once its own is done, so
/// one thread does not carry everyone's completion work for long.
pub const LEADER_BATCHES_MAX: u32 = 8;
/// The most threads a device queues for (one pending request per thread).
pub const THREADS_MAX: usize = 256;

const _: () = assert!(PAGE_BYTES as usize == smartcon_engine::target::buffer::ALIGN_BYTES);
