//! The patch grammar (OpenAI Codex `apply_patch`), read line by line:
//!
//! ```text
//! *** Begin Patch
//! *** Add File: <path>        then lines `+<text>`
//! *** Delete File: <path>
//! *** Update File: <path>
//! *** Move to: <path>         optional, right after Update
//! @@ <line to seek>           optional headers, then lines ` `, `-`, `+`
//! *** End of File             optional, ends a chunk that ends the file
//! *** End Patch
//! ```
//!
//! Leniencies, as Codex has them: blank lines around the patch and between
//! sections, marker lines with surrounding whitespace, an Update's first
//! chunk without `@@`, an empty line in a chunk read as an empty context
//! line. Beyond Codex: several `@@` headers in a row (sought in turn, as the
//! format's instructions to models describe), a unified-diff range header
//! (`@@ -3,4 +3,5 @@`) read as a bare `@@`, and a Move with no chunk (a
//! plain rename). The patch's own line breaks may be CRLF; an added file's
//! lines end in `\n`.

use std::collections::BTreeSet;

use super::{in_file, Chunk, FilePatch, Line, Patch, PatchError, PatchErrorKind as Kind};
use crate::files::path::normalize_file;
use crate::limits::{PATCH_CHARS_MAX, PATCH_FILES_MAX, PATCH_HUNKS_MAX};
use crate::text::shorten;

const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";
const ADD: &str = "*** Add File:";
const DELETE: &str = "*** Delete File:";
const UPDATE: &str = "*** Update File:";
const MOVE: &str = "*** Move to:";
const END_OF_FILE: &str = "*** End of File";

pub(super) fn parse(text: &str) -> Result<Patch, PatchError> {
    // Counting stops one past the bound: an oversized text costs no more.
    let chars = text.chars().take(PATCH_CHARS_MAX + 1).count();
    if chars > PATCH_CHARS_MAX {
        return Err(Kind::TooLong.into());
    }
    let lines: Vec<&str> = text.lines().collect();
    let blank = |l: &&str| l.trim().is_empty();
    let first = lines.iter().position(|l| !blank(l));
    let last = lines.iter().rposition(|l| !blank(l));
    let (Some(first), Some(last)) = (first, last) else {
        return Err(Kind::NoBegin {
            found: String::new(),
        }
        .into());
    };
    if lines[first].trim() != BEGIN {
        return Err(Kind::NoBegin {
            found: shorten(lines[first].trim()).to_owned(),
        }
        .into());
    }
    if last == first || lines[last].trim() != END {
        return Err(Kind::NoEnd {
            found: shorten(lines[last].trim()).to_owned(),
        }
        .into());
    }
    let mut parser = Parser {
        lines: &lines[..last],
        at: first + 1,
        files: Vec::new(),
        touched: BTreeSet::new(),
        chunks: 0,
    };
    parser.sections()?;
    if parser.files.is_empty() {
        return Err(Kind::NoFile.into());
    }
    Ok(Patch {
        files: parser.files,
    })
}

struct Parser<'t> {
    /// The text's lines up to (not including) `*** End Patch`.
    lines: &'t [&'t str],
    /// Index of the next line to read.
    at: usize,
    files: Vec<FilePatch>,
    /// Every path a section names so far.
    touched: BTreeSet<String>,
    /// Chunks of all files so far.
    chunks: usize,
}

/// How a line of an Update section reads.
enum Read<'t> {
    /// `@@ <text>`: a line to seek; `None` for a bare `@@`.
    Header(Option<&'t str>),
    EndOfFile,
    /// Another `***` line: the section ends.
    Marker,
    Line(Line),
    Invalid,
}

impl<'t> Parser<'t> {
    /// The 1-based line number of `self.at`, for messages.
    fn line(&self) -> usize {
        self.at + 1
    }

