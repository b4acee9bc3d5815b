//! Incremental Server-Sent Events decoder (the WHATWG "event stream
//! interpretation"). Bytes go in at any boundary; whole events come out,
//! and the stream's last event id and reconnection time (`id`, `retry`),
//! which an MCP client resumes a dropped stream with.
//! Lines are split on
//! bytes, so a chunk ending inside a UTF-8 sequence is harmless: a line is
//! decoded only once it is complete. Every buffer is bounded.
//!
//! Model providers' streams (`crate::model`) and MCP responses
//! (`crate::mcp`) both go through it; each maps [`SseError`] into its own
//! error type.

use crate::limits::SSE_LINE_BYTES_MAX;

/// A stream the decoder refuses. Invalid UTF-8 is not an error: the
/// standard decodes with replacement (U+FFFD).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// One line (field name and value) is longer than `max` bytes.
    #[error("an SSE line exceeds {max} bytes")]
    LineTooLong { max: usize },
    /// One event's `data:` lines, joined, are longer than `max` bytes.
    #[error("an SSE event's data exceeds {max} bytes")]
    DataTooLong { max: usize },
}

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, when the event had one.
    pub event: Option<String>,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
}

/// Bytes in at any boundary, whole events out. An error ends the stream:
/// callers push nothing after one.
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// The current, incomplete line.
    line: Vec<u8>,
    /// The previous chunk ended on `\r`: a leading `\n` completes that line
    /// ending rather than ending an empty line (which would dispatch).
    after_cr: bool,
    event: Option<String>,
    /// Each `data:` value followed by `\n`, as the standard builds it.
    data: String,
    /// The `id:` buffer, and the last event id it became at a dispatch.
    id: String,
    last_id: String,
    /// The last `retry:` (digits only), in milliseconds.
    retry_ms: Option<u64>,
}

impl SseDecoder {
    /// The last event id so far (set when an event is dispatched, one
    /// without data too, as the standard does), unless empty.
    pub fn last_event_id(&self) -> Option<&str> {
        Some(self.last_id.as_str()).filter(|id| !id.is_empty())
    }

    /// The reconnection time the stream asked for last (`retry:`).
    pub fn retry_ms(&self) -> Option<u64> {
        self.retry_ms
    }

    /// A new connection of the same stream (a resumption): the bytes of
    /// an event cut off are dropped; the last event id and reconnection
    /// time stay, as the standard's `EventSource` keeps them.
    pub fn reconnected(&mut self) {
        self.line.clear();
        self.after_cr = false;
        self.event = None;
        self.data.clear();
        self.id.clone_from(&self.last_id);
    }

    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>, SseError> {
        let mut events = Vec::new();
        let mut rest = bytes;
        while !rest.is_empty() {
            if self.after_cr {
                self.after_cr = false;
                if rest[0] == b'\n' {
                    rest = &rest[1..];
                    continue;
                }
            }
            match rest.iter().position(|&b| b == b'\n' || b == b'\r') {
                Some(end) => {
                    self.extend_line(&rest[..end])?;
                    self.after_cr = rest[end] == b'\r';
                    rest = &rest[end + 1..];
                    // Taken and put back so the buffer's capacity is reused.
                    let line = std::mem::take(&mut self.line);
                    let outcome = self.process_line(&line, &mut events);
                    self.line = line;
                    self.line.clear();
                    outcome?;
                }
                None => {
                    self.extend_line(rest)?;
                    break;
                }
            }
        }
        Ok(events)
    }

