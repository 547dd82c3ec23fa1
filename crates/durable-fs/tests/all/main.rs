//! Integration tests of durable-fs, one module per topic.

mod batch;
mod common;
mod faults;
mod locks;
mod ops;
mod race;
mod sweep;
