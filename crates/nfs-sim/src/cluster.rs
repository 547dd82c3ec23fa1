//! Hosts: one thread per host in its own mount namespace, holding that host's mount and
//! starting that host's processes.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use fuser::{BackgroundSession, Config, MountOption, Session};

use crate::fs::HostFs;
use crate::locks::Locks;
use crate::store::Store;
use fs_testbed::namespace as ns;

/// How to set up the simulated hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// How many hosts mount the store.
    pub hosts: usize,
    /// Attribute, entry and negative-entry cache timeout of every mount (NFS `actimeo`); see
    /// [`Cluster::start_with_actimeos`] for one per host.
    pub actimeo: Duration,
    /// Whether locks reach every host.
    pub locks: Locks,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            hosts: 2,
            actimeo: Duration::from_secs(3),
            locks: Locks::Shared,
        }
    }
}

/// Why the hosts could not be started.
#[derive(Debug, Clone)]
pub struct Skipped {
    /// What was missing or failed.
    pub reason: String,
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "skipped nfs-sim: {}", self.reason)
    }
}

enum Job {
    Run(Box<dyn FnOnce() + Send>),
    Mount(Sender<std::io::Result<()>>),
    Unmount(Sender<std::io::Result<()>>),
}

struct Host {
    jobs: Sender<Job>,
    thread: Option<JoinHandle<()>>,
}

/// Several hosts sharing one in-memory export, each through its own mount at [`Cluster::root`].
pub struct Cluster {
    store: Arc<Mutex<Store>>,
    hosts: Vec<Host>,
    mountpoint: PathBuf,
    _scratch: tempfile::TempDir,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("hosts", &self.hosts.len())
            .field("mountpoint", &self.mountpoint)
            .finish_non_exhaustive()
    }
}

/// The host id durable-fs puts in temp names for simulated host `host`.
pub fn host_id_of(host: usize) -> String {
    format!("{:016x}", 0x6e66_7300_0000_0000_u64 + host as u64)
}

impl Cluster {
    /// Mounts the store once per host, each in a fresh private mount namespace.
    ///
    /// # Errors
    /// [`Skipped`] without root or `/dev/fuse`, or when a mount fails.
    pub fn start(options: Options) -> Result<Cluster, Skipped> {
        Cluster::start_with_actimeos(&vec![options.actimeo; options.hosts], options.locks)
    }

