//! The power-loss test: `durable-fs` puts, staged commits and `jit-cache` builds on the mount,
//! the power cut at random points (seeded), and every cut checked for durability and atomicity.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use durable_fs::{PublishOutcome, StagingDir};

use crate::control::Faults;
use crate::error::Error;
use crate::jit_builds::{BuildStep, BuildTotals, JitBuilds};
use crate::ledger::{Content, Ledger};
use crate::model::CutMode;
use crate::mount::PowercutMount;
use crate::rng::SplitMix64;

/// How many cuts to make, the seed that fixes everything else, which writer to test, and
/// whether `jit-cache` builds join the workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RandomCuts {
    /// Power cuts to make.
    pub cuts: u64,
    /// Fixes the workload, the cut points, the cut modes and the injected faults.
    pub seed: u64,
    /// Which implementation of `put` the workload uses.
    pub writer: Writer,
    /// Interleave `jit-cache` builds (a deterministic fake nvcc, the cache inside the mount)
    /// with the puts and commits, and check the cache's entries after every cut.
    pub jit_builds: bool,
}

/// The `put` under test: `durable-fs`, or a deliberately broken one the checker must catch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Writer {
    /// `durable_fs::put` and `durable_fs::StagingDir`.
    #[default]
    DurableFs,
    /// A put that writes a temp file and renames it without fsyncing the file (a negative
    /// control; staged commits still use `durable-fs`).
    NoFileFsync,
    /// A put that fsyncs the file but not the directory after the rename (a negative control).
    NoDirFsync,
}

/// A put by temp file and rename, leaving out the fsync `writer` says; `durable_fs::put` for
/// [`Writer::DurableFs`].
fn put_with(writer: Writer, path: &Path, bytes: &[u8]) -> Result<(), std::io::Error> {
    if writer == Writer::DurableFs {
        return Ok(durable_fs::put(path, bytes)?);
    }
    let tmp = path.with_extension(format!("broken-tmp-{}", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)?;
    std::io::Write::write_all(&mut file, bytes)?;
    if writer != Writer::NoFileFsync {
        file.sync_all()?;
    }
    drop(file);
    std::fs::rename(&tmp, path)?;
    if writer != Writer::NoDirFsync {
        durable_fs::fsync_parent(path)?;
    }
    Ok(())
}

/// What a run of [`run_random_cuts`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    /// Cuts made.
    pub cuts: u64,
    /// Successful operations whose results were checked after a cut.
    pub operations_checked: u64,
    /// Successful operations whose result was missing after a cut.
    pub lost: u64,
    /// Entries holding something no operation wrote whole (or something a failed put published).
    pub torn: u64,
    /// Injected fsync errors that reached the caller as an error.
    pub fsync_errors_returned: u64,
    /// What the checks of `jit-cache` builds found (all zero without them).
    pub builds: BuildTotals,
    /// The first violations, with the cut they happened at.
    pub violations: Vec<String>,
}

impl Totals {
    /// No durability or atomicity violation.
    pub fn is_clean(&self) -> bool {
        self.lost == 0 && self.torn == 0 && self.builds.is_clean()
    }

    /// `cuts N, operations checked N, lost N, torn N; builds checked N, lost N, torn N, ...`.
    pub fn summary(&self) -> String {
        let b = &self.builds;
        format!(
            "cuts {}, operations checked {}, lost {}, torn {}; builds checked {}, lost {}, torn {} \
             (published {}, hits {}, not published {}, entry checks {}, swept {}, leftovers {}, \
             fsync errors reported {}, published after an fsync error {})",
            self.cuts,
            self.operations_checked,
            self.lost,
            self.torn,
            b.checked,
            b.lost,
            b.torn,
            b.published,
            b.hits,
            b.not_published,
            b.entry_checks,
            b.swept,
            b.leftovers,
            b.fsync_errors_returned,
            b.published_after_fsync_error
        )
    }
}

/// Why a workload step stopped.
enum Stop {
    /// The power is out (the armed cut fired): the round ends here.
    PowerOut,
}

