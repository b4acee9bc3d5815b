//! Finding a chunk's lines in a file, as Codex's `seek_sequence`: the first
//! place in a range where they match exactly; failing that anywhere in the
//! range, ignoring trailing whitespace; then ignoring leading and trailing
//! whitespace; then also reading typographic dashes, quotes and spaces as
//! their ASCII forms. So an exact match further on wins over a fuzzy one
//! nearer.
//!
//! Lines compare by 64-bit hashes, computed once per file and level, and
//! are checked in full on a hash match; every hash and comparison is
//! charged to a [`Budget`], which bounds the work of a whole patch.

use super::PatchErrorKind as Kind;
use crate::limits::PATCH_MATCH_STEPS_MAX;

/// How loosely two lines compare, strictest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fuzz {
    Exact,
    TrailingSpace,
    Space,
    Punctuation,
}

const LEVELS: [Fuzz; 4] = [
    Fuzz::Exact,
    Fuzz::TrailingSpace,
    Fuzz::Space,
    Fuzz::Punctuation,
];

/// The matching work one patch may still do, in steps.
pub(super) struct Budget(usize);

impl Budget {
    pub(super) fn new() -> Self {
        Budget(PATCH_MATCH_STEPS_MAX)
    }

    fn spend(&mut self, steps: usize) -> Result<(), Kind> {
        self.0 = self.0.checked_sub(steps).ok_or(Kind::TooCostly)?;
        Ok(())
    }
}

/// A file's lines, with their hashes per level once a seek needed them.
pub(super) struct Haystack<'a> {
    lines: &'a [&'a str],
    keys: [Option<Vec<u64>>; LEVELS.len()],
}

impl<'a> Haystack<'a> {
    pub(super) fn new(lines: &'a [&'a str]) -> Self {
        Haystack {
            lines,
            keys: Default::default(),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.lines.len()
    }

    /// The first index `at` in `from..=to` where `pattern` matches the lines
    /// from `at` on, at the strictest level that matches anywhere there.
    pub(super) fn seek(
        &mut self,
        pattern: &[&str],
        from: usize,
        to: usize,
        budget: &mut Budget,
    ) -> Result<Option<usize>, Kind> {
        let (n, m) = (self.lines.len(), pattern.len());
        let Some(last) = n.checked_sub(m) else {
            return Ok(None);
        };
        let to = to.min(last);
        if m == 0 || from > to {
            return Ok(None);
        }
        let lines = self.lines;
        for level in LEVELS {
            let slot = &mut self.keys[level as usize];
            if slot.is_none() {
                budget.spend(n)?;
            }
            let keys = slot.get_or_insert_with(|| lines.iter().map(|l| key(level, l)).collect());
            budget.spend(m)?;
            let want: Vec<u64> = pattern.iter().map(|p| key(level, p)).collect();
            for at in from..=to {
                let equal = keys[at..at + m]
                    .iter()
                    .zip(&want)
                    .take_while(|(a, b)| a == b)
                    .count();
                budget.spend(equal + 1)?;
                if equal == m {
                    budget.spend(m)?;
                    let window = &lines[at..at + m];
                    if window.iter().zip(pattern).all(|(l, p)| same(level, l, p)) {
                        return Ok(Some(at));
                    }
                }
            }
        }
        Ok(None)
    }
}

/// Typographic punctuation as ASCII (Codex's list): dashes and the minus
/// sign, curly quotes, and the non-breaking and fixed-width spaces.
fn ascii(c: char) -> char {
    match c {
        '\u{2010}'..='\u{2015}' | '\u{2212}' => '-',
        '\u{2018}'..='\u{201B}' => '\'',
        '\u{201C}'..='\u{201F}' => '"',
        '\u{00A0}' | '\u{2002}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => ' ',
        other => other,
    }
}

/// FNV-1a, 64 bits: fast on short lines; a collision only costs a check.
struct Fnv(u64);

impl Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

fn key(level: Fuzz, line: &str) -> u64 {
    let mut hash = Fnv(0xcbf2_9ce4_8422_2325);
    match level {
        Fuzz::Exact => hash.write(line.as_bytes()),
        Fuzz::TrailingSpace => hash.write(line.trim_end().as_bytes()),
        Fuzz::Space => hash.write(line.trim().as_bytes()),
        Fuzz::Punctuation => {
            for c in line.trim().chars().map(ascii) {
                hash.write(c.encode_utf8(&mut [0; 4]).as_bytes());
            }
        }
    }
    hash.0
}

fn same(level: Fuzz, a: &str, b: &str) -> bool {
    match level {
        Fuzz::Exact => a == b,
        Fuzz::TrailingSpace => a.trim_end() == b.trim_end(),
        Fuzz::Space => a.trim() == b.trim(),
        Fuzz::Punctuation => a.trim().chars().map(ascii).eq(b.trim().chars().map(ascii)),
    }
}

#[cfg(test)]
mod tests {
    use super::super::apply::update;
    use super::super::{Chunk, Line};
    use super::*;

    fn seek(lines: &[&str], pattern: &[&str], from: usize) -> Option<usize> {
        Haystack::new(lines)
            .seek(pattern, from, usize::MAX, &mut Budget::new())
            .unwrap()
    }

