//! Recording what a compile depended on, by the compiler's own include rules.
//!
//! The dependency file says which files the compile read, not why. To know which files a later
//! compile would read instead, every file it read (and the source, and the forced includes) is
//! scanned for include directives, and each directive is resolved again along its real search
//! chain (`search.rs`): the including file's directory for `"x"`, then `-iquote`, `-I`, the
//! toolkit, `-isystem`, the installed directories; `#include_next` after the directory that
//! resolved the current file. A directive is active when the first candidate that the compile
//! read is found along that chain; every project candidate before it was looked for and absent,
//! and is recorded as an absence. A candidate before it that exists but was not read (GCC's
//! `#pragma once` takes byte-identical files for one; or the model and GCC disagree on an order)
//! is recorded by content: it must stay as it is. Directives that resolve to nothing that was
//! read were inactive (`#if`) and leave no record.
//!
//! Files the compile read that no directive reaches (a macro names them: `#include HEADER`) get
//! a conservative record: their name is recorded absent in every project directory before the one
//! that holds them.
//!
//! When `since` is given (the compile's start on the kernel's coarse clock), a file the compile
//! read that is gone, or was changed at or after it, means an input moved during the compile: the
//! result must not be published under these records. Absences need no clock: they are looked up
//! after the compile, so a file that appeared behind the compiler's back is seen then.

use crate::base::scan::{scan_all, Directive};
pub(crate) use crate::base::stamp::Instant;
use crate::base::stamp::Settling;
use crate::base::unproven::Unproven;
use crate::build::headers::{hash_with_stamp, AbsenceGroup, HeaderRecord, Inputs};
use crate::build::observed::Seen;
use crate::build::request::SourceRef;
use crate::build::search::{join, parent_rel, Base, Canonical, ChainDir, SearchPath};
use crate::build::source_bound::PathTokens;
use crate::error::{Error, Result};
use fingerprint::StatCache;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// The most files a walk without a dependency file visits (failure records only).
const MAX_WALK_FILES: usize = 10_000;

/// A reading of the fine realtime clock taken when a build is asked for, before anything of it is
/// read: every file written before the request has a ctime at or before it. Not the coarse
/// clock: with multigrain timestamps (Linux 6.13+) a file may get a fine-grained ctime later
/// than the coarse clock's reading at the time, and the coarse clock's next value (the tick's
/// nominal time) may still be earlier than that ctime when the tick is handled late (a VM).
pub(crate) fn asked_now() -> Instant {
    crate::base::stamp::fine_now()
}

/// The start of a compile asked for at `asked` ([`asked_now`]): a value of the coarse clock
/// after `asked` and no later than the compile. A file changed after the return has a ctime at or
/// after the value, and one changed before the request an earlier ctime: a source or header
/// written just before the request (a JIT library writes its kernel, then builds it) is not
/// taken for an edit during the compile, which cost a second compile and an uncached answer. A
/// change between the request and the start is seen as an edit (one more compile) or comes
/// before the compiler reads anything (the content checks see it).
///
/// When preparing the request (a key, a lookup, a lock) did not already take the coarse clock
/// past `asked`, the start waits for its next tick (1 to 10 ms by the kernel's HZ).
///
/// On a network filesystem timestamps come from the server's clock: a skewed server can make a
/// change look older than it is (missed here) or newer (one more compile, then an uncached
/// answer). The content checks around it still hold.
pub(crate) fn compile_start(asked: Instant) -> Instant {
    crate::base::stamp::coarse_past(asked)
}

/// Whether `path` was changed at or after `since` (or cannot be looked at any more).
pub(crate) fn changed_since(path: &Path, since: Instant) -> bool {
    match rustix::fs::stat(path) {
        Ok(st) => {
            let at = |secs: i64, nanos: i64| Instant { secs, nanos };
            at(st.st_ctime, st.st_ctime_nsec as i64) >= since
                || at(st.st_mtime, st.st_mtime_nsec as i64) >= since
        }
        Err(_) => true,
    }
}

/// One file whose directives are resolved.
#[derive(Debug, Clone)]
struct Includer {
    spelled: PathBuf,
    place: Place,
    id: Option<(u64, u64)>,
}

/// Where an including file is, which decides where its quoted includes look first.
#[derive(Debug, Clone)]
enum Place {
    /// The forced includes, searched first in the working directory.
    Forced,
    /// A file source: its directory is the source directory.
    Source,
    /// A text source compiled from a private copy: its directory holds nothing else.
    PrivateSource,
    /// A project file, relative to a base.
    Project(Base, PathBuf),
    /// A toolkit or installed file, with its record's base and name.
    Other(Base, PathBuf),
}

