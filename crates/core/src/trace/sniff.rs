//! Bytes that are not a text trace, named so that a person can fix the file: a compressed file
//! or archive other than gzip (bzip2, zstd, xz, 7z, zip — recognised by their magic numbers),
//! UTF-16 text (a byte-order mark `FF FE` / `FE FF`, or every other byte NUL), and the odd bytes
//! that break a record's line: a NUL, a Ctrl-Z (the old DOS end-of-file mark), a carriage return
//! inside a line (a file whose lines end in CR alone, as on classic Mac OS), and a UTF-8
//! byte-order mark at the start of a later line (files joined together).

/// Compressed and archive formats by their magic numbers: name and the way to a readable trace.
const CONTAINERS: [(&[u8], &str, &str); 5] = [
    (b"BZh", "a bzip2-compressed file", "decompress it first (bunzip2)"),
    (&[0x28, 0xB5, 0x2F, 0xFD], "a zstd-compressed file", "decompress it first (unzstd)"),
    (&[0xFD, b'7', b'z', b'X', b'Z', 0x00], "an xz-compressed file", "decompress it first (unxz)"),
    (&[b'7', b'z', 0xBC, 0xAF, 0x27, 0x1C], "a 7z archive", "extract the trace from it (7z x)"),
    (b"PK\x03\x04", "a zip archive", "extract the trace from it (unzip)"),
];

/// What the content is when no trace reader can read it as text (`None`: it may be a trace).
pub fn not_text(bytes: &[u8]) -> Option<String> {
    for (magic, what, fix) in CONTAINERS {
        // bzip2's "BZh" is followed by the block size digit, so plain text starting "BZh" passes.
        let bzip_digit = magic != b"BZh" || bytes.get(3).is_some_and(|b| (b'1'..=b'9').contains(b));
        if bytes.starts_with(magic) && bzip_digit {
            return Some(format!("{what}: {fix}, or compress it with gzip (.gz is read as it is)"));
        }
    }
    utf16(bytes).map(|enc| {
        format!("UTF-16 {enc} text: convert it to UTF-8 first (iconv -f UTF-16{enc} -t UTF-8 FILE > FILE.utf8)")
    })
}

/// `LE` or `BE` when `bytes` look like UTF-16: a byte-order mark, or (for ASCII content without
/// one) a NUL at every odd or every even position of the first bytes.
fn utf16(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(&[0xFF, 0xFE]) {
        return Some("LE");
    }
    if bytes.starts_with(&[0xFE, 0xFF]) {
        return Some("BE");
    }
    let head = &bytes[..bytes.len().min(64) & !1];
    if head.len() < 4 {
        return None;
    }
    let nul_at = |parity: usize| head.iter().skip(parity).step_by(2).all(|&b| b == 0);
    let text_at = |parity: usize| head.iter().skip(parity).step_by(2).all(|&b| b != 0);
    if nul_at(1) && text_at(0) {
        Some("LE")
    } else if nul_at(0) && text_at(1) {
        Some("BE")
    } else {
        None
    }
}

/// The first odd byte of `line`, if any: what most likely broke a record that does not parse.
/// Its position from 0, what it is, and how to fix the file.
pub fn odd_byte(line: &[u8]) -> Option<(usize, &'static str, &'static str)> {
    if line.starts_with(b"\xEF\xBB\xBF") {
        return Some((0, "a UTF-8 byte-order mark (EF BB BF)", "files joined together? remove it"));
    }
    line.iter().enumerate().find_map(|(i, &b)| match b {
        0x00 => Some((i, "a NUL byte (0x00)", "the file is binary, UTF-16, or was cut while being written")),
        0x1A => Some((i, "a Ctrl-Z byte (0x1A, an old DOS end-of-file mark)", "remove it")),
        b'\r' => Some((
            i,
            "a carriage return (CR, 0x0D) inside the line",
            "lines that end in CR alone (classic Mac OS) must end in LF (tr '\\r' '\\n')",
        )),
        _ => None,
    })
}

/// Line `n` (from 1) of `bytes`, without its line end.
pub fn line(bytes: &[u8], n: u64) -> Option<&[u8]> {
    let l = bytes.split(|&b| b == b'\n').nth(n.checked_sub(1)? as usize)?;
    Some(l.strip_suffix(b"\r").unwrap_or(l))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compressed_files_and_utf16_are_named() {
        let named = |b: &[u8]| not_text(b).unwrap_or_default();
        assert!(named(b"BZh91AY&SY").starts_with("a bzip2-compressed file: decompress it first (bunzip2)"));
        assert!(named(&[0x28, 0xB5, 0x2F, 0xFD, 0]).starts_with("a zstd-compressed file"));
        assert!(named(b"\xFD7zXZ\x00\x00").starts_with("an xz-compressed file"));
        assert!(named(b"PK\x03\x04rest").starts_with("a zip archive: extract the trace from it (unzip)"));
        assert!(named(b"\xFF\xFE{\x00").starts_with("UTF-16 LE text: convert it to UTF-8"));
        assert!(named(b"\xFE\xFF\x00{").starts_with("UTF-16 BE text"));
        assert!(named(b"{\x00\"\x00p\x00r\x00").starts_with("UTF-16 LE text"));
        assert!(named(b"\x00{\x00\"\x00p\x00r").starts_with("UTF-16 BE text"));
        for text in [&b"{\"prompt\": \"a\"}"[..], b"BZh is a word", b"TIMESTAMP,a\n", b"[]", b""] {
            assert_eq!(not_text(text), None, "{text:?}");
        }
    }

    #[test]
    fn odd_bytes_are_found_where_they_are() {
        assert_eq!(odd_byte(b"{\"a\": 1}"), None);
        assert_eq!(odd_byte(b"{\"a\x00\"}").map(|(i, _, _)| i), Some(3));
        assert!(odd_byte(b"\x1a").unwrap().1.contains("Ctrl-Z"));
        assert!(odd_byte(b"{}\r{}").unwrap().2.contains("CR alone"));
        assert!(odd_byte(b"\xEF\xBB\xBF{}").unwrap().1.contains("byte-order mark"));
        assert_eq!(line(b"a\r\nb\nc", 2), Some(&b"b"[..]));
        assert_eq!(line(b"a", 0), None);
    }
}
