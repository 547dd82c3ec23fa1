//! Which packages and features the test step's cargo runs select: one definition for the
//! commands that test, and for those that build what the tests start (the Python suite's servers,
//! the crash harness), so that they build the same artefacts and cargo rebuilds nothing.

/// The cache and its command line, built and tested without the test-support crates so that
/// feature unification cannot switch `jit-cache/failpoints` on.
const PRODUCTION_CRATES: &[&str] = &["jit-cache", "jit-cache-cli"];

/// `-p <crate>` for each production crate.
pub fn production_packages() -> Vec<&'static str> {
    PRODUCTION_CRATES
        .iter()
        .flat_map(|krate| ["-p", krate])
        .collect()
}

/// `--exclude <crate>` for each production crate.
fn production_excluded() -> Vec<&'static str> {
    PRODUCTION_CRATES
        .iter()
        .flat_map(|krate| ["--exclude", krate])
        .collect()
}

/// The workspace test step's selection: every crate but the production ones, all features.
pub fn workspace_selection() -> Vec<&'static str> {
    let mut selection = vec!["--workspace", "--all-features"];
    selection.extend(production_excluded());
    selection
}
