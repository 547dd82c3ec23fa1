//! End-to-end tests across the workspace's crates live in `tests/tests/`: the JIT cache on every
//! real filesystem the project supports, with the real compiler.