struct Walk<'a> {
    search: &'a SearchPath,
    /// Files read by the compile, by identity; None for a walk without a dependency file.
    read: Option<HashMap<(u64, u64), usize>>,
    files: Vec<Includer>,
    reached: BTreeSet<usize>,
    absent: BTreeSet<(Base, PathBuf)>,
    /// Directories the trace saw found by a lookup (`[ -d DIR ]`): each must stay one.
    found_dirs: BTreeSet<(Base, PathBuf)>,
    /// Symlinks the trace saw found as links, with their path and identity when found: each
    /// must stay that link (`finish` reads its target).
    links: BTreeMap<(Base, PathBuf), (PathBuf, (u64, file_trace::Timestamp))>,
    must_stay: BTreeSet<(Base, PathBuf)>,
    canonical: Canonical,
    looked_up: LookedUp,
    /// Files the trace saw read that no directive names (programs, libraries, response files,
    /// computed includes): recorded by content, never scanned.
    observed: Vec<(Base, PathBuf, PathBuf)>,
    /// The first file read that uses a time macro.
    time_macro: Option<PathBuf>,
    /// The first file read that looks a file up by an unspelled name (`scan::Scanned`).
    computed: Option<PathBuf>,
    /// A path the trace saw missing that exists now: it appeared during the compile, which may
    /// have seen either state.
    appeared: Option<PathBuf>,
    /// Directories the trace saw listed, by place.
    listed: BTreeSet<(Base, PathBuf)>,
    /// The path spellings of every file scanned (`source_bound.rs`).
    path_tokens: PathTokens,
}

/// The tokens that make an output depend on when it was compiled.
const TIME_MACROS: &[&[u8]] = &[b"__DATE__", b"__TIME__", b"__TIMESTAMP__"];

fn identity(path: &Path) -> Option<(u64, u64)> {
    rustix::fs::stat(path).ok().map(|st| (st.st_dev, st.st_ino))
}

/// What one walk found at each path it looked at: `(device, inode, is a directory)`, or None.
/// The walk tries the same candidates from many includers (every `<cstddef>` of every system
/// header, in every directory of the chain): one `stat` per path, as of the first look, instead
/// of thousands. The walk runs after the compile; what it records rests on its own snapshot.
#[derive(Default)]
struct LookedUp(HashMap<PathBuf, Option<(u64, u64, bool)>>);

impl LookedUp {
    fn stat(&mut self, path: &Path) -> Option<(u64, u64, bool)> {
        if let Some(known) = self.0.get(path) {
            return *known;
        }
        let found = rustix::fs::stat(path).ok().map(|st| {
            let dir =
                rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory;
            (st.st_dev, st.st_ino, dir)
        });
        self.0.insert(path.to_path_buf(), found);
        found
    }

    /// The identity of a file the compiler would find at `path` (not a directory).
    fn file(&mut self, path: &Path) -> Option<(u64, u64)> {
        self.stat(path)
            .filter(|(_, _, dir)| !dir)
            .map(|(dev, ino, _)| (dev, ino))
    }

    fn identity(&mut self, path: &Path) -> Option<(u64, u64)> {
        self.stat(path).map(|(dev, ino, _)| (dev, ino))
    }
}