    /// Mounts the store once per element of `actimeos`, host `i` caching for `actimeos[i]`
    /// (as NFS clients that mounted one export with different `actimeo`s): for instance a
    /// writer that always asks the server beside a reader that trusts its cache.
    ///
    /// # Errors
    /// As [`Cluster::start`].
    pub fn start_with_actimeos(actimeos: &[Duration], locks: Locks) -> Result<Cluster, Skipped> {
        let skip = |reason: String| Skipped { reason };
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Err(skip("mounting FUSE without libfuse needs root".into()));
        }
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .map_err(|e| skip(format!("open /dev/fuse: {e}")))?;
        let scratch = tempfile::Builder::new()
            .prefix("nfs-sim-")
            .tempdir()
            .map_err(|e| skip(format!("create a scratch dir: {e}")))?;
        let mountpoint = scratch.path().join("mnt");
        std::fs::create_dir(&mountpoint).map_err(|e| skip(format!("mkdir mountpoint: {e}")))?;
        let store = Arc::new(Mutex::new(Store::new()));
        let mut cluster = Cluster {
            store,
            hosts: Vec::new(),
            mountpoint,
            _scratch: scratch,
        };
        for (index, actimeo) in actimeos.iter().enumerate() {
            let host = cluster.start_host(index, *actimeo, locks).map_err(skip)?;
            cluster.hosts.push(host);
        }
        Ok(cluster)
    }

    fn start_host(&self, index: usize, actimeo: Duration, locks: Locks) -> Result<Host, String> {
        let (jobs, inbox) = channel::<Job>();
        let (ready, started) = channel::<Result<(), String>>();
        let store = Arc::clone(&self.store);
        let mountpoint = self.mountpoint.clone();
        let thread = std::thread::Builder::new()
            .name(format!("nfs-sim-host-{index}"))
            .spawn(move || {
                if let Err(e) = ns::enter_private_mount_namespace() {
                    let _ = ready.send(Err(format!("enter a private mount namespace: {e}")));
                    return;
                }
                let mut mount = HostMount {
                    index,
                    store,
                    mountpoint,
                    actimeo,
                    locks,
                    session: None,
                    connection: 0,
                };
                let _ = ready.send(mount.attach().map_err(|e| e.to_string()));
                while let Ok(job) = inbox.recv() {
                    match job {
                        Job::Run(f) => f(),
                        Job::Mount(done) => {
                            let _ = done.send(mount.attach());
                        }
                        Job::Unmount(done) => {
                            let _ = done.send(mount.detach());
                        }
                    }
                }
                let _ = mount.detach();
            })
            .map_err(|e| format!("start host thread: {e}"))?;
        started
            .recv()
            .map_err(|_| "the host thread died".to_string())??;
        Ok(Host {
            jobs,
            thread: Some(thread),
        })
    }

    /// The path every host mounts the export at.
    pub fn root(&self) -> &Path {
        &self.mountpoint
    }

    /// How many hosts there are.
    pub fn hosts(&self) -> usize {
        self.hosts.len()
    }

    /// Runs `f` on host `host`'s thread (inside its mount namespace) and returns its result.
    ///
    /// # Panics
    /// When `host` is out of range or the host thread is gone.
    pub fn on<R: Send + 'static>(&self, host: usize, f: impl FnOnce() -> R + Send + 'static) -> R {
        let (tx, rx) = channel();
        // A panic in `f` (a failed assertion) is carried back to the caller, and the host
        // thread lives on.
        let job = Job::Run(Box::new(move || {
            let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
        }));
        self.hosts[host]
            .jobs
            .send(job)
            .expect("the host thread is alive");
        match rx.recv().expect("the host thread answered") {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// Starts `command` on host `host` (in its mount namespace) with that host's identity in
    /// `DURABLE_FS_HOST_ID`. The caller owns the child: kill it before [`Cluster::crash`] of its
    /// host.
    ///
    /// # Errors
    /// When the process cannot be started.
    pub fn spawn(&self, host: usize, mut command: Command) -> std::io::Result<Child> {
        command.env(durable_host_env(), host_id_of(host));
        self.on(host, move || command.spawn())
    }

    /// Crashes host `host`'s client: its mount is detached and its connection aborted (whatever
    /// its processes still hold fails with ENOTCONN), and the server drops its locks, pending
    /// lock requests and open files, as a lock manager does when a client reboots. Kill the
    /// host's processes first (the caller owns them, see [`Cluster::spawn`]).
    ///
    /// # Errors
    /// When the mount cannot be detached.
    pub fn crash(&self, host: usize) -> std::io::Result<()> {
        let (tx, rx) = channel();
        self.hosts[host]
            .jobs
            .send(Job::Unmount(tx))
            .map_err(|_| std::io::Error::other("host thread gone"))?;
        rx.recv()
            .map_err(|_| std::io::Error::other("host thread gone"))??;
        let mut store = self.store.lock().unwrap_or_else(|p| p.into_inner());
        store.host_gone(host);
        Ok(())
    }

    /// Mounts a crashed host again, with empty caches.
    ///
    /// # Errors
    /// When the mount fails.
    pub fn restart(&self, host: usize) -> std::io::Result<()> {
        let (tx, rx) = channel();
        self.hosts[host]
            .jobs
            .send(Job::Mount(tx))
            .map_err(|_| std::io::Error::other("host thread gone"))?;
        rx.recv()
            .map_err(|_| std::io::Error::other("host thread gone"))?
    }
}

fn durable_host_env() -> &'static str {
    "DURABLE_FS_HOST_ID"
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for index in 0..self.hosts.len() {
            let _ = self.crash(index);
        }
        for host in &mut self.hosts {
            // Closing the channel ends the host's loop.
            let (dead, _) = channel();
            host.jobs = dead;
            if let Some(thread) = host.thread.take() {
                let _ = thread.join();
            }
        }
    }
}

struct HostMount {
    index: usize,
    store: Arc<Mutex<Store>>,
    mountpoint: PathBuf,
    actimeo: Duration,
    locks: Locks,
    session: Option<BackgroundSession>,
    connection: u64,
}

impl HostMount {
    fn attach(&mut self) -> std::io::Result<()> {
        if self.session.is_some() {
            return Ok(());
        }
        let mut config = Config::default();
        config.mount_options = vec![
            MountOption::FSName(format!("nfs-sim-host{}", self.index)),
            MountOption::Subtype("nfs-sim".into()),
            MountOption::DefaultPermissions,
            MountOption::RW,
        ];
        let notifier = Arc::new(std::sync::OnceLock::new());
        let fs = HostFs {
            host: self.index,
            store: Arc::clone(&self.store),
            actimeo: self.actimeo,
            locks: self.locks,
            negatives: Mutex::new(std::collections::HashMap::new()),
            notifier: Arc::clone(&notifier),
        };
        let session = Session::new(fs, &self.mountpoint, &config)
            .and_then(|session| {
                // The handshake is done and no request has been read yet: the open handler
                // finds the notifier set.
                let _ = notifier.set(session.notifier());
                session.spawn()
            })
            .map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("mount nfs-sim on {}: {e}", self.mountpoint.display()),
                )
            })?;
        self.session = Some(session);
        self.connection = ns::fuse_connection(&self.mountpoint)?;
        Ok(())
    }

    fn detach(&mut self) -> std::io::Result<()> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        match ns::umount(&self.mountpoint, 0) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                // Files are still open: lazily detached and aborted, so descriptors the dead
                // host's processes left fail with ENOTCONN, and the daemon's loop ends.
                ns::umount(&self.mountpoint, libc::MNT_DETACH)?;
                match ns::abort_fuse_connection(self.connection) {
                    // The last user went away between the two calls: nothing left to abort.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    other => other?,
                }
            }
            Err(e) => return Err(e),
        }
        match session.join() {
            Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => Ok(()),
            other => other,
        }
    }
}
