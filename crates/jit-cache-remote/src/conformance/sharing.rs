//! Hosts share kernels through the tier: remote hits are verified and published locally, remote
//! variants are checked against each host's own headers, local hits never touch the network,
//! failures are shared, and one host compiles while the others wait.

use crate::conformance::hosts::{builds, host, kernel, project, real_nvcc, remote, uncached};
use crate::conformance::server::{Space, TestServer, Timeouts};
use jit_cache::{Cache, CacheOptions, Outcome, RemoteMode, RemoteTier, RootMode};

/// A kernel built on host a is fetched by host b, verified, published by the build's own step
/// (logged as a fetch), and a local hit afterwards even with the server gone.
pub fn a_kernel_built_on_one_host_is_fetched_verified_and_published_on_another<S: TestServer>() {
    let server = S::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let a = host(
        &dir.path().join("a"),
        Some(remote(&server, RemoteMode::ReadWrite)),
    );
    let b_remote = remote(&server, RemoteMode::ReadWrite);
    let b = host(&dir.path().join("b"), Some(b_remote.clone()));

    let built = a.get_or_build(&kernel(1)).expect("host a builds");
    assert_eq!(built.outcome, Outcome::Built, "nothing anywhere yet");
    assert_eq!(
        server.names(Space::Blob).len(),
        1,
        "the blob was uploaded under its digest"
    );
    assert_eq!(server.names(Space::Manifest).len(), 1, "and the manifest");
    assert!(
        server.names(Space::Lease).is_empty(),
        "the lease was released"
    );

    let fetched = b.get_or_build(&kernel(1)).expect("host b answers");
    assert_eq!(
        fetched.outcome,
        Outcome::Fetched,
        "host b fetches instead of compiling"
    );
    assert!(
        fetched.artifact.bytes() == built.artifact.bytes(),
        "the same artifact"
    );
    assert_eq!(builds(&b), 0, "host b compiled nothing");
    // Published by the build's own publication step: logged as a fetch, as a build is logged.
    let events = std::fs::read_to_string(
        dir.path()
            .join("b")
            .join(jit_cache::FORMAT_DIR)
            .join("state")
            .join("events.log"),
    )
    .expect("b's event log");
    assert_eq!(
        events.lines().filter(|l| l.contains(" fetch ")).count(),
        1,
        "{events}"
    );
    assert!(
        fetched.artifact.bytes() == uncached(1, dir.path()).as_slice(),
        "equal to an uncached compile"
    );
    let stats = b_remote.stats();
    assert_eq!((stats.hits, stats.errors), (1, 0), "{stats:?}");
    assert!(
        stats.bytes_fetched == built.artifact.bytes().len() as u64,
        "the bytes must be equal"
    );

    // Published through the local durable path: a new handle on b's root hits locally, even
    // with the server gone.
    drop(server);
    let b_again = host(&dir.path().join("b"), Some(b_remote.clone()));
    let local = b_again.get_or_build(&kernel(1)).expect("local hit");
    assert_eq!(local.outcome, Outcome::Hit, "a local hit");
    assert_eq!(
        b_remote.stats().errors,
        0,
        "a local hit never touches the network (the server is gone)"
    );
    assert_eq!(b_again.verify().expect("verify").corrupt.len(), 0);
    let logged = b_again.remote_stats();
    assert_eq!(
        (logged.hits, logged.misses),
        (1, 0),
        "the root's log: {logged:?}"
    );
}

