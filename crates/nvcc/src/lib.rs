//! Find and drive the CUDA compiler: compile jobs, dependency files and structured diagnostics.
#![deny(missing_docs)]