    #[test]
    fn exact_match_from_the_cursor() {
        let lines = ["a", "b", "c", "a", "b"];
        assert_eq!(seek(&lines, &["a", "b"], 0), Some(0));
        assert_eq!(seek(&lines, &["a", "b"], 1), Some(3));
        assert_eq!(seek(&lines, &["a", "b"], 4), None);
        assert_eq!(seek(&lines, &["b", "x"], 0), None);
        assert_eq!(seek(&lines, &["a", "b", "c", "a", "b", "c"], 0), None);
        assert_eq!(seek(&[], &["a"], 0), None);
        assert_eq!(seek(&lines, &[], 0), None);
    }

    #[test]
    fn trailing_whitespace_is_the_second_level() {
        assert_eq!(seek(&["foo  ", "bar\t"], &["foo", "bar"], 0), Some(0));
        assert_eq!(seek(&["foo"], &["foo \t"], 0), Some(0));
        // Leading whitespace still counts at this level ...
        assert_eq!(seek(&["  foo ", "foo  "], &["foo"], 0), Some(1));
        // ... and an exact match anywhere wins over a fuzzy one before it.
        assert_eq!(seek(&["foo  ", "foo"], &["foo"], 0), Some(1));
    }

    #[test]
    fn surrounding_whitespace_is_the_third_level() {
        assert_eq!(seek(&["    foo   ", "\tbar"], &["foo", "bar"], 0), Some(0));
        assert_eq!(seek(&["  foo", "foo "], &["foo"], 0), Some(1));
        assert_eq!(seek(&["f oo"], &["foo"], 0), None);
    }

    #[test]
    fn typographic_punctuation_is_the_last_level() {
        let lines = [
            "let s = \u{201C}hi\u{201D}; // it\u{2019}s a\u{00A0}test \u{2014} ok",
            "x \u{2212} y",
        ];
        let pattern = ["  let s = \"hi\"; // it's a test - ok", "x - y"];
        assert_eq!(seek(&lines, &pattern, 0), Some(0));
        // The ASCII form of the file matches the typographic form too.
        assert_eq!(seek(&["a - b"], &["a \u{2013} b"], 0), Some(0));
        // Other characters stay distinct.
        assert_eq!(seek(&["a \u{2026} b"], &["a ... b"], 0), None);
        // An exact match later wins.
        assert_eq!(seek(&["a \u{2013} b", "a - b"], &["a - b"], 0), Some(1));
    }

    #[test]
    fn the_range_bounds_the_start() {
        let lines = ["a", "b", "a", "b"];
        let mut hay = Haystack::new(&lines);
        let mut budget = Budget::new();
        assert_eq!(hay.seek(&["a", "b"], 1, 1, &mut budget), Ok(None));
        assert_eq!(hay.seek(&["a", "b"], 2, 2, &mut budget), Ok(Some(2)));
        assert_eq!(hay.seek(&["b"], 3, 99, &mut budget), Ok(Some(3)));
        assert_eq!(hay.seek(&["b"], 9, 99, &mut budget), Ok(None));
    }

    #[test]
    fn equal_lines_have_equal_keys_at_each_level() {
        for (level, a, b) in [
            (Fuzz::Exact, "x y", "x y"),
            (Fuzz::TrailingSpace, "x y \t", "x y"),
            (Fuzz::Space, " \tx y ", "x y"),
            (
                Fuzz::Punctuation,
                "\u{3000}\u{2018}x\u{2019}\u{00A0}\u{2014}",
                "'x' -",
            ),
        ] {
            assert!(same(level, a, b), "{level:?}");
            assert_eq!(key(level, a), key(level, b), "{level:?}");
        }
        assert_ne!(key(Fuzz::Exact, "a "), key(Fuzz::Exact, "a"));
        assert!(!same(Fuzz::Punctuation, "a b", "ab"));
    }

    #[test]
    fn a_long_patch_on_a_long_file_costs_little() {
        // 100 chunks on a 10,000-line file: each is sought from the end of
        // the one before, so the work is about one pass over the file.
        let text: String = (0..10_000).map(|i| format!("line {}\n", i % 500)).collect();
        let chunks: Vec<Chunk> = (0..100)
            .map(|k| {
                let at = k * 100 + 50;
                let line = |i: usize| format!("line {}", i % 500);
                Chunk {
                    headers: vec![],
                    lines: vec![
                        Line::Context(line(at - 2)),
                        Line::Context(line(at - 1)),
                        Line::Remove(line(at)),
                        Line::Add(format!("changed {k}")),
                        Line::Context(line(at + 1)),
                    ],
                    end_of_file: false,
                }
            })
            .collect();
        let mut budget = Budget::new();
        let out = update("f", &text, &chunks, &mut budget).unwrap();
        assert_eq!(out.lines().count(), 10_000);
        assert!(out.contains("line 49\nchanged 0\nline 51\n"));
        assert!(out.contains("line 449\nchanged 99\nline 451\n"));
        let spent = PATCH_MATCH_STEPS_MAX - budget.0;
        assert!(spent < 40_000, "{spent} steps");
    }

    #[test]
    fn the_budget_ends_costly_matching() {
        // A repetitive file and a pattern that almost matches everywhere.
        let lines = vec![""; 20_000];
        let mut pattern = vec![""; 5_000];
        pattern.push("x");
        let mut hay = Haystack::new(&lines);
        let mut budget = Budget::new();
        assert_eq!(
            hay.seek(&pattern, 0, usize::MAX, &mut budget),
            Err(Kind::TooCostly)
        );
    }
}