/// Records the inputs of a compile of `source` that read `read` (from the dependency file) and,
/// when it was traced, did what `seen` says. With `read` None (the compile failed before writing
/// one), the walk follows the first existing candidate of every directive through project
/// files: the record of a failure. `Err(why)`: the records could not describe the compile, and
/// nothing may be published (or replayed) under them.
pub(crate) fn record(
    search: &SearchPath,
    source: SourceRef<'_>,
    read: Option<&[PathBuf]>,
    seen: Option<&Seen>,
    stat: &mut StatCache,
    since: Option<Instant>,
) -> Result<std::result::Result<Recorded, Unproven>> {
    if let Some(why) = seen.and_then(|seen| seen.unproven.clone()) {
        return Ok(Err(why));
    }
    // Read before any file is looked up, hashed or stamped: a write after it can never leave a
    // file or directory with a stamp judged settled (`stamp.rs`).
    let settling = Settling::start();
    let mut walk = Walk {
        search,
        read: read.map(|_| HashMap::new()),
        files: Vec::new(),
        reached: BTreeSet::new(),
        absent: BTreeSet::new(),
        found_dirs: BTreeSet::new(),
        links: BTreeMap::new(),
        must_stay: BTreeSet::new(),
        canonical: Canonical::default(),
        looked_up: LookedUp::default(),
        observed: Vec::new(),
        time_macro: None,
        computed: None,
        path_tokens: PathTokens::default(),
        appeared: None,
        listed: BTreeSet::new(),
    };
    let source_id = match source {
        SourceRef::File(path) => identity(path),
        SourceRef::Text(_) => None,
    };
    for path in read.unwrap_or(&[]) {
        let Some(id) = identity(path) else {
            // Read by the compile and gone now: it moved.
            return Ok(Err(Unproven::Moved(path.clone())));
        };
        if Some(id) == source_id {
            continue;
        }
        // The trace must have seen every file the dependency file names read: else it missed
        // something, and cannot vouch for the rest.
        if seen.is_some_and(|seen| !seen.saw_read(id)) {
            return Ok(Err(Unproven::TraceMissed(path.clone())));
        }
        walk.add_file(path, id);
    }
    // The forced includes: GCC's implicit `<stdc-predef.h>`, nvcc's own, then the caller's.
    let mut forced = vec![Directive {
        quoted: false,
        next: false,
        name: b"stdc-predef.h".to_vec(),
    }];
    for name in &search.forced {
        forced.push(Directive {
            quoted: true,
            next: false,
            name: name.as_os_str().as_bytes().to_vec(),
        });
    }
    let forced_includer = Includer {
        spelled: search.working_dir.join("<forced>"),
        place: Place::Forced,
        id: None,
    };
    walk.resolve_all(&forced_includer, &forced);
    match source {
        SourceRef::File(path) => {
            let includer = Includer {
                spelled: path.to_path_buf(),
                place: Place::Source,
                id: source_id,
            };
            walk.scan_file(&includer, path)?;
        }
        SourceRef::Text(text) => {
            let includer = Includer {
                spelled: PathBuf::new(),
                place: Place::PrivateSource,
                id: None,
            };
            walk.scan_text(&includer, Path::new("<source text>"), text);
        }
    }
    let mut next = 0;
    while next < walk.files.len() {
        let includer = walk.files[next].clone();
        next += 1;
        // Without a dependency file only project files are followed (bounded work).
        if walk.read.is_none() && matches!(includer.place, Place::Other(..)) {
            continue;
        }
        walk.scan_file(&includer, &includer.spelled)?;
        if walk.files.len() > MAX_WALK_FILES {
            return Err(Error::io(
                "walk includes",
                &includer.spelled,
                std::io::Error::other(format!("more than {MAX_WALK_FILES} files")),
            ));
        }
    }
    // With a trace, what the compiler really read and looked for is the record; the model's
    // records are what it must agree with. Without one, a file no directive reaches leaves the
    // model unable to say where the compiler looked first.
    let unaccounted = match (seen, &walk.read) {
        (None, Some(_)) => walk.unaccounted(),
        _ => None,
    };
    if let Some(seen) = seen {
        walk.add_observed(seen, source_id);
    }
    // Untraced, a lookup by an unspelled name leaves the model unable to say where the compiler
    // looked (a trace records every lookup).
    let computed = walk.computed.clone().filter(|_| seen.is_none());
    let time_macro = walk
        .time_macro
        .clone()
        .filter(|_| std::env::var_os("SOURCE_DATE_EPOCH").is_none());
    let appeared = walk.appeared.clone();
    let names_source_in = walk.path_tokens.binding_file();
    let (inputs, moved) = walk.finish(stat, since, settling)?;
    // A moved input first: the one reason a second compile may settle.
    let why = (moved.or(appeared).map(Unproven::Moved))
        .or(time_macro.map(Unproven::TimeMacro))
        .or(computed.map(Unproven::Computed))
        .or(unaccounted.map(Unproven::Unaccounted));
    Ok(why.map_or(
        Ok(Recorded {
            inputs,
            names_source_in,
        }),
        Err,
    ))
}

/// What a compile depended on, and what its text says of its source's path.
#[derive(Debug)]
pub(crate) struct Recorded {
    pub(crate) inputs: Inputs,
    /// The first file whose text may make the output name the source's path
    /// (`source_bound::PathTokens`).
    pub(crate) names_source_in: Option<PathBuf>,
}

