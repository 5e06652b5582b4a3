//! Input mutation for the property tests of parsers (profiles, traces, results): every
//! crate that reads a file a user hands in feeds its parser edited copies of a valid file
//! and checks for a clear error, never a panic. The edits are one function here, so the
//! four parsers' tests mutate alike.

/// Bytes JSON is made of, so edits often keep a parseable shape and reach the checks after
/// parsing (a random byte mostly breaks the syntax).
pub const JSON_BYTES: &[u8] = b"0123456789-+.eE\"{}[],: nultrfa\n\\";

/// Applies `edits` to a copy of `valid`: each `(at, byte, how)` replaces (`how % 3 == 0`),
/// inserts (1) or deletes (2) at position `at` modulo the current length (past the end:
/// appends).
pub fn mutate(valid: &[u8], edits: &[(usize, u8, u8)]) -> Vec<u8> {
    let mut out = valid.to_vec();
    for &(at, byte, how) in edits {
        let i = at % (out.len() + 1);
        match how % 3 {
            0 if i < out.len() => out[i] = byte,
            1 => out.insert(i, byte),
            _ if i < out.len() => {
                out.remove(i);
            }
            _ => out.push(byte),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replace_insert_delete_and_append() {
        assert_eq!(mutate(b"abc", &[(1, b'x', 0)]), b"axc");
        assert_eq!(mutate(b"abc", &[(1, b'x', 1)]), b"axbc");
        assert_eq!(mutate(b"abc", &[(1, b'x', 2)]), b"ac");
        assert_eq!(mutate(b"abc", &[(3, b'x', 0)]), b"abcx");
        assert_eq!(mutate(b"", &[(7, b'x', 2)]), b"x");
    }
}
