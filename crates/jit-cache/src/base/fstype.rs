//! Which filesystem a root lives on, and which protocol the cache follows there.
//!
//! On a local filesystem every process that uses the root runs on this kernel, so a `flock` on
//! an entry or staging directory is seen by all of them. On a network filesystem (NFS, Lustre,
//! CIFS, Ceph, GPFS) or a FUSE filesystem (which may be one) other hosts may share the root, and
//! Linux's NFS client keeps `flock` on directories local to each host: the cache then follows the
//! shared protocol (`liveness.rs`), which never rests on a directory lock for anything another
//! host could remove. Detection reads the `statfs` magic once, when the root is opened; the hit
//! path never asks again.

use std::path::Path;

/// How the cache decides whether other hosts may share its root.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Sharing {
    /// From the root's filesystem type (`statfs`): the shared protocol on NFS, Lustre, CIFS/SMB,
    /// Ceph, GPFS, AFS, 9p and FUSE; the local one elsewhere. `JIT_CACHE_SHARING=local|shared`
    /// overrides the detection.
    #[default]
    Detect,
    /// Only processes of this host use the root (even on NFS: an exported scratch directory).
    Local,
    /// Other hosts may use the root at the same time, whatever its filesystem.
    Shared,
}

/// The environment variable that overrides [`Sharing::Detect`]: `local`, `shared` or `detect`.
pub const SHARING_ENV: &str = "JIT_CACHE_SHARING";

/// The protocol in force for one root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    Local,
    Shared,
}

/// The protocol's rules, in one table: every decision that differs between a root this host
/// alone uses and one that other hosts share is one of these, named for what it decides, and no
/// other module compares protocols. Each follows from one fact: under the shared protocol
/// another host's readers and builders hold locks this host cannot see, and its lookups may not
/// see this host's entries yet (a negative lookup cache).
impl Protocol {
    /// Whether other hosts may share the root: the fact every rule below follows from.
    pub(crate) fn hosts_share(self) -> bool {
        self == Protocol::Shared
    }

    /// Whether an entry's last-use stamp is its readers' pin across hosts: a reader refreshes
    /// it before it checks the entry's path (at most every `PIN_REFRESH`, not hourly), and an
    /// eviction counts recent use as a pin, marks the entry and looks at the stamp twice.
    pub(crate) fn stamp_pins(self) -> bool {
        self == Protocol::Shared
    }

    /// Whether an entry a publication finds at its target may be another host's, published
    /// since this host looked: adopted when whole, moved aside only when no host can hold it.
    /// Otherwise it is what the locked lookup rejected, and is moved aside.
    pub(crate) fn adopts_found_entries(self) -> bool {
        self == Protocol::Shared
    }

    /// Whether a publication leaves a note in the key's lock file for other hosts' waiters, and
    /// a waiter reads it (its own lookup may not see the entry yet).
    pub(crate) fn notes_publications(self) -> bool {
        self == Protocol::Shared
    }

    /// Whether a builder's staging directory beats, and the sweep takes only one whose beat
    /// stopped; otherwise an unheld lock and a little age suffice.
    pub(crate) fn builders_beat(self) -> bool {
        self == Protocol::Shared
    }

    /// Whether a hit looks at files with the server's attributes rather than cached ones.
    pub(crate) fn looks_fresh(self) -> bool {
        self == Protocol::Shared
    }

    /// The protocol's name, as `stats` shows it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Protocol::Local => "local",
            Protocol::Shared => "shared",
        }
    }
}

/// The root's filesystem type, named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FsType {
    /// `nfs`, `lustre`, `fuse`, `ext4`, ... or `unknown (0x...)` as the magic.
    pub(crate) name: &'static str,
    pub(crate) magic: u64,
    /// Whether other hosts may reach it (network filesystems and FUSE, which may be one).
    pub(crate) may_be_shared: bool,
}

const KNOWN: &[(u64, &str, bool)] = &[
    (0x6969, "nfs", true),
    (0x0BD0_0BD0, "lustre", true),
    (0xFF53_4D42, "cifs", true),
    (0xFE53_4D42, "smb2", true),
    (0x517B, "smb", true),
    (0x6573_5546, "fuse", true),
    (0x00C3_6400, "ceph", true),
    (0x4750_4653, "gpfs", true),
    (0x5346_414F, "afs", true),
    (0x0102_1997, "9p", true),
    (0xEF53, "ext4", false),
    (0x5846_5342, "xfs", false),
    (0x9123_683E, "btrfs", false),
    (0x0102_1994, "tmpfs", false),
    (0x2FC1_2FC1, "zfs", false),
    (0x794C_7630, "overlayfs", false),
    (0xF2F5_2010, "f2fs", false),
];

impl FsType {
    /// `statfs(path)`; an unreadable or unknown type counts as local (what the cache did before).
    pub(crate) fn of(path: &Path) -> FsType {
        let magic = rustix::fs::statfs(path)
            .map(|s| s.f_type as u64 & 0xFFFF_FFFF)
            .unwrap_or(0);
        FsType::from_magic(magic)
    }

    pub(crate) fn from_magic(magic: u64) -> FsType {
        match KNOWN.iter().find(|(m, _, _)| *m == magic) {
            Some(&(magic, name, may_be_shared)) => FsType {
                name,
                magic,
                may_be_shared,
            },
            None => FsType {
                name: "unknown",
                magic,
                may_be_shared: false,
            },
        }
    }
}

/// Chooses the protocol: an explicit choice, else [`SHARING_ENV`], else the filesystem type.
pub(crate) fn protocol(sharing: Sharing, fs: FsType) -> Protocol {
    let sharing = match sharing {
        Sharing::Detect => match std::env::var(SHARING_ENV).as_deref() {
            Ok("shared") => Sharing::Shared,
            Ok("local") => Sharing::Local,
            _ => Sharing::Detect,
        },
        explicit => explicit,
    };
    match sharing {
        Sharing::Shared => Protocol::Shared,
        Sharing::Local => Protocol::Local,
        Sharing::Detect if fs.may_be_shared => Protocol::Shared,
        Sharing::Detect => Protocol::Local,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_and_fuse_filesystems_choose_the_shared_protocol() {
        for (magic, name) in [
            (0x6969, "nfs"),
            (0x0BD0_0BD0, "lustre"),
            (0xFF53_4D42, "cifs"),
            (0x6573_5546, "fuse"),
            (0x00C3_6400, "ceph"),
            (0x4750_4653, "gpfs"),
        ] {
            let fs = FsType::from_magic(magic);
            assert_eq!(fs.name, name);
            assert_eq!(protocol(Sharing::Detect, fs), Protocol::Shared, "{name}");
            assert_eq!(protocol(Sharing::Local, fs), Protocol::Local, "{name}");
        }
        for magic in [0xEF53, 0x5846_5342, 0x0102_1994, 0x1234] {
            let fs = FsType::from_magic(magic);
            assert_eq!(protocol(Sharing::Shared, fs), Protocol::Shared);
        }
    }
}
