//! The guide: how to use redlatch, and the reference behind it.
//!
//! Documentation only: these modules hold no code. Each page is a markdown file in
//! `src/guide/`, so it reads the same in the repository, and every example in it is
//! compiled by `cargo test --doc`.
//!
//! | page | what is in it |
//! | --- | --- |
//! | [`tasks`] | walkthroughs: a critical section in a thread-per-request server, the owned guard for pooled threads, shutting down cleanly, rate-limiting with a semaphore, Sentinel, Cluster |
//! | [`kinds`] | every kind at a glance, then the fair lock, multi-lock, spin lock, read-write lock, count-down latch and Redlock in detail (the semaphores are in [`tasks`]) |
//! | [`redisson`] | sharing locks with Java services that use Redisson: [`Layout::Redisson`](crate::Layout::Redisson), what maps to what, what differs, the versions checked |
//! | [`errors_and_limits`] | every [`Error`](crate::Error), what is `InvalidArgument`, when a release fails, the servers it runs on, the limits |
//! | [`configuration`] | the builder's settings, URLs, the client's name on the server, TLS |
//! | [`data_layout`] | every key and channel of both layouts, what is left behind, least-privilege ACLs |
//! | [`operations`] | finding out who holds a lock (the `redlatch` tool, [`Client::inspect`](crate::Client::inspect), `redis-cli`), logs and counters |
//! | [`promises`] | what it promises, and what a lock on Redis cannot promise |
//! | [`how_it_works`] | the modules, the queue and hand-over, the subscriber and renewal threads, idempotent scripts |
//! | [`reliability`] | the fault checker, what it found under real faults, the soak and its memory |
//! | [`testing`] | how the tests run, against which servers, and what CI runs |
//!
//! The performance figures, with how to reproduce each, are in `benches/README.md` in the
//! repository.

#[doc = include_str!("tasks.md")]
pub mod tasks {}

#[doc = include_str!("kinds.md")]
pub mod kinds {}

#[doc = include_str!("redisson.md")]
pub mod redisson {}

#[doc = include_str!("errors_and_limits.md")]
pub mod errors_and_limits {}

#[doc = include_str!("configuration.md")]
pub mod configuration {}

#[doc = include_str!("data_layout.md")]
pub mod data_layout {}

#[doc = include_str!("operations.md")]
pub mod operations {}

#[doc = include_str!("promises.md")]
pub mod promises {}

#[doc = include_str!("how_it_works.md")]
pub mod how_it_works {}

#[doc = include_str!("reliability.md")]
pub mod reliability {}

#[doc = include_str!("testing.md")]
pub mod testing {}
