//! End-to-end tests across the workspace's crates and processes live in `tests/`.
