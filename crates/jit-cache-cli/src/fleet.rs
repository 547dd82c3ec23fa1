//! The fleet's remote tier as every entry point opens it: the `jit-cache` commands (with
//! `--remote`/`--remote-mode` over the environment) and the nvcc launcher (the environment
//! alone: a build system that runs `nvcc` passes no flag of ours).

/// The remote tier from `JIT_CACHE_REMOTE*`, with `url` and `mode` overriding them
/// (`jit-cache-fleet` chooses the tier by the URL). A remote that cannot be configured is a
/// warning, never a failed build.
pub(crate) fn remote(
    url: Option<&String>,
    mode: Option<jit_cache::RemoteMode>,
) -> Option<jit_cache::Remote> {
    let configured = jit_cache_fleet::RemoteSettings::from_env()
        .map_err(|e| e.to_string())
        .and_then(|mut settings| {
            if let Some(url) = url {
                settings.url = Some(url.clone());
            }
            if let Some(mode) = mode {
                settings.mode = Some(mode);
            }
            jit_cache_fleet::remote(settings).map_err(|e| e.to_string())
        });
    configured.unwrap_or_else(|e| {
        eprintln!("jit-cache: warning: no remote cache: {e}");
        None
    })
}
