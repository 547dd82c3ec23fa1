//! safetensors headers: each rule gives an error naming the tensor and the rule; mutations of a
//! valid header give an error or a header whose tensors lie inside the file, never a panic.

use crate::checkpoint::write_safetensors;
use direct_io::{
    parse_safetensors_header, read_safetensors_header, CachePolicy, DirectFile, Error, HeaderRule,
};
use proptest::prelude::*;
use std::path::Path;

fn rule_of(json: &str, data_len: u64) -> (Option<String>, HeaderRule) {
    let file_size = 8 + json.len() as u64 + data_len;
    match parse_safetensors_header(Path::new("x.safetensors"), json.as_bytes(), file_size) {
        Err(Error::Header { tensor, rule, .. }) => (tensor, rule),
        other => panic!("wanted a header error for {json}, got {other:?}"),
    }
}

#[test]
fn each_rule_is_named_with_its_tensor() {
    let t = |s: &str| Some(s.to_string());
    assert_eq!(
        rule_of(
            r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}"#,
            4
        ),
        (t("a"), HeaderRule::DuplicateName)
    );
    assert_eq!(
        rule_of(
            r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}"#,
            6
        ),
        (t("b"), HeaderRule::Overlap { other: "a".into() })
    );
    assert_eq!(
        rule_of(
            r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}"#,
            3
        ),
        (
            t("a"),
            HeaderRule::OutOfBounds {
                end: 4,
                data_len: 3
            }
        )
    );
    assert_eq!(
        rule_of(
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}"#,
            8
        ),
        (
            t("a"),
            HeaderRule::SizeMismatch {
                expected: Some(8),
                actual: 4
            }
        )
    );
    assert_eq!(
        rule_of(
            r#"{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}"#,
            8
        ),
        (
            t("a"),
            HeaderRule::SizeMismatch {
                expected: None,
                actual: 4
            }
        )
    );
    assert_eq!(
        rule_of(
            r#"{"a":{"dtype":"Q9","shape":[1],"data_offsets":[0,1]}}"#,
            1
        ),
        (t("a"), HeaderRule::UnknownDtype("Q9".into()))
    );
    assert_eq!(
        rule_of(
            r#"{"a":{"dtype":"U8","shape":[0],"data_offsets":[3,1]}}"#,
            4
        ),
        (t("a"), HeaderRule::BadOffsets { begin: 3, end: 1 })
    );
    assert!(matches!(
        rule_of("{not json", 0),
        (None, HeaderRule::Json(_))
    ));
    assert!(matches!(
        rule_of(r#"{"__metadata__":{"k":1}}"#, 0),
        (None, HeaderRule::Json(_))
    ));
    let ok = parse_safetensors_header(
        Path::new("x"),
        br#"{"__metadata__":{"k":"v"},"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]}}"#,
        8 + 84 + 12,
    )
    .expect("a valid header with metadata");
    assert_eq!(ok.tensors[0].len, 12);
    assert_eq!(ok.metadata.expect("metadata")["k"], "v");
}

#[test]
fn header_length_beyond_the_file_is_refused_before_reading_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("lies.safetensors");
    let mut bytes = (1u64 << 40).to_le_bytes().to_vec();
    bytes.extend_from_slice(b"{}");
    std::fs::write(&path, &bytes).expect("write");
    let file = DirectFile::open_with(&path, CachePolicy::Buffered).expect("open");
    let err = read_safetensors_header(&file).expect_err("an impossible header length");
    assert!(
        matches!(err, Error::Header { rule: HeaderRule::HeaderLength { declared, limit: 2 }, .. } if declared == 1 << 40),
        "{err}"
    );
    assert!(
        err.to_string().contains("lies.safetensors"),
        "names the file: {err}"
    );
    std::fs::write(&path, b"abc").expect("write");
    let file = DirectFile::open_with(&path, CachePolicy::Buffered).expect("open");
    assert!(matches!(
        read_safetensors_header(&file),
        Err(Error::Header {
            rule: HeaderRule::MissingLengthPrefix { file_size: 3 },
            ..
        })
    ));
}

