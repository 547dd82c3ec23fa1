//! Named failpoints for the crash-test harness (feature `failpoints`, never in a normal build).
//!
//! `JIT_CACHE_FAILPOINT=<name>:<action>` arms one point in this process; the action is `abort`
//! (the process dies at once with SIGKILL, as `kill -9` would) or `pause` (it writes its pid to
//! stderr with the point's name and stops itself with SIGSTOP, so a harness can kill it there).

/// Runs the armed action if `name` is the armed point.
pub(crate) fn hit(name: &str) {
    let Ok(armed) = std::env::var("JIT_CACHE_FAILPOINT") else { return };
    let Some((point, action)) = armed.split_once(':') else { return };
    if point != name {
        return;
    }
    match action {
        "abort" => {
            let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
        }
        "pause" => {
            eprintln!("failpoint {name} pid {}", std::process::id());
            let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::STOP);
        }
        _ => {}
    }
}
