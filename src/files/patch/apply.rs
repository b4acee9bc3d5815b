//! One Update's chunks applied to a file's text.
//!
//! Chunks are placed in order, each sought from where the previous one
//! ended (after its `@@` headers, each sought in turn), then the file is
//! written once, copying untouched lines. Context lines keep the file's own
//! text, so a fuzzy match changes only the lines the chunk removes or adds.
//!
//! Lines: a file whose every line break is CRLF is read and written with
//! CRLF; any other splits at `\n` (a stray `\r` stays part of its line and
//! matches at the trailing-whitespace level). The result ends with a line
//! break unless it is empty, as Codex writes it.

use super::seek::{Budget, Haystack};
use super::{excerpt, Chunk, Line, PatchError, PatchErrorKind as Kind};
use crate::limits::FILE_BYTES_MAX;
use crate::text::shorten;

/// A chunk placed in the file: its lines replace the file's from `at`.
struct Edit<'c> {
    at: usize,
    lines: Vec<&'c Line>,
}

pub(super) fn update(
    path: &str,
    text: &str,
    chunks: &[Chunk],
    budget: &mut Budget,
) -> Result<String, PatchError> {
    // A plain rename keeps the bytes (no line ending is added).
    if chunks.is_empty() {
        return Ok(text.to_owned());
    }
    let crlf = text.contains('\n') && text.matches('\n').count() == text.matches("\r\n").count();
    let ending = if crlf { "\r\n" } else { "\n" };
    let mut lines: Vec<&str> = text.split(ending).collect();
    if lines.last() == Some(&"") {
        lines.pop();
    }
    let mut hay = Haystack::new(&lines);
    let mut edits = Vec::with_capacity(chunks.len());
    let mut cursor = 0;
    for (index, chunk) in chunks.iter().enumerate() {
        let edit = place(&mut hay, chunk, &mut cursor, budget).map_err(|kind| PatchError {
            file: Some(path.to_owned()),
            chunk: Some(index + 1),
            kind,
        })?;
        edits.push(edit);
    }
    // Only additions at the end of the file come out of order; the sort is
    // stable, so those at one place keep the patch's order.
    edits.sort_by_key(|edit| edit.at);

    let mut out = String::with_capacity(text.len());
    let mut push = |line: &str| {
        out.push_str(line);
        out.push_str(ending);
    };
    // Each edit starts at or after the end of the one before (the cursor
    // only moves forward), so `next <= edit.at`.
    let mut next = 0;
    for edit in &edits {
        lines[next..edit.at].iter().for_each(|l| push(l));
        next = edit.at;
        for line in &edit.lines {
            match line {
                Line::Context(_) => {
                    push(lines[next]);
                    next += 1;
                }
                Line::Remove(_) => next += 1,
                Line::Add(text) => push(text),
            }
        }
    }
    lines[next..].iter().for_each(|l| push(l));
    if out.len() > FILE_BYTES_MAX {
        return Err(PatchError {
            file: Some(path.to_owned()),
            chunk: None,
            kind: Kind::TooLarge { bytes: out.len() },
        });
    }
    Ok(out)
}

/// Where `chunk` applies, seeking from `cursor`, which it moves past it.
fn place<'c>(
    hay: &mut Haystack,
    chunk: &'c Chunk,
    cursor: &mut usize,
    budget: &mut Budget,
) -> Result<Edit<'c>, Kind> {
    let mut header_at = None;
    for header in &chunk.headers {
        let Some(at) = hay.seek(&[header.as_str()], *cursor, usize::MAX, budget)? else {
            return Err(Kind::HeaderNotFound {
                header: shorten(header).to_owned(),
                from: *cursor + 1,
            });
        };
        header_at = Some(at);
        *cursor = at + 1;
    }
    let all: Vec<&Line> = chunk.lines.iter().collect();
    let old =
        |lines: &[&'c Line]| -> Vec<&'c str> { lines.iter().filter_map(|l| l.old()).collect() };
    let pattern = old(&all);
    if pattern.is_empty() {
        // Only additions: after the headers, or else at the end (Codex's
        // `@@` then `+` lines appends).
        let at = match header_at {
            Some(_) if !chunk.end_of_file => *cursor,
            _ => hay.len(),
        };
        return Ok(Edit { at, lines: all });
    }
    // Tried in turn: the lines from the cursor; the same without trailing
    // empty context lines (one often stands for the file's final line
    // break, and Codex retries so too); then both at the last header's own
    // line (a model may repeat the header as the first context line).
    let short = without_trailing_blank(&all);
    let mut tries = vec![(*cursor, usize::MAX, &all)];
    if short.len() < all.len() {
        tries.push((*cursor, usize::MAX, &short));
    }
    if let Some(at) = header_at {
        tries.push((at, at, &all));
        if short.len() < all.len() {
            tries.push((at, at, &short));
        }
    }
    for (from, to, lines) in tries {
        let pattern = old(lines);
        let (from, to) = match chunk.end_of_file {
            // Only the place that ends the file.
            true => match hay.len().checked_sub(pattern.len()) {
                Some(end) if (from..=to).contains(&end) => (end, end),
                _ => continue,
            },
            false => (from, to),
        };
        if let Some(at) = hay.seek(&pattern, from, to, budget)? {
            *cursor = at + pattern.len();
            return Ok(Edit {
                at,
                lines: lines.clone(),
            });
        }
    }
    let shown = excerpt(&pattern);
    if chunk.end_of_file {
        if let Some(at) = hay.seek(&pattern, *cursor, usize::MAX, budget)? {
            return Err(Kind::NotAtEnd {
                line: at + 1,
                excerpt: shown,
            });
        }
    }
    Err(Kind::ContextNotFound {
        from: *cursor + 1,
        excerpt: shown,
    })
}

/// `lines` without the empty context lines that end its old lines.
fn without_trailing_blank<'c>(lines: &[&'c Line]) -> Vec<&'c Line> {
    let blank = |l: &Line| matches!(l, Line::Context(text) if text.is_empty());
    let last = lines.iter().rposition(|l| l.old().is_some() && !blank(l));
    lines
        .iter()
        .enumerate()
        .filter(|&(at, l)| last.is_some_and(|last| at <= last) || !blank(l))
        .map(|(_, l)| *l)
        .collect()
}