#[test]
fn a_valid_file_parses_as_the_safetensors_crate_reads_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("m.safetensors");
    write_safetensors(
        &path,
        &[("w", "F16", 5), ("x", "U8", 3), ("y", "F32", 7)],
        6,
        1,
    );
    let file = DirectFile::open(&path).expect("open");
    let ours = read_safetensors_header(&file).expect("parse");
    let bytes = std::fs::read(&path).expect("read");
    let theirs = safetensors::SafeTensors::deserialize(&bytes).expect("the crate parses it");
    for t in &ours.tensors {
        let view = theirs.tensor(&t.name).expect("the crate has the tensor");
        let start = t.offset as usize;
        assert_eq!(
            view.data(),
            &bytes[start..start + t.len as usize],
            "{} bytes",
            t.name
        );
    }
    assert_eq!(ours.tensors.len(), theirs.len());
}

fn valid_header() -> Vec<u8> {
    br#"{"__metadata__":{"format":"pt"},"a":{"dtype":"F16","shape":[2,3],"data_offsets":[0,12]},"b":{"dtype":"U8","shape":[5],"data_offsets":[12,17]},"c":{"dtype":"F32","shape":[],"data_offsets":[17,21]}}"#.to_vec()
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Truncate(usize),
    Insert(usize, Vec<u8>),
    Digit(usize, u8),
}

fn apply(mut h: Vec<u8>, muts: &[Mutation]) -> Vec<u8> {
    for m in muts {
        match m {
            Mutation::Flip(i, x) if !h.is_empty() => {
                let i = i % h.len();
                h[i] ^= x | 1;
            }
            Mutation::Truncate(n) => h.truncate(n % (h.len() + 1)),
            Mutation::Insert(i, bytes) => {
                let i = i % (h.len() + 1);
                h.splice(i..i, bytes.iter().copied());
            }
            Mutation::Digit(i, d) => {
                // Replace a digit, so offsets and shapes change while the JSON stays valid.
                let digits: Vec<usize> = (0..h.len()).filter(|&j| h[j].is_ascii_digit()).collect();
                if !digits.is_empty() {
                    h[digits[i % digits.len()]] = b'0' + d % 10;
                }
            }
            _ => {}
        }
    }
    h
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, x)| Mutation::Flip(i, x)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(i, b)| Mutation::Insert(i, b)),
        (
            any::<usize>(),
            prop::collection::vec(prop::sample::select(b"{}[]\",:0123456789e-".to_vec()), 1..6)
        )
            .prop_map(|(i, b)| Mutation::Insert(i, b)),
        (any::<usize>(), any::<u8>()).prop_map(|(i, d)| Mutation::Digit(i, d)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    #[test]
    fn mutated_headers_are_errors_or_stay_inside_the_file(
        muts in prop::collection::vec(mutation(), 1..4),
        data_len in 0u64..40,
    ) {
        let h = apply(valid_header(), &muts);
        let file_size = 8 + h.len() as u64 + data_len;
        if let Ok(header) = parse_safetensors_header(Path::new("m"), &h, file_size) {
            let mut spans: Vec<(u64, u64)> = Vec::new();
            for t in &header.tensors {
                prop_assert!(t.offset >= header.data_start, "{} starts in the data area", t.name);
                prop_assert!(t.offset + t.len <= file_size, "{} ends inside the file", t.name);
                let n: u64 = t.shape.iter().product();
                prop_assert_eq!(n * direct_io::dtype_size(&t.dtype).expect("dtype"), t.len);
                if t.len > 0 {
                    spans.push((t.offset, t.offset + t.len));
                }
            }
            spans.sort();
            for w in spans.windows(2) {
                prop_assert!(w[0].1 <= w[1].0, "no overlap");
            }
        }
    }
}