/// A fetched entry in a team root gets the team's file modes, whatever the umask, as a built one.
pub fn a_kernel_fetched_into_a_team_root_gets_the_team_file_modes_as_a_built_one<S: TestServer>() {
    use std::os::unix::fs::PermissionsExt;
    let server = S::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let a = host(
        &dir.path().join("a"),
        Some(remote(&server, RemoteMode::ReadWrite)),
    );
    a.get_or_build(&kernel(3)).expect("host a builds");

    // Host b's root is a team root (setgid, group-writable; our primary group is the team).
    let team = dir.path().join("team");
    std::fs::create_dir(&team).expect("mkdir team root");
    std::fs::set_permissions(&team, std::fs::Permissions::from_mode(0o2770))
        .expect("chmod 2770 team root");
    let b = Cache::open_with(
        &team,
        CacheOptions::default()
            .mode(RootMode::Team)
            .nvcc(nvcc::Nvcc::at(real_nvcc()).expect("nvcc"))
            .remote(remote(&server, RemoteMode::ReadWrite)),
    )
    .expect("open team cache");
    // Whatever the umask, a fetched entry's files are the team's, as a built entry's are. (Each
    // test is its own process under nextest: the umask set here is this test's.)
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o022));
    let fetched = b.get_or_build(&kernel(3)).expect("host b answers");
    assert_eq!(fetched.outcome, Outcome::Fetched);
    let entry = fetched.artifact.path().parent().expect("entry dir");
    let mut files = 0;
    for file in std::fs::read_dir(entry).expect("list entry").flatten() {
        let mode = file.metadata().expect("stat").permissions().mode() & 0o7777;
        assert_eq!(mode, 0o660, "{} is {mode:o}", file.path().display());
        files += 1;
    }
    assert!(files >= 2, "the artifact and meta.json");
}

/// A batch builds its other kernels first while another host holds one kernel's lease.
pub fn a_batch_builds_other_kernels_first_while_another_host_holds_a_lease<S: TestServer>() {
    let server = S::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let b = host(
        &dir.path().join("b"),
        Some(remote(&server, RemoteMode::ReadWrite)),
    );
    // "Host a" holds kernel 5's lease for 2 s (then it expires, as a dead holder's does).
    let key = b.explain(&kernel(5)).expect("explain").key;
    assert!(
        server
            .tier(Timeouts::Generous)
            .acquire_lease(&key, "host-a", std::time::Duration::from_secs(2))
            .expect("acquire"),
        "setup: host a holds the lease"
    );
    let order = std::sync::Mutex::new(Vec::new());
    let results = b.build_many(&[kernel(5), kernel(6)], Some(1), &|p| {
        order.lock().expect("order").push(p.spec.name.clone());
    });
    assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
    assert_eq!(
        *order.lock().expect("order"),
        ["k6", "k5"],
        "kernel 6 first, kernel 5 once host a's lease is gone"
    );
}

/// A remote variant serves only the hosts whose headers match it; the manifest gathers the
/// variants of every host.
pub fn a_remote_variant_serves_only_hosts_whose_headers_match_it<S: TestServer>() {
    let server = S::start();
    let dir = tempfile::tempdir().expect("temp dir");
    // Every host's checkout at the same path (a fleet's image), spelled the same: a and b have
    // the same header, c (and d) another one. (A checkout elsewhere, spelled by its absolute
    // path, is another command: `__FILE__` and diagnostics name the path.)
    let checkout = dir.path().join("checkout");
    let hosts: Vec<_> = ["a", "b", "c", "d"]
        .iter()
        .map(|h| {
            host(
                &dir.path().join(h),
                Some(remote(&server, RemoteMode::ReadWrite)),
            )
        })
        .collect();
    let from_a = hosts[0]
        .get_or_build(&project(&checkout, 1))
        .expect("a builds");
    let from_b = hosts[1]
        .get_or_build(&project(&checkout, 1))
        .expect("b answers");
    assert_eq!(
        from_b.outcome,
        Outcome::Fetched,
        "same headers elsewhere: fetched"
    );
    assert!(
        from_a.artifact.bytes() == from_b.artifact.bytes(),
        "the bytes must be equal"
    );
    let from_c = hosts[2]
        .get_or_build(&project(&checkout, 2))
        .expect("c answers");
    assert_eq!(
        from_c.outcome,
        Outcome::Built,
        "another header: a's variant must not serve c"
    );
    assert_ne!(
        from_c.artifact.bytes(),
        from_a.artifact.bytes(),
        "c's own artifact"
    );
    assert_eq!(builds(&hosts[2]), 1, "c compiled");
    // The manifest now holds both variants (compare-and-set merged c's into a's): a fourth host
    // with c's header fetches c's.
    let from_d = hosts[3]
        .get_or_build(&project(&checkout, 2))
        .expect("d answers");
    assert_eq!(from_d.outcome, Outcome::Fetched, "c's variant serves d");
    assert!(
        from_d.artifact.bytes() == from_c.artifact.bytes(),
        "the bytes must be equal"
    );
}

