//! Aligned O_DIRECT reads with exact end-of-file semantics, io_uring and thread engines, and checkpoint streaming.
#![deny(missing_docs)]
