//! Integration tests of `direct-io`, one module per topic.

mod checkpoint;
mod clone;
mod common;
mod engines;
mod headers;
mod read_at;
