//! The crate's error type: every variant names the operation and the path.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// An error from this crate. Each variant names what was being done and to which file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A system call failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// The operation, for example `open O_DIRECT` or `pread`.
        op: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// The file ends before the bytes asked for. Never reported as a failed read.
    #[error(
        "read {path}: end of file at offset {offset}: wanted {wanted} bytes, {available} available"
    )]
    EndOfFile {
        /// The file that was read.
        path: PathBuf,
        /// Where the read started.
        offset: u64,
        /// How many bytes were asked for.
        wanted: u64,
        /// How many bytes the file holds from `offset` on.
        available: u64,
    },
    /// A safetensors header or index breaks a rule; nothing was read past the header.
    #[error("safetensors header of {path}: {}{rule}", tensor.as_ref().map(|t| format!("tensor {t:?}: ")).unwrap_or_default())]
    Header {
        /// The checkpoint file.
        path: PathBuf,
        /// The tensor that breaks the rule, when one does.
        tensor: Option<String>,
        /// The rule that was broken.
        rule: HeaderRule,
    },
    /// The requested engine could not be set up.
    #[error("set up the {engine} engine: {reason}")]
    EngineSetup {
        /// The engine that was asked for.
        engine: &'static str,
        /// Why it could not be used.
        reason: String,
    },
    /// The engine itself failed (not one read): a submission or a worker failed.
    #[error("{op} on {path} through the {engine} engine: {source}")]
    Engine {
        /// The operation.
        op: &'static str,
        /// The file being streamed.
        path: PathBuf,
        /// The engine in use.
        engine: &'static str,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The sink refused a copy or a wait.
    #[error("sink {op} while streaming {path}: {source}")]
    Sink {
        /// `copy`, `wait`, `attach slots` or `detach slots`.
        op: &'static str,
        /// The file being streamed.
        path: PathBuf,
        /// What the sink reported.
        #[source]
        source: SinkError,
    },
    /// A stream's configuration cannot work (for example zero slots).
    #[error("stream {path}: {reason}")]
    Config {
        /// The file to be streamed.
        path: PathBuf,
        /// What is wrong and how to fix it.
        reason: String,
    },
}

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// Whether this is an end-of-file error.
    pub fn is_end_of_file(&self) -> bool {
        matches!(self, Error::EndOfFile { .. })
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        let kind = match &e {
            Error::Io { source, .. } | Error::Engine { source, .. } => source.kind(),
            Error::EndOfFile { .. } => io::ErrorKind::UnexpectedEof,
            Error::Header { .. } | Error::Config { .. } => io::ErrorKind::InvalidData,
            Error::EngineSetup { .. } => io::ErrorKind::Unsupported,
            Error::Sink { .. } => io::ErrorKind::Other,
        };
        io::Error::new(kind, e)
    }
}

/// What a sink reports when a copy or a wait fails.
#[derive(Debug)]
pub struct SinkError {
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl SinkError {
    /// A sink error with a message that says what failed.
    pub fn new(message: impl Into<String>) -> Self {
        SinkError {
            message: message.into(),
            source: None,
        }
    }

    /// A sink error with a message and the error that caused it.
    pub fn with_source(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        SinkError {
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }
}

impl fmt::Display for SinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            Some(s) => write!(f, "{}: {s}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for SinkError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn std::error::Error + 'static))
    }
}

/// The rule a safetensors header or index breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeaderRule {
    /// The file is shorter than the 8-byte length prefix.
    MissingLengthPrefix {
        /// The file's size.
        file_size: u64,
    },
    /// The header length is larger than the file or than the sane bound.
    HeaderLength {
        /// The length the prefix declares.
        declared: u64,
        /// The largest length allowed for this file.
        limit: u64,
    },
    /// The header is not valid JSON of the expected shape.
    Json(String),
    /// A name appears twice.
    DuplicateName,
    /// The dtype is unknown or not byte-sized.
    UnknownDtype(String),
    /// `data_offsets` is not `[begin, end]` with `begin <= end`.
    BadOffsets {
        /// The begin offset.
        begin: u64,
        /// The end offset.
        end: u64,
    },
    /// The tensor's bytes run past the data area.
    OutOfBounds {
        /// The end offset within the data area.
        end: u64,
        /// The size of the data area.
        data_len: u64,
    },
    /// The tensor's bytes overlap another tensor's.
    Overlap {
        /// The other tensor.
        other: String,
    },
    /// dtype size times the shape's element count differs from the byte length.
    SizeMismatch {
        /// dtype size times element count (None when it overflows).
        expected: Option<u64>,
        /// `end - begin`.
        actual: u64,
    },
    /// The sharded index is malformed or names a shard outside its directory.
    Index(String),
    /// The index names a tensor that its shard does not hold.
    MissingInShard {
        /// The shard that was expected to hold it.
        shard: String,
    },
}

impl fmt::Display for HeaderRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeaderRule::MissingLengthPrefix { file_size } => write!(
                f,
                "the file has {file_size} bytes, fewer than the 8-byte header length"
            ),
            HeaderRule::HeaderLength { declared, limit } => write!(
                f,
                "header length {declared} exceeds the limit {limit} (file size minus 8, at most 100 MB)"
            ),
            HeaderRule::Json(e) => write!(f, "header is not valid JSON of the safetensors shape: {e}"),
            HeaderRule::DuplicateName => f.write_str("the name appears more than once"),
            HeaderRule::UnknownDtype(d) => write!(f, "dtype {d:?} is unknown or not byte-sized"),
            HeaderRule::BadOffsets { begin, end } => {
                write!(f, "data_offsets [{begin}, {end}] must satisfy begin <= end")
            }
            HeaderRule::OutOfBounds { end, data_len } => write!(
                f,
                "data_offsets end {end} lies past the data area of {data_len} bytes"
            ),
            HeaderRule::Overlap { other } => write!(f, "its bytes overlap tensor {other:?}"),
            HeaderRule::SizeMismatch { expected, actual } => match expected {
                Some(e) => write!(f, "dtype size times shape is {e} bytes but data_offsets span {actual}"),
                None => write!(f, "dtype size times shape overflows 64 bits; data_offsets span {actual}"),
            },
            HeaderRule::Index(e) => write!(f, "index: {e}"),
            HeaderRule::MissingInShard { shard } => {
                write!(f, "the index maps it to shard {shard:?}, which does not hold it")
            }
        }
    }
}