impl Walk<'_> {
    fn add_file(&mut self, spelled: &Path, id: (u64, u64)) -> usize {
        if let Some(read) = &self.read {
            if let Some(&index) = read.get(&id) {
                return index;
            }
        } else if let Some(index) = self.files.iter().position(|f| f.id == Some(id)) {
            return index;
        }
        let (base, rel) = self.search.classify_with(spelled, &mut self.canonical);
        let place = if base.is_project() {
            Place::Project(base, rel)
        } else {
            Place::Other(base, rel)
        };
        let index = self.files.len();
        self.files.push(Includer {
            spelled: spelled.to_path_buf(),
            place,
            id: Some(id),
        });
        if let Some(read) = &mut self.read {
            read.insert(id, index);
        }
        index
    }

    fn scan_file(&mut self, includer: &Includer, path: &Path) -> Result<()> {
        let text = std::fs::read(path).map_err(|e| Error::io("read header", path, e))?;
        self.scan_text(includer, path, &text);
        Ok(())
    }

    fn scan_text(&mut self, includer: &Includer, path: &Path, text: &[u8]) {
        self.note_time_macros(path, text);
        // `__FILE__` in the source, or in a header found through the source's directory, spells
        // the source's directory.
        let near_source = matches!(
            includer.place,
            Place::Source | Place::Project(Base::SourceDir, _)
        );
        self.path_tokens.add_file(path, text, near_source);
        let scanned = scan_all(text);
        if scanned.computed && self.computed.is_none() {
            self.computed = Some(path.to_path_buf());
        }
        self.resolve_all(includer, &scanned.directives);
        for probe in &scanned.probes {
            let candidates = self.candidates(includer, probe);
            self.resolve_probe(&candidates);
        }
    }

    fn note_time_macros(&mut self, path: &Path, text: &[u8]) {
        if self.time_macro.is_none()
            && TIME_MACROS
                .iter()
                .any(|m| memchr::memmem::find(text, m).is_some())
        {
            self.time_macro = Some(path.to_path_buf());
        }
    }

    /// Adds what the trace saw beyond the model: files read that no directive names (recorded
    /// by content), and every path looked up and not found (an absence, `__has_include`'s
    /// among them).
    fn add_observed(&mut self, seen: &Seen, source_id: Option<(u64, u64)>) {
        let known: std::collections::HashSet<(u64, u64)> =
            self.files.iter().filter_map(|f| f.id).collect();
        for (path, id) in &seen.read {
            if known.contains(id) || Some(*id) == source_id {
                continue;
            }
            let (base, rel) = self.search.classify_observed(path, &mut self.canonical);
            self.observed.push((base, rel, path.clone()));
        }
        for path in &seen.absent {
            if self.appeared.is_none() && std::fs::symlink_metadata(path).is_ok() {
                self.appeared = Some(path.clone());
            }
            let (base, rel) = self.search.classify_observed(path, &mut self.canonical);
            if !rel.as_os_str().is_empty() {
                self.absent.insert((base, rel));
            }
        }
        for dir in &seen.listed {
            let (base, rel) = self.search.classify_observed(dir, &mut self.canonical);
            self.listed.insert((base, rel));
        }
        for dir in &seen.dirs {
            let (base, rel) = self.search.classify_observed(dir, &mut self.canonical);
            if !rel.as_os_str().is_empty() {
                self.found_dirs.insert((base, rel));
            }
        }
        for (link, found) in &seen.links {
            let (base, rel) = self.search.classify_observed(link, &mut self.canonical);
            if !rel.as_os_str().is_empty() {
                self.links
                    .entry((base, rel))
                    .or_insert_with(|| (link.clone(), *found));
            }
        }
    }

    fn resolve_all(&mut self, includer: &Includer, directives: &[Directive]) {
        for directive in directives {
            let candidates = self.candidates(includer, directive);
            self.resolve(&candidates);
        }
    }

    /// The paths the compiler tries for `directive` in `includer`, in order, with their place
    /// when they are in a project directory.
    fn candidates(
        &mut self,
        includer: &Includer,
        directive: &Directive,
    ) -> Vec<(PathBuf, Option<(Base, PathBuf)>)> {
        let name = Path::new(OsStr::from_bytes(&directive.name));
        if name.is_absolute() {
            return vec![(
                name.to_path_buf(),
                Some((Base::Absolute, name.to_path_buf())),
            )];
        }
        let search = self.search;
        let chain: Vec<&ChainDir> = search.chain(directive.quoted).collect();
        let mut start = 0;
        let mut own_dir = directive.quoted;
        if directive.next {
            // GCC continues after the directory that resolved the current file; for a file not
            // found through the chain, `#include_next` is a plain `#include`.
            if let Some(k) = chain.iter().position(|c| {
                includer.id.is_some()
                    && self.looked_up.identity(&join(&c.path, name)) == includer.id
            }) {
                start = k + 1;
                own_dir = false;
            }
        }
        let mut out = Vec::with_capacity(chain.len() + 1);
        if own_dir {
            match &includer.place {
                Place::Forced => out.push((
                    join(&self.search.working_dir, name),
                    Some((Base::WorkingDir, name.to_path_buf())),
                )),
                Place::Source => {
                    if let Some(dir) = &self.search.source_dir {
                        out.push((join(dir, name), Some((Base::SourceDir, name.to_path_buf()))));
                    }
                }
                Place::PrivateSource => {}
                Place::Project(base, rel) | Place::Other(base, rel) => {
                    let rel = join(&parent_rel(rel), name);
                    if let Some(path) = self.search.path_of(*base, &rel) {
                        out.push((path, Some((*base, rel))));
                    }
                }
            }
        }
        for dir in &chain[start.min(chain.len())..] {
            out.push((join(&dir.path, name), Some(dir.place(name))));
        }
        out
    }

    /// Resolves one directive's candidates against what the compile read (or, without a
    /// dependency file, against what exists now).
    fn resolve(&mut self, candidates: &[(PathBuf, Option<(Base, PathBuf)>)]) {
        let mut absent = Vec::new();
        let mut present = Vec::new();
        for (path, place) in candidates {
            let Some(id) = self.looked_up.file(path) else {
                absent.extend(place.clone());
                continue;
            };
            let read_index = match &self.read {
                Some(read) => read.get(&id).copied(),
                None => Some(self.add_file(path, id)),
            };
            match read_index {
                Some(index) => {
                    self.reached.insert(index);
                    self.absent.extend(absent);
                    self.must_stay.extend(present);
                    return;
                }
                None => present.extend(place.clone()),
            }
        }
        // Nothing the compile read: the directive was inactive. Without a dependency file, a
        // directive that resolves to nothing is the missing header of the failure: every
        // candidate is recorded absent, so adding it anywhere retires the failure.
        if self.read.is_none() {
            self.absent.extend(absent);
        }
    }

    /// Records one `__has_include` probe: it found the first candidate that exists (which must
    /// stay, recorded by content) or none; every candidate before is absent. The scan is
    /// textual, so a probe in an inactive branch is recorded too: a needless record, never a
    /// missing one.
    fn resolve_probe(&mut self, candidates: &[(PathBuf, Option<(Base, PathBuf)>)]) {
        for (path, place) in candidates {
            if self.looked_up.file(path).is_some() {
                self.must_stay.extend(place.clone());
                return;
            }
            self.absent.extend(place.clone());
        }
    }

    /// The first file read that no directive's resolution reaches (a macro names them: `#include MACRO`,
    /// or the model and the compiler disagree): the model cannot say where the compiler looked
    /// first, so it cannot vouch for the compile.
    fn unaccounted(&self) -> Option<PathBuf> {
        (0..self.files.len())
            .find(|i| !self.reached.contains(i))
            .map(|i| self.files[i].spelled.clone())
    }

    fn finish(
        self,
        stat: &mut StatCache,
        since: Option<Instant>,
        mut settling: Settling,
    ) -> Result<(Inputs, Option<PathBuf>)> {
        let changed_since = |path: &Path| since.is_some_and(|since| changed_since(path, since));
        let mut moved = None;
        let mut headers = Vec::new();
        let mut recorded: BTreeSet<(Base, PathBuf)> = BTreeSet::new();
        let files = self.files.iter().filter_map(|f| match &f.place {
            Place::Project(base, rel) | Place::Other(base, rel) => {
                Some((*base, rel.clone(), f.spelled.clone()))
            }
            _ => None,
        });
        let must_stay = self
            .must_stay
            .iter()
            .filter_map(|(base, rel)| Some((*base, rel.clone(), self.search.path_of(*base, rel)?)));
        let observed = self.observed.iter().cloned();
        for (base, rel, path) in files.chain(must_stay).chain(observed) {
            if !recorded.insert((base, rel.clone())) {
                continue;
            }
            if moved.is_none() && changed_since(&path) {
                moved = Some(path.clone());
            }
            let (digest, stamp) = hash_with_stamp(&path, stat, &mut settling)?;
            headers.push(HeaderRecord {
                base,
                rel,
                digest,
                stamp,
            });
        }
        // Per directory: the names that must stay absent, those that must stay directories, and
        // the links that must stay links to the same target.
        type Group = (Vec<PathBuf>, Vec<PathBuf>, Vec<(PathBuf, PathBuf)>);
        let mut groups: BTreeMap<(Base, PathBuf), Group> = BTreeMap::new();
        for (base, rel) in &self.absent {
            let (dir, name) = self.nearest_existing_dir(*base, rel);
            groups.entry((*base, dir)).or_default().0.push(name);
        }
        for (base, dir) in &self.listed {
            groups
                .entry((*base, dir.clone()))
                .or_default()
                .0
                .push(PathBuf::from(crate::build::headers::LISTING));
        }
        for (base, rel) in &self.found_dirs {
            let dir = parent_rel(rel);
            let name = rel_below(rel, &dir);
            if !name.as_os_str().is_empty() {
                groups.entry((*base, dir)).or_default().1.push(name);
            }
        }
        for ((base, rel), (path, (ino, ctime))) in &self.links {
            // A link is replaced, never changed in place: one of another identity now was put
            // there after the compile looked (and its target then read is not the one it saw).
            let now = std::fs::symlink_metadata(path).ok().filter(|m| {
                use std::os::unix::fs::MetadataExt;
                m.file_type().is_symlink()
                    && m.ino() == *ino
                    && (m.ctime(), m.ctime_nsec()) == (ctime.secs, i64::from(ctime.nanos))
            });
            let target = now.and_then(|_| std::fs::read_link(path).ok());
            let Some(target) = target else {
                if moved.is_none() {
                    moved = Some(path.clone());
                }
                continue;
            };
            let dir = parent_rel(rel);
            let name = rel_below(rel, &dir);
            if !name.as_os_str().is_empty() {
                groups
                    .entry((*base, dir))
                    .or_default()
                    .2
                    .push((name, target));
            }
        }
        // Absences need no such check: each name was looked up just now, after the compile, and
        // a file that appeared at a candidate after the compiler passed it exists now and was
        // recorded by content above (its ctime then says it moved).
        let mut absent = Vec::with_capacity(groups.len());
        for ((base, dir), (names, dirs, links)) in groups {
            let path = self.search.path_of(base, &dir).unwrap_or_default();
            absent.push(AbsenceGroup {
                base,
                stamp: settling.stamp(&path),
                dir,
                names,
                dirs,
                links,
            });
        }
        Ok((
            Inputs {
                headers,
                absent,
                source: None,
            },
            moved,
        ))
    }

    /// The nearest directory on `rel`'s path (under `base`) that exists, and the rest of `rel`
    /// below it. Names with `..` are not walked up (a `..` after a symlink is the kernel's to
    /// resolve): their own directory is used, existing or not.
    fn nearest_existing_dir(&self, base: Base, rel: &Path) -> (PathBuf, PathBuf) {
        let plain = rel
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::RootDir));
        let mut dir = parent_rel(rel);
        if plain {
            while !dir.as_os_str().is_empty()
                && !self.search.path_of(base, &dir).is_some_and(|p| p.is_dir())
            {
                dir = parent_rel(&dir);
            }
        }
        let name = rel_below(rel, &dir);
        (dir, name)
    }
}

/// `rel` with its leading `dir/` cut off, byte for byte.
fn rel_below(rel: &Path, dir: &Path) -> PathBuf {
    let r = rel.as_os_str().as_bytes();
    let d = dir.as_os_str().as_bytes();
    if d.is_empty() {
        return rel.to_path_buf();
    }
    match r.strip_prefix(d).and_then(|rest| rest.strip_prefix(b"/")) {
        Some(rest) => PathBuf::from(OsStr::from_bytes(rest)),
        None => rel.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_written_just_before_a_compile_starts_has_not_moved_and_one_written_after_has() {
        let dir = tempfile::tempdir().expect("temp dir");
        let source = dir.path().join("k.cu");
        // Written and compiled at once, as a JIT library does: almost always within one tick
        // of the coarse clock, where a start taken as "now" saw the write as an edit.
        std::fs::write(&source, b"__global__ void k() {}\n").expect("write");
        let started = compile_start(asked_now());
        assert!(
            !changed_since(&source, started),
            "a file written before the compile started is no edit during it"
        );
        std::fs::write(&source, b"__global__ void k2() {}\n").expect("edit");
        assert!(
            changed_since(&source, started),
            "an edit after the start is seen"
        );
    }
}
