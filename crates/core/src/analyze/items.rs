//! What the prefix analysis runs over: the conversations of a trace as text (counted in
//! Unicode scalar values) or as token sequences, in the chosen scope (whole conversation —
//! every message's value concatenated with nothing between — or the first user message).

use super::Scope;
use crate::trace::native::Content;
use crate::trace::sharegpt::Role;
use crate::trace::Records;
use crate::workload::prefix_trie::Items;
pub use crate::workload::prefix_trie::Tokens;
use crate::workload::{Chunk, SeqId, Workload, RESERVED_TOKEN_BASE};
use std::cmp::Ordering;

/// Conversations as text; lengths and common prefixes in characters.
pub struct Texts {
    texts: Vec<String>,
    chars: Vec<usize>,
}

impl Texts {
    /// Wraps texts, counting their characters.
    pub fn new(texts: Vec<String>) -> Self {
        let chars = texts.iter().map(|t| t.chars().count()).collect();
        Self { texts, chars }
    }
    /// The texts.
    pub fn texts(&self) -> &[String] {
        &self.texts
    }
    /// The first `len` characters of text `i`, escaped, at most `max` of them.
    pub fn describe(&self, i: usize, len: usize, max: usize) -> String {
        self.texts[i].chars().take(len.min(max)).flat_map(char::escape_debug).collect()
    }
}

impl Items for Texts {
    fn count(&self) -> usize {
        self.texts.len()
    }
    fn len(&self, i: usize) -> usize {
        self.chars[i]
    }
    fn cmp(&self, a: usize, b: usize) -> Ordering {
        // UTF-8 byte order is code point order.
        self.texts[a].as_bytes().cmp(self.texts[b].as_bytes())
    }
    fn lcp(&self, a: usize, b: usize) -> usize {
        let (x, y) = (&self.texts[a], &self.texts[b]);
        let mut bytes = x.bytes().zip(y.bytes()).take_while(|(p, q)| p == q).count();
        while !x.is_char_boundary(bytes) {
            bytes -= 1;
        }
        x[..bytes].chars().count()
    }
}

impl Tokens<'_> {
    /// The first `len` tokens of item `i`, at most `max` pieces: token ids, `h12` for a whole
    /// Mooncake hash block (`h12..h15` for a run of them, `h16(100)` for a partial one) when
    /// `trace_block` is given, `s<offset>+<len>` for other synthetic runs.
    pub fn describe(&self, i: usize, len: usize, max: usize, trace_block: Option<u32>) -> String {
        let (seq, _) = self.items[i];
        let mut parts: Vec<String> = Vec::new();
        for c in self.store.chunks(seq, 0, len) {
            match c {
                Chunk::Slice(ids) => parts.extend(ids.iter().map(u32::to_string)),
                Chunk::Run { base, len } => {
                    let off = base.wrapping_sub(RESERVED_TOKEN_BASE);
                    match trace_block {
                        Some(b) if base >= RESERVED_TOKEN_BASE && off % b == 0 => {
                            let (first, full, rest) = (off / b, len / b, len % b);
                            if full == 1 {
                                parts.push(format!("h{first}"));
                            } else if full > 1 {
                                parts.push(format!("h{first}..h{}", first + full - 1));
                            }
                            if rest > 0 {
                                parts.push(format!("h{}({rest})", first + full));
                            }
                        }
                        _ => parts.push(format!("s{off}+{len}")),
                    }
                }
            }
            if parts.len() > max {
                break;
            }
        }
        let more = parts.len() > max;
        parts.truncate(max);
        format!("[{}{}]", parts.join(" "), if more { " …" } else { "" })
    }
}

/// The conversations of a text trace (ShareGPT, or native with text prompts), in `scope`.
/// `None` when the trace carries no text.
pub fn texts(records: &Records, scope: Scope) -> Option<Vec<String>> {
    match records {
        Records::Sharegpt(convs) => Some(
            convs
                .iter()
                .filter_map(|c| match scope {
                    Scope::Conversation => Some(c.conversations.iter().map(|m| m.text.as_str()).collect()),
                    Scope::FirstTurn => c.conversations.iter().find(|m| m.role == Role::User).map(|m| m.text.clone()),
                })
                .collect(),
        ),
        Records::Native(recs) => {
            fn text(c: &Content) -> Option<&str> {
                match c {
                    Content::Text(t) => Some(t.as_str()),
                    Content::Ids(_) => None,
                }
            }
            if recs.iter().any(|r| text(&r.prompt).is_none()) {
                return None;
            }
            // Group by session in file order; records without one stand alone.
            let mut out: Vec<String> = Vec::new();
            let mut slot: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
            for r in recs {
                let idx = match &r.session {
                    Some(k) => match slot.get(k.as_str()) {
                        Some(_) if scope == Scope::FirstTurn => continue,
                        Some(&i) => i,
                        None => {
                            slot.insert(k, out.len());
                            out.push(String::new());
                            out.len() - 1
                        }
                    },
                    None => {
                        out.push(String::new());
                        out.len() - 1
                    }
                };
                out[idx].push_str(text(&r.prompt).expect("checked above"));
                if scope == Scope::Conversation {
                    if let Some(o) = r.output.as_ref().and_then(text) {
                        out[idx].push_str(o);
                    }
                }
            }
            Some(out)
        }
        Records::Mooncake(_) | Records::Lengths(_) => None,
    }
}

/// The conversations of a built workload as token sequences: one per session (all its turns
/// with outputs, or its first prompt), and each request without a session by its prompt.
pub fn workload_tokens(w: &Workload, scope: Scope) -> Vec<(SeqId, usize)> {
    let mut by_session: std::collections::BTreeMap<u32, (SeqId, usize)> = Default::default();
    let mut out = Vec::new();
    for r in &w.requests {
        match r.session {
            None => out.push((r.seq, r.prompt_len as usize)),
            Some(s) => {
                let len = match scope {
                    Scope::Conversation => (r.prompt_len + r.output_len) as usize,
                    Scope::FirstTurn => r.prompt_len as usize,
                };
                let e = by_session.entry(s).or_insert((r.seq, len));
                if scope == Scope::Conversation {
                    e.1 = e.1.max(len);
                }
            }
        }
    }
    out.extend(by_session.into_values());
    out
}