    fn extend_line(&mut self, bytes: &[u8]) -> Result<(), SseError> {
        if self.line.len() + bytes.len() > SSE_LINE_BYTES_MAX {
            return Err(SseError::LineTooLong {
                max: SSE_LINE_BYTES_MAX,
            });
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn process_line(&mut self, line: &[u8], events: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if line.is_empty() {
            self.dispatch(events);
            return Ok(());
        }
        // The standard decodes the stream as UTF-8 with replacement.
        let line = String::from_utf8_lossy(line);
        if line.starts_with(':') {
            return Ok(()); // a comment (keep-alive)
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_ref(), ""),
        };
        match field {
            "event" => self.event = Some(value.to_owned()),
            "data" => {
                if self.data.len() + value.len() + 1 > SSE_LINE_BYTES_MAX {
                    return Err(SseError::DataTooLong {
                        max: SSE_LINE_BYTES_MAX,
                    });
                }
                self.data.push_str(value);
                self.data.push('\n');
            }
            // An id holding NUL is ignored (the standard); the line bound
            // bounds it.
            "id" if !value.contains('\0') => self.id = value.to_owned(),
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                // Digits past u64 are no time anyone waits: the caller
                // clamps it.
                self.retry_ms = Some(value.parse().unwrap_or(u64::MAX));
            }
            _ => {} // unknown fields
        }
        Ok(())
    }