/// Runs `plan.cuts` rounds of a random workload on `mount`, each ended by a power cut after a
/// random operation (or at its end), and checks the ledger after every cut.
///
/// # Errors
/// When the mount cannot be cut and remounted, or the checker cannot read it.
pub fn run_random_cuts(mount: &mut PowercutMount, plan: RandomCuts) -> Result<Totals, Error> {
    let mut rng = SplitMix64::new(plan.seed);
    let mut ledger = Ledger::new();
    let mut totals = Totals::default();
    let root = mount.root().to_path_buf();
    let mut jit = if plan.jit_builds {
        Some(JitBuilds::new(&root)?)
    } else {
        None
    };
    for cut in 0..plan.cuts {
        // A fresh cache handle each round, opened before faults are armed.
        if let Some(jit) = &mut jit {
            jit.begin_round()?;
        }
        let mode = match rng.below(3) {
            0 => CutMode::DropUnsynced,
            1 => CutMode::RandomSubset {
                seed: rng.next_u64(),
            },
            _ => CutMode::TornWrites {
                seed: rng.next_u64(),
            },
        };
        mount.set_cut_mode(mode);
        let faults = Faults {
            eio_on_fsync: (rng.below(4) == 0).then(|| 1 + rng.below(6)),
            ..Faults::default()
        };
        mount.set_faults(faults);
        let eio_at_fsync = faults.eio_on_fsync.map(|n| mount.counters().fsync + n);
        let steps = 1 + rng.below(6);
        // A build makes about 200 changing requests, a put or commit 5 to 30: with builds, half
        // the rounds spread the cut over builds too, the other half keep it among the first few
        // requests as before.
        let per_step = if plan.jit_builds && rng.below(2) == 0 {
            80
        } else {
            8
        };
        mount.arm_cut_after(1 + rng.below(steps * per_step));
        let mut build_violations = Vec::new();
        for _ in 0..steps {
            if let Some(jit) = jit.as_mut().filter(|_| rng.below(3) == 0) {
                match jit.step(
                    &mut rng,
                    mount,
                    eio_at_fsync,
                    &mut totals.builds,
                    &mut build_violations,
                ) {
                    BuildStep::Continue => continue,
                    BuildStep::RoundOver => break,
                }
            }
            match step(
                plan.writer,
                &mut rng,
                &mut ledger,
                &root,
                mount,
                &mut totals,
            ) {
                Ok(()) => {}
                Err(Stop::PowerOut) => break,
            }
        }
        if let Some(jit) = &mut jit {
            jit.end_round();
        }
        let report = mount.power_cut()?;
        // A fault the round did not reach must not fire in the checks or the next cache open.
        mount.set_faults(Faults::default());
        if let Some(jit) = &mut jit {
            jit.check(&mut totals.builds, &mut build_violations)?;
        }
        let verdict = ledger.check(&root)?;
        totals.cuts += 1;
        totals.operations_checked += verdict.operations_checked;
        totals.lost += verdict.lost.len() as u64;
        totals.torn += verdict.torn.len() as u64;
        for v in verdict
            .lost
            .iter()
            .chain(&verdict.torn)
            .chain(&build_violations)
        {
            if totals.violations.len() < 20 {
                totals.violations.push(format!(
                    "cut {cut} (after operation {}, {:?}): {v}",
                    report.after_operation, report.mode
                ));
            }
        }
    }
    Ok(totals)
}

fn random_bytes(rng: &mut SplitMix64, max: u64) -> Vec<u8> {
    let len = rng.below(max + 1) as usize;
    let mut bytes = Vec::with_capacity(len + 8);
    while bytes.len() < len {
        bytes.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    bytes.truncate(len);
    bytes
}

/// After a failed operation: if the power is out the round ends and the attempt may have
/// landed; otherwise the failure was an injected fault and the attempt must not be visible.
fn failed(
    ledger: &mut Ledger,
    path: &Path,
    mount: &PowercutMount,
    totals: &mut Totals,
    err: &std::io::Error,
) -> Stop {
    if mount.power_is_out() {
        return Stop::PowerOut;
    }
    if err.raw_os_error() == Some(libc::EIO) {
        totals.fsync_errors_returned += 1;
    }
    // An operation that failed while the power was on must have published nothing.
    ledger.abandoned(path);
    Stop::PowerOut
}

fn step(
    writer: Writer,
    rng: &mut SplitMix64,
    ledger: &mut Ledger,
    root: &Path,
    mount: &PowercutMount,
    totals: &mut Totals,
) -> Result<(), Stop> {
    match rng.below(4) {
        0 | 1 => {
            let name = PathBuf::from(format!("f{}", rng.below(6)));
            let bytes = random_bytes(rng, 6000);
            ledger.attempt(&name, Content::File(bytes.clone()));
            match put_with(writer, &root.join(&name), &bytes) {
                Ok(()) => ledger.succeeded(&name),
                Err(e) => return Err(failed(ledger, &name, mount, totals, &e)),
            }
        }
        kind => {
            let replace = kind == 3;
            let name = PathBuf::from(if replace {
                format!("r{}", rng.below(2))
            } else {
                format!("e{}", rng.below(4))
            });
            let mut files = BTreeMap::new();
            for i in 0..1 + rng.below(3) {
                files.insert(PathBuf::from(format!("k{i}")), random_bytes(rng, 3000));
            }
            // Building the staging tree publishes nothing, so a failure there is not ledgered.
            let staging = StagingDir::new_in(root).map_err(|_| Stop::PowerOut)?;
            for (file, bytes) in &files {
                if durable_fs::put(staging.path().join(file), bytes).is_err() {
                    if !mount.power_is_out() {
                        totals.fsync_errors_returned += 1;
                    }
                    return Err(Stop::PowerOut);
                }
            }
            ledger.attempt(&name, Content::Tree(files));
            let target = root.join(&name);
            let result = if replace {
                staging
                    .commit_replace(&target)
                    .map(|()| PublishOutcome::Published)
            } else {
                staging.commit_noreplace(&target)
            };
            match result {
                Ok(PublishOutcome::Published) => ledger.succeeded(&name),
                Ok(PublishOutcome::AlreadyExisted) => ledger.abandoned(&name),
                Err(e) => return Err(failed(ledger, &name, mount, totals, &e.into())),
            }
        }
    }
    Ok(())
}
