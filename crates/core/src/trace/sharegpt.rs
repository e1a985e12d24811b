//! ShareGPT conversations: a JSON array or JSON Lines of `{id, conversations:[{from, value}]}`
//! (`conversation` accepted too). Roles: human/user, gpt/assistant/chatgpt/bard/bing/model,
//! system; anything else is an error naming the field.

use super::json::{read_array, read_jsonl};
use super::Skipped;
use crate::error::RecordError;
use serde::Deserialize;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Role {
    #[serde(alias = "human", alias = "user")]
    User,
    #[serde(alias = "gpt", alias = "assistant", alias = "chatgpt", alias = "bard", alias = "bing", alias = "model")]
    Assistant,
    #[serde(alias = "system")]
    System,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Message {
    #[serde(rename = "from")]
    pub role: Role,
    #[serde(rename = "value")]
    pub text: String,
}

/// One ShareGPT record.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Conversation {
    /// The record's id (any JSON value; informative only).
    #[serde(default)]
    pub id: Option<serde_json::Value>,
    #[serde(alias = "conversation")]
    pub conversations: Vec<Message>,
}

/// Parses a ShareGPT document (array or JSONL, told apart by the first byte).
pub fn parse(bytes: &[u8], lenient: bool, skipped: &mut Skipped) -> Result<Vec<Conversation>, RecordError> {
    let array = bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[');
    let keep = |_, c: Conversation| Ok(c);
    if array {
        read_array(bytes, lenient, skipped, keep)
    } else {
        read_jsonl(bytes, lenient, skipped, keep)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Location;

    #[test]
    fn reads_roles_and_both_layouts() {
        let line = r#"{"id":"a","conversations":[{"from":"system","value":"s"},{"from":"human","value":"hi"},{"from":"gpt","value":"yo"},{"from":"user","value":"q"},{"from":"chatgpt","value":"r"}]}"#;
        let mut sk = Skipped::default();
        let c = parse(line.as_bytes(), false, &mut sk).unwrap();
        let roles: Vec<Role> = c[0].conversations.iter().map(|m| m.role).collect();
        assert_eq!(roles, vec![Role::System, Role::User, Role::Assistant, Role::User, Role::Assistant]);
        let arr = format!("[{line},\n {{\"conversation\":[]}}]");
        assert_eq!(parse(arr.as_bytes(), false, &mut sk).unwrap().len(), 2);
    }

    #[test]
    fn bad_role_and_missing_value_are_located() {
        let mut sk = Skipped::default();
        let doc = b"{\"conversations\":[{\"from\":\"human\",\"value\":\"x\"}]}\n{\"conversations\":[{\"from\":\"robot\",\"value\":\"x\"}]}";
        let e = parse(doc, false, &mut sk).unwrap_err();
        assert_eq!(e.location, Location::Line(2));
        assert_eq!(e.field, "conversations[0].from");
        assert!(e.message.contains("robot"), "{}", e.message);
        let e = parse(b"[{\"conversations\":[{\"from\":\"gpt\"}]}]", false, &mut sk).unwrap_err();
        assert_eq!(e.field, "conversations[0]");
        assert!(e.message.contains("missing field `value`"), "{}", e.message);
        assert_eq!(parse(doc, true, &mut sk).unwrap().len(), 1);
    }
}
