//! Text → token ids. Real offline BPE (`cl100k`, `o200k` from the `bpe-openai` crate), a
//! deterministic 4-characters-per-token proxy (`chars4`), and, behind the `hf` cargo feature,
//! a local Hugging Face `tokenizer.json` (`hf:PATH`). Batches are tokenized in parallel.

use crate::error::{Error, Result};
use rayon::prelude::*;
use std::str::FromStr;

/// Which tokenizer to use (`--tokenizer`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenizerKind {
    /// OpenAI cl100k_base (GPT-4); close to Llama-3's vocabulary in token counts.
    Cl100k,
    /// OpenAI o200k_base (GPT-4o).
    O200k,
    /// One token per 4 Unicode scalar values; the id is a hash of the 4 characters.
    Chars4,
    /// A Hugging Face `tokenizer.json` at this path (needs the `hf` feature).
    Hf(String),
}

impl FromStr for TokenizerKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "cl100k" | "cl100k_base" => Ok(Self::Cl100k),
            "o200k" | "o200k_base" => Ok(Self::O200k),
            "chars4" => Ok(Self::Chars4),
            _ => match s.strip_prefix("hf:") {
                Some(p) if !p.is_empty() => Ok(Self::Hf(p.to_string())),
                _ => Err(Error::UnknownTokenizer(s.to_string())),
            },
        }
    }
}

impl std::fmt::Display for TokenizerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Cl100k => f.write_str("cl100k"),
            Self::O200k => f.write_str("o200k"),
            Self::Chars4 => f.write_str("chars4"),
            Self::Hf(p) => write!(f, "hf:{p}"),
        }
    }
}

/// A ready tokenizer.
pub struct Tokenizer {
    kind: TokenizerKind,
    inner: Inner,
}

enum Inner {
    Bpe(&'static bpe_openai::Tokenizer),
    Chars4,
    #[cfg(feature = "hf")]
    Hf(Box<tokenizers::Tokenizer>),
}

/// Size of the id space of the `chars4` proxy.
pub const CHARS4_VOCAB: u32 = 100_000;

impl Tokenizer {
    /// Loads the tokenizer (BPE tables are built once per process).
    pub fn new(kind: &TokenizerKind) -> Result<Self> {
        let inner = match kind {
            TokenizerKind::Cl100k => Inner::Bpe(bpe_openai::cl100k_base()),
            TokenizerKind::O200k => Inner::Bpe(bpe_openai::o200k_base()),
            TokenizerKind::Chars4 => Inner::Chars4,
            TokenizerKind::Hf(path) => Self::load_hf(path)?,
        };
        Ok(Self { kind: kind.clone(), inner })
    }

    #[cfg(feature = "hf")]
    fn load_hf(path: &str) -> Result<Inner> {
        tokenizers::Tokenizer::from_file(path)
            .map(|t| Inner::Hf(Box::new(t)))
            .map_err(|e| Error::Tokenizer { name: format!("hf:{path}"), message: e.to_string() })
    }

    #[cfg(not(feature = "hf"))]
    fn load_hf(path: &str) -> Result<Inner> {
        Err(Error::Tokenizer {
            name: format!("hf:{path}"),
            message: "this build has no Hugging Face tokenizer support; rebuild with `--features hf`".into(),
        })
    }

    /// Which tokenizer this is.
    pub fn kind(&self) -> &TokenizerKind {
        &self.kind
    }

    /// Token ids of `text` (no special tokens added).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        match &self.inner {
            Inner::Bpe(t) => Ok(t.encode(text)),
            Inner::Chars4 => Ok(chars4(text)),
            #[cfg(feature = "hf")]
            Inner::Hf(t) => t
                .encode(text, false)
                .map(|e| e.get_ids().to_vec())
                .map_err(|e| Error::Tokenizer { name: self.kind.to_string(), message: e.to_string() }),
        }
    }

    /// Tokenizes many texts in parallel; the output order matches the input.
    pub fn encode_batch<S: AsRef<str> + Sync>(&self, texts: &[S]) -> Result<Vec<Vec<u32>>> {
        texts.par_iter().map(|t| self.encode(t.as_ref())).collect()
    }
}

fn chars4(text: &str) -> Vec<u32> {
    let chars: Vec<char> = text.chars().collect();
    chars
        .chunks(4)
        .map(|c| {
            // FNV-1a over the scalar values: the same 4 characters always give the same id.
            let mut h: u32 = 0x811c_9dc5;
            for &ch in c {
                h = (h ^ ch as u32).wrapping_mul(0x0100_0193);
            }
            h % CHARS4_VOCAB
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_kinds() {
        assert_eq!("cl100k".parse::<TokenizerKind>().unwrap(), TokenizerKind::Cl100k);
        assert_eq!(
            "hf:/x/tokenizer.json".parse::<TokenizerKind>().unwrap(),
            TokenizerKind::Hf("/x/tokenizer.json".into())
        );
        assert!("gpt2".parse::<TokenizerKind>().is_err());
        assert!("hf:".parse::<TokenizerKind>().is_err());
    }

    #[test]
    fn chars4_counts_and_is_deterministic() {
        let t = Tokenizer::new(&TokenizerKind::Chars4).unwrap();
        let n = |s: &str| t.encode(s).unwrap().len();
        assert_eq!(n(""), 0);
        assert_eq!(n("abcd"), 1);
        assert_eq!(n("abcde"), 2);
        assert_eq!(n("héllo wörld"), 3); // 11 scalar values
        let ids = t.encode("abcdabcd").unwrap();
        assert_eq!(ids[0], ids[1]);
    }

    #[test]
    fn cl100k_is_real_bpe() {
        let t = Tokenizer::new(&TokenizerKind::Cl100k).unwrap();
        // "hello world" is two tokens in cl100k_base: [15339, 1917].
        assert_eq!(t.encode("hello world").unwrap(), vec![15339, 1917]);
        let batch = t.encode_batch(&["a b", "hello world"]).unwrap();
        assert_eq!(batch[1], vec![15339, 1917]);
    }

    #[cfg(feature = "hf")]
    #[test]
    fn hf_tokenizer_json_loads_from_a_local_file() {
        let json = r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,
            "pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,
            "model":{"type":"WordLevel","vocab":{"hello":0,"world":1,"[UNK]":2},"unk_token":"[UNK]"}}"#;
        let dir = std::env::temp_dir().join(format!("cachesim-hf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tokenizer.json");
        std::fs::write(&path, json).unwrap();
        let kind: TokenizerKind = format!("hf:{}", path.display()).parse().unwrap();
        let t = Tokenizer::new(&kind).unwrap();
        assert_eq!(t.encode("hello world again").unwrap(), vec![0, 1, 2]);
        assert!(Tokenizer::new(&TokenizerKind::Hf(dir.join("missing.json").display().to_string())).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(not(feature = "hf"))]
    #[test]
    fn hf_without_the_feature_says_how_to_get_it() {
        let e = Tokenizer::new(&TokenizerKind::Hf("x.json".into())).err().unwrap().to_string();
        assert!(e.contains("--features hf"), "{e}");
    }
}