    fn peek(&self) -> Option<&'t str> {
        self.lines.get(self.at).copied()
    }

    fn sections(&mut self) -> Result<(), PatchError> {
        while let Some(raw) = self.peek() {
            let head = raw.trim();
            if head.is_empty() {
                self.at += 1;
                continue;
            }
            if self.files.len() == PATCH_FILES_MAX {
                return Err(Kind::TooManyFiles.into());
            }
            let line = self.line();
            self.at += 1;
            if let Some(raw_path) = head.strip_prefix(ADD) {
                let path = self.path(raw_path, line)?;
                let content = self.added().map_err(|kind| in_file(&path, kind))?;
                self.files.push(FilePatch::Add { path, content });
            } else if let Some(raw_path) = head.strip_prefix(DELETE) {
                let path = self.path(raw_path, line)?;
                self.files.push(FilePatch::Delete { path });
            } else if let Some(raw_path) = head.strip_prefix(UPDATE) {
                let path = self.path(raw_path, line)?;
                let mut move_to = None;
                if let Some(raw_to) = self.peek().and_then(|l| l.trim().strip_prefix(MOVE)) {
                    let to_line = self.line();
                    self.at += 1;
                    let to = normalize_file(raw_to.trim()).map_err(|error| {
                        in_file(
                            &path,
                            Kind::Path {
                                line: to_line,
                                error,
                            },
                        )
                    })?;
                    // Moving a file onto itself is an update.
                    if to != path {
                        self.touch(&to, to_line)?;
                        move_to = Some(to);
                    }
                }
                let chunks = self.chunks(&path, line, move_to.is_some())?;
                self.files.push(FilePatch::Update {
                    path,
                    move_to,
                    chunks,
                });
            } else {
                return Err(Kind::Unexpected {
                    line,
                    found: shorten(head).to_owned(),
                }
                .into());
            }
        }
        Ok(())
    }

    /// The canonical form of a section's path, which no section named before.
    fn path(&mut self, raw: &str, line: usize) -> Result<String, PatchError> {
        let path = normalize_file(raw.trim()).map_err(|error| Kind::Path { line, error })?;
        self.touch(&path, line)?;
        Ok(path)
    }

    fn touch(&mut self, path: &str, line: usize) -> Result<(), PatchError> {
        if !self.touched.insert(path.to_owned()) {
            return Err(in_file(path, Kind::Twice { line }));
        }
        Ok(())
    }

    /// An added file's content: its `+` lines, each ending in `\n`, up to
    /// the next `***` line; blank lines may only follow them.
    fn added(&mut self) -> Result<String, Kind> {
        let mut content = String::new();
        while let Some(raw) = self.peek() {
            if let Some(text) = raw.strip_prefix('+') {
                content.push_str(text);
                content.push('\n');
            } else if self.at_section_end() {
                break;
            } else {
                return Err(Kind::AddLine {
                    line: self.line(),
                    found: shorten(raw).to_owned(),
                });
            }
            self.at += 1;
        }
        Ok(content)
    }

    /// Whether the next line that is not blank (if any) is a `***` line.
    fn at_section_end(&self) -> bool {
        self.lines[self.at..]
            .iter()
            .find(|l| !l.trim().is_empty())
            .is_none_or(|l| l.trim_start().starts_with("***"))
    }

    /// An Update section's chunks; `header` is its header's line number.
    fn chunks(&mut self, path: &str, header: usize, moves: bool) -> Result<Vec<Chunk>, PatchError> {
        let mut chunks = Vec::new();
        loop {
            // Empty lines before a chunk separate; ` ` is a context line.
            while self
                .peek()
                .is_some_and(|l| l.trim().is_empty() && !l.starts_with(' '))
            {
                self.at += 1;
            }
            let Some(raw) = self.peek() else { break };
            let start = self.line();
            let chunk = match read(raw) {
                Read::Marker => break,
                Read::EndOfFile => Err(Kind::EmptyChunk { line: start }),
                Read::Invalid => Err(Kind::ChunkLine {
                    line: start,
                    found: shorten(raw).to_owned(),
                }),
                Read::Header(_) | Read::Line(_) => self.chunk(start),
            }
            .map_err(|kind| in_chunk(path, chunks.len() + 1, kind))?;
            if self.chunks == PATCH_HUNKS_MAX {
                return Err(in_chunk(path, chunks.len() + 1, Kind::TooManyChunks));
            }
            self.chunks += 1;
            chunks.push(chunk);
        }
        if chunks.is_empty() && !moves {
            return Err(in_file(path, Kind::NoChunk { line: header }));
        }
        Ok(chunks)
    }

    /// One chunk: its headers, then its lines up to the next header, a
    /// `***` line or the end.
    fn chunk(&mut self, start: usize) -> Result<Chunk, Kind> {
        let mut chunk = Chunk {
            headers: Vec::new(),
            lines: Vec::new(),
            end_of_file: false,
        };
        while let Some(Read::Header(header)) = self.peek().map(read) {
            chunk.headers.extend(header.map(str::to_owned));
            self.at += 1;
        }
        while let Some(raw) = self.peek() {
            match read(raw) {
                Read::Line(line) => chunk.lines.push(line),
                Read::EndOfFile => {
                    chunk.end_of_file = true;
                    self.at += 1;
                    break;
                }
                Read::Header(_) | Read::Marker => break,
                Read::Invalid => {
                    return Err(Kind::ChunkLine {
                        line: self.line(),
                        found: shorten(raw).to_owned(),
                    })
                }
            }
            self.at += 1;
        }
        if chunk.lines.is_empty() {
            return Err(Kind::EmptyChunk { line: start });
        }
        Ok(chunk)
    }
}

fn read(raw: &str) -> Read<'_> {
    let marker = raw.trim_end();
    if marker == END_OF_FILE {
        return Read::EndOfFile;
    }
    if marker.starts_with("***") {
        return Read::Marker;
    }
    if marker == "@@" {
        return Read::Header(None);
    }
    if let Some(text) = marker.strip_prefix("@@ ") {
        return Read::Header((!is_range(text)).then_some(text));
    }
    match raw.chars().next() {
        None => Read::Line(Line::Context(String::new())),
        Some(' ') => Read::Line(Line::Context(raw[1..].to_owned())),
        Some('-') => Read::Line(Line::Remove(raw[1..].to_owned())),
        Some('+') => Read::Line(Line::Add(raw[1..].to_owned())),
        Some(_) => Read::Invalid,
    }
}

/// Whether a header's text is a unified-diff range (`-3,4 +3,5 @@…`).
fn is_range(text: &str) -> bool {
    let mut words = text.split(' ');
    let range = |word: Option<&str>, sign: char| {
        word.and_then(|w| w.strip_prefix(sign)).is_some_and(|w| {
            !w.is_empty()
                && w.split(',')
                    .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
    };
    range(words.next(), '-')
        && range(words.next(), '+')
        && words.next().is_some_and(|w| w.starts_with("@@"))
}

fn in_chunk(path: &str, chunk: usize, kind: Kind) -> PatchError {
    PatchError {
        file: Some(path.to_owned()),
        chunk: Some(chunk),
        kind,
    }
}