/// A compile failure is shared: another host gets its diagnostics without compiling.
pub fn a_compile_failure_is_shared_and_served_to_other_hosts<S: TestServer>() {
    let server = S::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let broken = jit_cache::KernelSpec::from_text(
        "broken",
        "broken.cu",
        "extern \"C\" __global__ void broken(float* x) { x[0] = undeclared_name; }\n",
    );
    let a = host(
        &dir.path().join("a"),
        Some(remote(&server, RemoteMode::ReadWrite)),
    );
    let b = host(
        &dir.path().join("b"),
        Some(remote(&server, RemoteMode::ReadWrite)),
    );
    let first = a.get_or_build(&broken).expect_err("a broken kernel fails");
    let failure = first.compile_failure().expect("a compile failure");
    assert!(!failure.from_record, "a compiled it");
    assert_eq!(
        server.names(Space::Failure).len(),
        1,
        "the failure was shared"
    );
    let second = b.get_or_build(&broken).expect_err("b gets the failure");
    let shared = second.compile_failure().expect("a compile failure");
    assert!(shared.from_record, "b did not compile: {shared}");
    assert_eq!(
        shared.diagnostics, failure.diagnostics,
        "the same diagnostics"
    );
    assert_eq!(builds(&b), 0);
    assert_eq!(b.remote_stats().failures_fetched, 1);
}

/// Four hosts asking for three kernels at once compile each kernel once in the fleet, and leave
/// a store the audit finds whole.
pub fn heavy_hosts_asking_at_once_compile_each_kernel_once_in_the_fleet<S: TestServer>() {
    let server = S::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let hosts: Vec<_> = (0..4)
        .map(|h| {
            host(
                &dir.path().join(format!("host{h}")),
                Some(remote(&server, RemoteMode::ReadWrite)),
            )
        })
        .collect();
    let answers: Vec<Vec<Vec<u8>>> = std::thread::scope(|s| {
        let running: Vec<_> = hosts
            .iter()
            .map(|cache| {
                s.spawn(move || {
                    (0..3)
                        .map(|n| {
                            let answer = cache.get_or_build(&kernel(100 + n)).expect("answer");
                            assert!(answer.warning.is_none(), "{:?}", answer.warning);
                            answer.artifact.bytes().to_vec()
                        })
                        .collect()
                })
            })
            .collect();
        running
            .into_iter()
            .map(|t| t.join().expect("host thread"))
            .collect()
    });
    let compiles: usize = hosts.iter().map(builds).sum();
    assert_eq!(compiles, 3, "one compile per kernel in the whole fleet");
    for (h, got) in answers.iter().enumerate() {
        assert_eq!(
            got, &answers[0],
            "host {h} has the artifacts that were compiled"
        );
    }
    let waited: u64 = hosts.iter().map(|c| c.remote_stats().leases_waited).sum();
    assert!(
        waited >= 1,
        "hosts asking at once waited for a lease holder"
    );
    assert!(
        server.names(Space::Lease).is_empty(),
        "every lease was released"
    );
    let audit = server.audit();
    assert!(
        audit.corrupt_blobs.is_empty() && audit.unreadable_manifests.is_empty(),
        "{audit:?}"
    );
    assert_eq!(
        (audit.manifests, audit.blobs, audit.variants_without_blob),
        (3, 3, 0)
    );
}
