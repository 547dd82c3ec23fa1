//! The crate's layers import only downwards (ARCHITECTURE.md, `crates/jit-cache`): a module may
//! name, through `crate::`, only modules of its own layer or of a lower one. Read from the
//! sources, so that a new upward import fails here before it becomes a cycle.

use std::path::Path;

/// The layers, lowest first; a module not listed belongs to the top (the front end and facade).
const LAYERS: &[(&str, &[&str])] = &[
    (
        "foundations",
        &[
            "error",
            // The event log's one codec: typed records, names escaped.
            "event_log",
            // The fork rule's registrar: each structure registers its own rule with it.
            "fork",
            "fstype",
            "host",
            "grace",
            "sync",
            "unproven",
            "scan",
            // The pack file's codec: bytes in, checked values out (the rest of `pack` is the top).
            "pack::format",
        ],
    ),
    (
        "storage",
        &[
            "staging",
            "layout",
            "liveness",
            "evict",
            "pin",
            "hooks",
            "failpoints",
        ],
    ),
    ("store", &["store", "remote", "remote::stored"]),
];

/// The layer of a module path such as `remote::stored` or `layout`; None: the top.
fn layer_of(module: &str) -> Option<usize> {
    LAYERS
        .iter()
        .position(|(_, modules)| modules.contains(&module))
}

/// The modules a source names through `crate::`, outside comments and its test module: the
/// first segment, or the first two for `remote::...`.
fn named_modules(source: &str) -> Vec<String> {
    let code = source
        .split("#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or_default();
    let mut out = Vec::new();
    for line in code.lines() {
        let line = line.trim_start();
        if line.starts_with("//") {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let path: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let mut parts = path.split("::").filter(|p| !p.is_empty());
            let Some(first) = parts.next() else { continue };
            let module = match (first, parts.next()) {
                (item, _) if item.starts_with(|c: char| c.is_ascii_uppercase()) => {
                    root_item_module(item).to_string()
                }
                ("remote", Some(second))
                    if second.chars().all(|c| c.is_ascii_lowercase() || c == '_') =>
                {
                    format!("remote::{second}")
                }
                _ => first.to_string(),
            };
            out.push(module);
        }
        // `use crate::{a, b::c}` lists several.
        if let Some(list) = line
            .strip_prefix("use crate::{")
            .or_else(|| line.strip_prefix("pub(crate) use crate::{"))
        {
            for item in list.trim_end_matches("};").split(',') {
                let first = item.trim().split("::").next().unwrap_or_default();
                if !first.is_empty() {
                    out.push(first.to_string());
                }
            }
        }
    }
    out
}

/// The module an item re-exported at the crate's root comes from (`crate::Cache`, ...).
fn root_item_module(item: &str) -> &'static str {
    match item {
        "Error" | "Result" => "error",
        "Sharing" => "fstype",
        "RootMode" => "layout",
        "Remote" | "RemoteTier" | "TierError" | "TierErrorKind" | "Expected" | "RemoteMode"
        | "RemotePolicy" | "RemoteStats" => "remote",
        _ => "cache",
    }
}

/// The module path of a source file under `src/`.
fn module_of(relative: &Path) -> String {
    let text = relative
        .with_extension("")
        .to_string_lossy()
        .replace('/', "::");
    text.strip_suffix("::mod").unwrap_or(&text).to_string()
}

#[test]
fn the_storage_layer_and_the_store_import_nothing_above_them() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let mut todo = vec![src.clone()];
    while let Some(dir) = todo.pop() {
        for item in std::fs::read_dir(&dir).expect("list src").flatten() {
            let path = item.path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let mut upward = Vec::new();
    let mut checked = 0;
    for file in &files {
        let module = module_of(file.strip_prefix(&src).expect("under src"));
        // A module of the store's directory is in the store's layer.
        let own =
            layer_of(&module).or_else(|| layer_of(module.split("::").next().unwrap_or_default()));
        let Some(own) = own else { continue };
        // The remote flow and the kernels' manifests are the facade's, though under `remote/`.
        if module == "remote::flow" || module == "remote::manifest" {
            continue;
        }
        checked += 1;
        let source = std::fs::read_to_string(file).expect("read source");
        for named in named_modules(&source) {
            let theirs =
                layer_of(&named).or_else(|| layer_of(named.split("::").next().unwrap_or_default()));
            // Not in the table: the front end's or the facade's, above every listed layer.
            let upwards = theirs.is_none_or(|theirs| theirs > own);
            let facade_remote = named == "remote::flow" || named == "remote::manifest";
            if upwards || facade_remote {
                upward.push(format!("{module} ({}) names {named}", LAYERS[own].0));
            }
        }
    }
    assert!(
        checked >= 15,
        "only {checked} modules checked: the layer table is stale"
    );
    upward.sort();
    upward.dedup();
    assert!(
        upward.is_empty(),
        "imports pointing up:\n{}",
        upward.join("\n")
    );
}
