//! One table per vocabulary of words the cache writes and reads back (the event log's events,
//! the reasons `stats` counts, the fleet tier's counters, the lock file's notes, the failpoints):
//! [`words!`] declares an enum with each variant's word once, and derives `Display` (the writer)
//! and `FromStr` (the reader) from that one line, so the two cannot drift.

/// A word that names no variant of its vocabulary (written by another version, or damaged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownWord(pub(crate) String);

impl std::fmt::Display for UnknownWord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unknown word {:?}", self.0)
    }
}

impl std::error::Error for UnknownWord {}

/// Declares a vocabulary: a fieldless enum whose variants are written as, and read back from,
/// the words given beside them.
macro_rules! words {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $word:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )*
        }

        impl $name {
            /// Every variant, in declaration order.
            #[allow(dead_code)]
            $vis const ALL: &'static [$name] = &[$($name::$variant),*];

            /// The variant's word.
            $vis const fn word(self) -> &'static str {
                match self {
                    $( $name::$variant => $word, )*
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.word())
            }
        }

        impl std::str::FromStr for $name {
            type Err = $crate::base::words::UnknownWord;
            fn from_str(word: &str) -> Result<Self, Self::Err> {
                match word {
                    $( $word => Ok($name::$variant), )*
                    other => Err($crate::base::words::UnknownWord(other.to_string())),
                }
            }
        }
    };
}
pub(crate) use words;

#[cfg(test)]
mod tests {
    words! {
        /// A vocabulary of two words.
        enum Two {
            One = "one",
            Other = "other-one",
        }
    }

    #[test]
    fn every_word_reads_back_as_its_variant_and_no_other_word_reads() {
        for two in Two::ALL {
            assert_eq!(two.to_string().parse::<Two>(), Ok(*two), "{two} reads back");
        }
        assert_eq!(Two::Other.to_string(), "other-one");
        assert!(
            "two".parse::<Two>().is_err(),
            "an unknown word names nothing"
        );
        assert!("One".parse::<Two>().is_err(), "words are read exactly");
    }
}
