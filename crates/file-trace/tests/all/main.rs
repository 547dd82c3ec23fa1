//! Integration tests for `file-trace`: one binary, a module per topic.

mod containment;
mod exerciser;
mod lifecycle;
mod real_nvcc;
mod shell;
mod support;