    fn dispatch(&mut self, events: &mut Vec<SseEvent>) {
        self.last_id.clone_from(&self.id);
        let event = self.event.take();
        if self.data.is_empty() {
            return; // the standard drops an event without data
        }
        let mut data = std::mem::take(&mut self.data);
        data.pop(); // the last line's `\n`
        events.push(SseEvent { event, data });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            event: event.map(str::to_owned),
            data: data.to_owned(),
        }
    }

    fn decode(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut decoder = SseDecoder::default();
        let mut out = Vec::new();
        for chunk in chunks {
            out.extend(decoder.push(chunk).unwrap());
        }
        out
    }

    #[test]
    fn fields_comments_and_multiline_data() {
        let stream = b": keep-alive\n\
            event: first\n\
            data: a\n\
            data:b\n\
            data\n\
            id: 7\n\
            retry: 100\n\
            \n\
            data: second\n\
            \n\
            event: no-data\n\
            \n\
            data: third\n\
            \n";
        assert_eq!(
            decode(&[stream]),
            vec![
                ev(Some("first"), "a\nb\n"),
                ev(None, "second"),
                // `event:` of an event without data does not leak into the next.
                ev(None, "third"),
            ]
        );
    }

    /// `id` becomes the last event id at the event's dispatch (one without
    /// data too: MCP's priming event); `retry` takes digits only.
    #[test]
    fn last_event_id_and_retry() {
        let mut d = SseDecoder::default();
        assert_eq!(d.push(b"id: e-1\nretry: 500\n").unwrap(), vec![]);
        assert_eq!((d.last_event_id(), d.retry_ms()), (None, Some(500)));
        assert_eq!(d.push(b"\n").unwrap(), vec![]);
        assert_eq!(d.last_event_id(), Some("e-1"));
        let events = d.push(b"retry: 5x\nid: a\0b\ndata: x\n\n").unwrap();
        assert_eq!(events, vec![ev(None, "x")]);
        assert_eq!((d.last_event_id(), d.retry_ms()), (Some("e-1"), Some(500)));
        d.push(b"id\n\n").unwrap();
        assert_eq!(d.last_event_id(), None, "an empty id resets it");
    }

    #[test]
    fn line_endings_across_chunks() {
        // \r\n split between chunks, a bare \r, and a \r\n blank line.
        let events = decode(&[b"data: x\r", b"\ndata: y\r", b"\r", b"\n", b"data: z\r\r"]);
        assert_eq!(events, vec![ev(None, "x\ny"), ev(None, "z")]);
    }

    #[test]
    fn incomplete_event_is_not_dispatched() {
        assert_eq!(decode(&[b"data: a\n"]), vec![]);
        assert_eq!(decode(&[b"data: a\n\ndata: b"]), vec![ev(None, "a")]);
    }

    #[test]
    fn utf8_split_inside_a_character() {
        let bytes = "data: héllo 🍄\n\n".as_bytes();
        for split in 0..=bytes.len() {
            let (a, b) = bytes.split_at(split);
            assert_eq!(decode(&[a, b]), vec![ev(None, "héllo 🍄")]);
        }
    }

    #[test]
    fn any_chunk_boundary_gives_the_same_events() {
        let stream = "event: a\r\ndata: one 🍄\r\n\r\n: ping\rdata: two\r\rdata: three\n\n";
        let bytes = stream.as_bytes();
        let whole = decode(&[bytes]);
        assert_eq!(
            whole,
            vec![ev(Some("a"), "one 🍄"), ev(None, "two"), ev(None, "three")]
        );
        for split in 0..=bytes.len() {
            let (a, b) = bytes.split_at(split);
            assert_eq!(decode(&[a, b]), whole, "split at {split}");
        }
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(decode(&singles), whole);
    }

    #[test]
    fn crlf_split_across_chunks_is_one_line_end() {
        // `\r` ends one chunk, `\n` starts the next: one line end, not an
        // empty line, so the event is dispatched once, at the blank line.
        assert_eq!(
            decode(&[b"data: a\r", b"\ndata: b\r\n\r", b"\n"]),
            vec![ev(None, "a\nb")]
        );
        let mut decoder = SseDecoder::default();
        assert_eq!(decoder.push(b"data: a\r").unwrap(), vec![]);
        assert_eq!(decoder.push(b"\n").unwrap(), vec![], "no dispatch yet");
        assert_eq!(decoder.push(b"\r").unwrap(), vec![ev(None, "a")]);
        assert_eq!(
            decoder.push(b"\n").unwrap(),
            vec![],
            "the \\n of that \\r\\n"
        );
    }

    #[test]
    fn invalid_utf8_is_replaced_not_refused() {
        let mut bytes = b"data: a".to_vec();
        bytes.extend_from_slice(&[0xff, 0xc3]); // a stray byte, a cut sequence
        bytes.extend_from_slice(b"b\n\n");
        for split in 0..=bytes.len() {
            let (a, b) = bytes.split_at(split);
            assert_eq!(decode(&[a, b]), vec![ev(None, "a\u{fffd}\u{fffd}b")]);
        }
    }

    #[test]
    fn a_line_at_the_limit_passes_one_byte_more_fails() {
        let mut decoder = SseDecoder::default();
        let prefix = b"data: ";
        let fill = vec![b'x'; SSE_LINE_BYTES_MAX - prefix.len()];
        decoder.push(prefix).unwrap();
        decoder.push(&fill).unwrap();
        let events = decoder.push(b"\n\n").unwrap();
        assert_eq!(events[0].data.len(), SSE_LINE_BYTES_MAX - prefix.len());

        decoder.push(prefix).unwrap();
        decoder.push(&fill).unwrap();
        let error = decoder.push(b"x").unwrap_err();
        assert_eq!(
            error,
            SseError::LineTooLong {
                max: SSE_LINE_BYTES_MAX
            }
        );
        assert_eq!(error.to_string(), "an SSE line exceeds 1048576 bytes");
    }

    #[test]
    fn a_line_over_the_limit_fails_within_one_chunk_too() {
        let mut line = vec![b'x'; SSE_LINE_BYTES_MAX + 1];
        line.extend_from_slice(b"\n\n");
        let error = SseDecoder::default().push(&line).unwrap_err();
        assert!(matches!(error, SseError::LineTooLong { .. }), "{error}");
    }

    #[test]
    fn joined_data_is_bounded_too() {
        let mut decoder = SseDecoder::default();
        let line = format!("data: {}\n", "x".repeat(SSE_LINE_BYTES_MAX / 4));
        let mut result = Ok(Vec::new());
        for _ in 0..5 {
            result = decoder.push(line.as_bytes());
            if result.is_err() {
                break;
            }
        }
        let error = result.unwrap_err();
        assert_eq!(
            error,
            SseError::DataTooLong {
                max: SSE_LINE_BYTES_MAX
            }
        );
        assert_eq!(
            error.to_string(),
            "an SSE event's data exceeds 1048576 bytes"
        );
    }
}
