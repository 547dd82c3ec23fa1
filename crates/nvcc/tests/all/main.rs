//! Integration tests for the `nvcc` crate: one binary, a module per topic.

mod fake_compiler;
mod locate;
mod parsers;
mod real_nvcc;
mod support;
mod tables;
mod traced_run;
