//! Property (issue 12): random include layouts (quoted and angle includes, `#include_next`, `..`
//! through a symlinked directory, `-iquote`, two `-I`, `-isystem`), random edits, additions and
//! removals between requests; after each step the cache answers exactly what a fresh uncached
//! compile answers (the same text, or a failure), through one long-lived handle and a fresh one.
//! The compiler is the `g++ -E` fake, so GCC's own rules decide, and the "artifact" shows every
//! header's content.

use crate::gxx::{oracle, Gxx};
use jit_cache::KernelSpec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::path::{Path, PathBuf};

/// Where headers may live (the source's directory first).
const DIRS: [&str; 5] = ["src", "q0", "i0", "i1", "s0"];
/// Header names the directives ask for.
const NAMES: [&str; 4] = ["a.h", "b.h", "sub/c.h", "x.h"];

#[derive(Debug, Clone)]
struct Directive {
    quoted: bool,
    next: bool,
    name: &'static str,
}

impl Directive {
    fn text(&self) -> String {
        let keyword = if self.next { "include_next" } else { "include" };
        if self.quoted {
            format!("#{keyword} \"{}\"\n", self.name)
        } else {
            format!("#{keyword} <{}>\n", self.name)
        }
    }
}

fn directive() -> impl Strategy<Value = Directive> {
    (
        any::<bool>(),
        prop::bool::weighted(0.2),
        prop::sample::select(NAMES.to_vec()),
    )
        .prop_map(|(quoted, next, name)| Directive { quoted, next, name })
}

#[derive(Debug, Clone)]
enum Step {
    /// Write (create or replace) a header in a directory, with a value and includes.
    Write {
        dir: usize,
        name: &'static str,
        value: u32,
        includes: Vec<Directive>,
    },
    /// Remove a header, if present.
    Remove { dir: usize, name: &'static str },
    /// Edit the header behind the symlinked directory (`i1/link/../x.h` is `real/x.h`).
    EditLinked(u32),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0..DIRS.len(), prop::sample::select(NAMES.to_vec()), 0u32..5, prop::collection::vec(directive(), 0..3))
            .prop_map(|(dir, name, value, includes)| Step::Write { dir, name, value, includes }),
        1 => (0..DIRS.len(), prop::sample::select(NAMES.to_vec()))
            .prop_map(|(dir, name)| Step::Remove { dir, name }),
        1 => (0u32..5).prop_map(Step::EditLinked),
    ]
}

fn header_text(path: &Path, value: u32, includes: &[Directive]) -> String {
    // A guard per file (not per name), so include_next chains and repeated includes terminate.
    let guard: String = path
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let body: String = includes.iter().map(Directive::text).collect();
    format!(
        "#ifndef G{guard}\n#define G{guard}\nint v{guard} = {value};\n{body}#endif\n",
        guard = &guard[guard.len().saturating_sub(40)..]
    )
}

struct Tree {
    root: PathBuf,
}

impl Tree {
    fn new(root: &Path, source: &[Directive]) -> Tree {
        for d in DIRS {
            std::fs::create_dir_all(root.join(d)).expect("mkdir");
        }
        std::fs::create_dir_all(root.join("real/sub")).expect("mkdir real/sub");
        std::os::unix::fs::symlink("../real/sub", root.join("i1/link")).expect("symlink");
        std::fs::write(root.join("real/sub/y.h"), "#include \"../x.h\"\n").expect("write y.h");
        std::fs::write(root.join("real/x.h"), "int linked = 0;\n").expect("write real/x.h");
        let mut text: String = source.iter().map(Directive::text).collect();
        text.push_str("#include <link/y.h>\nint k = 1;\n");
        std::fs::write(root.join("src/k.cu"), text).expect("write source");
        Tree {
            root: root.to_path_buf(),
        }
    }

    fn apply(&self, step: &Step) {
        match step {
            Step::Write {
                dir,
                name,
                value,
                includes,
            } => {
                let path = self.root.join(DIRS[*dir]).join(name);
                std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
                std::fs::write(&path, header_text(&path, *value, includes)).expect("write header");
            }
            Step::Remove { dir, name } => {
                let _ = std::fs::remove_file(self.root.join(DIRS[*dir]).join(name));
            }
            Step::EditLinked(value) => {
                std::fs::write(
                    self.root.join("real/x.h"),
                    format!("int linked = {value};\n"),
                )
                .expect("edit real/x.h");
            }
        }
    }

    fn spec(&self) -> KernelSpec {
        KernelSpec::from_file(self.root.join("src/k.cu"))
            .include_dir(self.root.join("i0"))
            .include_dir(self.root.join("i1"))
            .flag("-isystem")
            .flag(self.root.join("s0").display().to_string())
            .flag(format!(
                "-Xcompiler=-iquote,{}",
                self.root.join("q0").display()
            ))
    }

    fn oracle(&self) -> Option<Vec<u8>> {
        let dir = |d: &str| self.root.join(d).display().to_string();
        oracle(
            &self.root,
            &self.root.join("src/k.cu"),
            &[
                "-iquote".into(),
                dir("q0"),
                "-I".into(),
                dir("i0"),
                "-I".into(),
                dir("i1"),
                "-isystem".into(),
                dir("s0"),
            ],
        )
    }
}

#[test]
fn heavy_the_cache_answers_what_a_fresh_compile_answers_after_every_change() {
    let work = tempfile::tempdir().expect("temp dir");
    let gxx = Gxx::new(work.path());
    let mut runner = TestRunner::new(Config {
        cases: 24,
        failure_persistence: None,
        ..Config::default()
    });
    let case = std::cell::Cell::new(0u32);
    let strategy = (
        prop::collection::vec(directive(), 1..3),
        prop::collection::vec(step(), 1..7),
    );
    runner
        .run(&strategy, |(source, steps)| {
            case.set(case.get() + 1);
            let root = work.path().join(format!("case{}", case.get()));
            let tree = Tree::new(&root, &source);
            let cache_root = root.join("cache");
            let long_lived = gxx.cache(&cache_root);
            for (n, step) in std::iter::once(None).chain(steps.iter().map(Some)).enumerate() {
                if let Some(step) = step {
                    tree.apply(step);
                }
                let want = tree.oracle();
                for (which, handle) in [("long-lived", &long_lived), ("fresh", &gxx.cache(&cache_root))] {
                    let got = handle.get_or_build(&tree.spec());
                    match (&want, &got) {
                        (Some(want), Ok(answer)) => prop_assert!(
                            answer.artifact.bytes() == &want[..],
                            "step {n} ({step:?}), {which} handle: {} differs from a fresh compile",
                            answer.outcome
                        ),
                        (None, Err(_)) => {}
                        (Some(_), Err(e)) => {
                            prop_assert!(false, "step {n} ({step:?}), {which}: failed but a fresh compile works: {e}")
                        }
                        (None, Ok(answer)) => prop_assert!(
                            false,
                            "step {n} ({step:?}), {which}: answered ({}) but a fresh compile fails",
                            answer.outcome
                        ),
                    }
                }
            }
            Ok(())
        })
        .expect("the cache agrees with a fresh compile after every step");
}
