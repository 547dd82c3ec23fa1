//! The keyed store: durable, single-flight groups of files under a key the caller computed.
//!
//! A JIT that has its own key and its own bytes (Triton's cache manager, Inductor, an NVRTC
//! path, downloaded cubins) needs only a store. This one gives every stored entry what the
//! kernel cache gives a compiled kernel: one durable rename publishes the whole group (never a
//! partial one), one producer per key however many threads, processes and hosts ask, readers
//! pinned against eviction, kill -9 leaving nothing behind, and `gc`, `verify`, `stats`, the
//! team root and the shared-filesystem protocol, since stored entries live in the same tree.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use jit_cache::store::{Claim, Namespace, Store};
//! use std::time::Duration;
//! let dir = tempfile::tempdir()?;
//! let store = Store::open(dir.path().join("cache"))?;
//! let triton = Namespace::new("triton")?;
//! let entry = match store.begin(&triton, "4f1c9a", Duration::from_secs(60))? {
//!     Claim::Ready(entry) => entry, // another producer finished it: nothing to do
//!     Claim::Produce(producer) => {
//!         // This thread is the key's one producer until it commits or drops `producer`.
//!         producer.write("add.cubin", b"\x7fELF...")?;
//!         producer.write("add.json", b"{}")?;
//!         producer.commit()? // fsynced, then published with one rename
//!     }
//! };
//! assert_eq!(entry.read("add.json")?, b"{}");
//! let again = store.get(&triton, "4f1c9a")?.expect("published");
//! assert!(again.path("add.cubin").is_some_and(|p| p.exists())); // valid while `again` lives
//! # Ok(()) }
//! ```

mod address;
mod entry;
mod handle;
mod producer;
mod remote;
pub(crate) mod tier;
pub(crate) mod tier_stored;
mod turns;

pub use address::{Namespace, MAX_KEY_LEN};
pub use entry::StoredEntry;
pub use handle::{Claim, Damage, Lookup, Store, StoreOptions};
pub use producer::Producer;

pub(crate) use address::{check_key, entry_digest, stored_variant, Address};
pub(crate) use entry::{
    check_name, is_stored_meta, is_whole, verify_dir, StoredMeta, STORE_FORMAT,
};
pub(crate) use producer::{after_rename, before_rename};
